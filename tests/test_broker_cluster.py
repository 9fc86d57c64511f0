"""The broker in a cluster: requests it does not serve, the pull suggestion, metadata sync and
registration with name servers (in-process; a fake name server where one is needed)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from hanet.boot import serve_listeners
from hanet.broker import Broker, BrokerAddresses, DLedgerBrokerService
from hanet.client import BrokerClient, BrokerRequestError, NameServerConnection
from hanet.dledger import DLedgerNode, MemoryNetwork, NodeConfig, RaftConfig
from hanet.ha import BrokerConfig
from hanet.protocol import BrokerRegistration, ErrorCode

FILE = 64 * 1024
REGISTRATION = BrokerRegistration("C", "b", 0, "ASYNC_MASTER", "127.0.0.1:1")


def config(root: Path, **changes: Any) -> BrokerConfig:
    return BrokerConfig(
        store_path_root_dir=root,
        listen_port=0,
        ha_listen_port=0,
        mapped_file_size_commit_log=FILE,
        **changes,
    )


@asynccontextmanager
async def running(
    cfg: BrokerConfig, **kwargs: Any
) -> AsyncIterator[tuple[Broker, BrokerAddresses]]:
    async with trio.open_nursery() as nursery:
        broker = Broker(cfg, **kwargs)
        addresses: BrokerAddresses = await nursery.start(broker.run)
        yield broker, addresses
        nursery.cancel_scope.cancel()


# -- requests a broker port does not serve ---------------------------------------------------


async def test_a_name_server_request_to_a_broker_is_not_supported(tmp_path: Path) -> None:
    async with running(config(tmp_path)) as (_, addresses):
        assert addresses.broker is not None
        async with NameServerConnection.connect(*addresses.broker) as c:
            with pytest.raises(BrokerRequestError) as info:
                await c.register_broker(REGISTRATION)
            assert info.value.code is ErrorCode.NOT_SUPPORTED
            assert "RegisterBroker is not served by a broker port" in str(info.value)
            with pytest.raises(BrokerRequestError, match="NOT_SUPPORTED"):
                await c.route("T")
            assert c.is_connected  # the connection stays open
        async with BrokerClient.connect(*addresses.broker) as b:
            assert (await b.status()).role == "ASYNC_MASTER"


async def test_a_dledger_broker_port_serves_offsets_and_refuses_metadata(tmp_path: Path) -> None:
    raft = RaftConfig(election_timeout=0.3, heartbeat_interval=0.05, retransmit_timeout=0.15)
    node_config = NodeConfig(
        group="g", node_id="solo", peers={"solo": "x:0"}, store_dir=tmp_path, raft=raft
    )
    node = DLedgerNode(node_config, connector=MemoryNetwork().connector_for("solo"), listen=False)
    async with trio.open_nursery() as nursery:
        await nursery.start(node.run)
        service = DLedgerBrokerService(node)
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        await nursery.start(partial(serve_listeners, service.initialize, listeners))
        async with BrokerClient.connect("127.0.0.1", port) as c:
            await c.commit_offset("grp", "T", 2, 9)
            assert await c.query_offset("grp", "T", 2) == 9
            assert await c.query_offset("grp", "T", 0) is None
            with pytest.raises(BrokerRequestError) as info:
                await c.metadata()
            assert info.value.code is ErrorCode.NOT_SUPPORTED
        nursery.cancel_scope.cancel()
