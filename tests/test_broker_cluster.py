"""The broker in a cluster: requests it does not serve, the pull suggestion, metadata sync and
registration with name servers (in-process; a fake name server where one is needed)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from hanet.boot import serve_listeners
from hanet.broker import Broker, BrokerAddresses, DLedgerBrokerService, suggest_broker_id
from hanet.client import BrokerClient, BrokerRequestError, NameServerConnection
from hanet.dledger import DLedgerNode, MemoryNetwork, NodeConfig, RaftConfig
from hanet.ha import BrokerConfig, BrokerRole
from hanet.protocol import (
    MASTER_ID,
    BrokerRegistration,
    ErrorCode,
    PullRequest,
    PullResponse,
    PullStatus,
    PutMessage,
)
from hanet.store import PutStatus

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


# -- the pull suggestion ---------------------------------------------------------------------


def test_suggest_broker_id_rules() -> None:
    slow = partial(suggest_broker_id, memory=100, which_broker=1)
    assert slow(101, slave_read_enable=True) == 1
    assert slow(100, slave_read_enable=True) == MASTER_ID  # not more than the memory
    assert slow(10**9, slave_read_enable=False) == MASTER_ID
    assert suggest_broker_id(5, memory=1, slave_read_enable=True, which_broker=3) == 3


async def _fill(broker: Broker, count: int, size: int = 200) -> None:
    for i in range(count):
        (reply,) = await broker.put([PutMessage("T", b"%05d" % i + b"x" * size, queue_id=0)])
        assert reply.status is PutStatus.PUT_OK


async def test_a_master_suggests_the_slave_to_a_consumer_far_behind(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # memory = 10_000 * 40 % = 4000 bytes: a consumer more than that behind reads from disk.
    cfg = config(
        tmp_path,
        total_memory_bytes=10_000,
        slave_read_enable=True,
        which_broker_when_consume_slowly=2,
    )
    async with running(cfg, serve_broker_port=False) as (broker, _):
        await _fill(broker, 100)
        end = broker.store.max_offset
        assert end > 20_000

        def pull(offset: int, count: int = 1) -> PullResponse:
            return broker.pull(PullRequest(1, "T", 0, offset, count))

        far = pull(0)
        assert far.status is PullStatus.FOUND and far.suggested_broker_id == 2
        size = len(far.records[0])
        # Exactly at the memory figure: the master; one byte more: the slave.
        at = 99 - 4000 // size  # the first offset whose pull leaves <= 4000 bytes behind
        assert pull(at).suggested_broker_id == MASTER_ID
        assert pull(at - 1).suggested_broker_id == 2
        assert pull(0, 100).suggested_broker_id == MASTER_ID  # everything pulled: none behind
        assert pull(100).status is PullStatus.OFFSET_OVERFLOW_ONE
        assert pull(100).suggested_broker_id == MASTER_ID
    async with running(attrs.evolve(cfg, slave_read_enable=False), serve_broker_port=False) as (
        broker,
        _,
    ):
        assert broker.pull(PullRequest(1, "T", 0, 0, 1)).suggested_broker_id == MASTER_ID


async def test_a_slave_suggests_itself_only_with_slave_read_enable(tmp_path: Path) -> None:
    async with running(config(tmp_path / "m")) as (master, addresses):
        assert addresses.ha is not None
        await _fill(master, 50)
        end = master.store.max_offset

        def slave_config(name: str, enable: bool) -> BrokerConfig:
            return config(
                tmp_path / name,
                broker_role=BrokerRole.SLAVE,
                ha_master_address=f"127.0.0.1:{addresses.ha[1]}",  # type: ignore[index]
                slave_read_enable=enable,
                total_memory_bytes=10_000,
            )

        async with (
            running(slave_config("reads", True), serve_broker_port=False) as (reads, _),
            running(slave_config("no-reads", False), serve_broker_port=False) as (refuses, _),
        ):
            stores = (reads.store, refuses.store)
            with trio.fail_after(10):
                while min(s.dispatched_offset for s in stores) < end:  # noqa: ASYNC110
                    await trio.sleep(0.01)
            request = PullRequest(1, "T", 0, 0, 1)
            assert reads.pull(request).status is PullStatus.FOUND
            assert reads.pull(request).suggested_broker_id == 1  # far behind: stay here
            assert reads.pull(PullRequest(1, "T", 0, 49, 1)).suggested_broker_id == MASTER_ID
            assert refuses.pull(request).status is PullStatus.FOUND
            assert refuses.pull(request).suggested_broker_id == MASTER_ID
