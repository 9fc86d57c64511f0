"""RocketMQ's plain ACL on a running broker port and name server (loopback, in process): off by
default, ``aclEnable=true`` turns it on, hanet's clients sign with credentials, refusals are
NO_PERMISSION, the file is reloaded, and a consumer of one group cannot commit another's
offsets (the attack of issue 20)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
from broker_support import config, fmt, put, running

from hanet.broker import Broker, apply_properties
from hanet.client import (
    BrokerClient,
    BrokerRequestError,
    Credentials,
    NameServerClient,
    RemotingError,
    signing,
)
from hanet.errors import ConfigError
from hanet.ha import BrokerRole
from hanet.namesrv import NameServer
from hanet.protocol import BrokerRegistration, ResponseCode
from hanet.testing import wait_until

ACL = """
accounts:
  - accessKey: producerA
    secretKey: producer-secret
    defaultTopicPerm: DENY
    topicPerms:
      - orders=PUB
  - accessKey: consumerA
    secretKey: consumer-secret
    defaultTopicPerm: SUB
    defaultGroupPerm: DENY
    groupPerms:
      - groupA=SUB
  - accessKey: operator
    secretKey: operator-secret
    admin: true
"""

PRODUCER = Credentials("producerA", "producer-secret")
CONSUMER = Credentials("consumerA", "consumer-secret")
OPERATOR = Credentials("operator", "operator-secret")


@asynccontextmanager
async def connect(
    host: str, port: int, credentials: Credentials | None
) -> AsyncIterator[BrokerClient]:
    """A client signing with ``credentials`` (what ``--access-key/--secret-key`` do)."""
    with signing(credentials):
        async with BrokerClient.connect(host, port) as client:
            yield client


def acl_file(root: Path, text: str = ACL) -> Path:
    path = root / "config" / "plain_acl.yml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_acl_is_off_by_default_and_broker_conf_turns_it_on(tmp_path: Path) -> None:
    assert not config(tmp_path).acl_enable
    cfg = apply_properties({"aclEnable": "true", "storePathRootDir": str(tmp_path)})
    assert cfg.acl_enable
    with pytest.raises(ConfigError, match=r"plain_acl\.yml does not exist"):
        Broker(cfg)
    acl_file(tmp_path, "accounts:\n  - accessKey: x\n")
    with pytest.raises(ConfigError, match="accessKey must be longer than 6"):
        Broker(cfg)


async def test_signed_requests_pass_and_the_rest_is_refused(tmp_path: Path) -> None:
    acl_file(tmp_path)
    async with running(config(tmp_path, acl_enable=True)) as (broker, addresses):
        assert addresses.broker is not None
        host, port = addresses.broker
        async with connect(host, port, PRODUCER) as client:
            reply = await client.put("orders", b"hello")
            assert reply.status.name == "PUT_OK"
            with pytest.raises(BrokerRequestError) as caught:
                await client.put("payments", b"no PUB here")
            assert caught.value.code == ResponseCode.NO_PERMISSION
            assert "No default permission for topic:payments" in str(caught.value)
        async with connect(host, port, None) as client:  # unsigned
            with pytest.raises(BrokerRequestError, match="No accessKey is configured"):
                await client.put("orders", b"x")
        wrong = Credentials("producerA", "not-the-secret")
        async with connect(host, port, wrong) as client:
            with pytest.raises(BrokerRequestError, match="Check signature failed"):
                await client.put("orders", b"x")
        with signing(CONSUMER):  # how the verbs sign
            async with BrokerClient.connect(host, port) as client:
                pulled = await client.pull("orders", reply.queue_id, group="groupA")
                assert [m.body for m in pulled.messages] == [b"hello"]
        assert broker.acl is not None and broker.acl.guard.refused == 3


async def test_a_consumer_cannot_commit_another_groups_offsets(tmp_path: Path) -> None:
    acl_file(tmp_path)
    async with running(config(tmp_path, acl_enable=True)) as (_broker, addresses):
        assert addresses.broker is not None
        host, port = addresses.broker
        async with connect(host, port, OPERATOR) as admin:
            await admin.commit_offset("groupB", "orders", 0, 7)  # the victim's progress
        async with connect(host, port, CONSUMER) as client:
            await client.commit_offset("groupA", "orders", 0, 3)  # its own group: fine
            with pytest.raises(BrokerRequestError) as caught:
                await client.commit_offset("groupB", "orders", 0, 100)
            assert caught.value.code == ResponseCode.NO_PERMISSION
            assert "No default permission for group:groupB" in str(caught.value)
            with pytest.raises(BrokerRequestError, match="group:groupB"):
                await client.query_offset("groupB", "orders", 0)
            with pytest.raises(BrokerRequestError, match="group:groupB"):
                await client.pull("orders", queue_id=0, offset=0, group="groupB")
        async with connect(host, port, OPERATOR) as admin:
            assert await admin.query_offset("groupB", "orders", 0) == 7  # untouched
            assert await admin.query_offset("groupA", "orders", 0) == 3


async def test_the_file_is_reloaded_while_serving(tmp_path: Path) -> None:
    path = acl_file(tmp_path)
    async with running(config(tmp_path, acl_enable=True)) as (_broker, addresses):
        assert addresses.broker is not None
        async with connect(*addresses.broker, PRODUCER) as client:
            with pytest.raises(BrokerRequestError, match="topic:payments"):
                await client.put("payments", b"x")
            path.write_text(ACL.replace("- orders=PUB", "- orders=PUB\n      - payments=PUB"))
            os.utime(path, ns=(1, 1))
            with trio.fail_after(10):
                while True:
                    await trio.sleep(0.2)
                    try:
                        reply = await client.put("payments", b"now allowed")
                    except BrokerRequestError:
                        continue
                    break
            assert reply.status.name == "PUT_OK"


async def test_name_server_acl(tmp_path: Path) -> None:
    path = acl_file(tmp_path)
    server = NameServer(("127.0.0.1", 0), acl_file=path)
    async with trio.open_nursery() as nursery:
        address = await nursery.start(server.run)
        registration = BrokerRegistration(
            cluster="DefaultCluster",
            broker_name="broker-a",
            broker_id=0,
            role="ASYNC_MASTER",
            broker_address="127.0.0.1:10911",
            ha_address="127.0.0.1:10912",
        )
        with pytest.raises(RemotingError, match="No accessKey is configured"):
            await NameServerClient([address]).cluster()
        with signing(CONSUMER), pytest.raises(RemotingError, match="Need admin permission"):
            await NameServerClient([address]).register_broker(registration)
        with signing(OPERATOR):  # a broker signing with an admin account registers
            await NameServerClient([address]).register_broker(registration)
        with signing(CONSUMER):  # any account may look up
            assert await NameServerClient([address]).cluster() is not None
        nursery.cancel_scope.cancel()


async def test_a_slave_copies_from_an_acl_master_when_it_signs(tmp_path: Path) -> None:
    """A slave's metadata copy (GET_ALL_* requests) is refused unsigned and works signed with
    an admin account (``hanet slave --access-key/--secret-key``)."""
    acl_file(tmp_path / "m")
    async with running(config(tmp_path / "m", acl_enable=True)) as (master, m):
        await put(master, "orders", b"a")
        master.offsets.commit("groupA", "orders", 0, 1)
        slave_cfg = config(
            tmp_path / "s",
            broker_role=BrokerRole.SLAVE,
            ha_master_address=fmt(m.ha),
            master_broker_address=fmt(m.broker),
            slave_sync_interval=0.2,
        )
        async with running(slave_cfg, serve_broker_port=False) as (slave, _):
            unsigned = slave.sync
            assert unsigned is not None
            await wait_until(lambda: unsigned.last_error is not None)
            assert "No accessKey is configured" in str(unsigned.last_error)
            assert slave.offsets.table() == {}
        with signing(OPERATOR):
            async with running(slave_cfg, serve_broker_port=False) as (slave, _):
                sync = slave.sync
                assert sync is not None
                await wait_until(lambda: sync.syncs >= 1 and sync.last_error is None)
                assert slave.offsets.table() == {("orders", "groupA"): {0: 1}}
