"""Retention in a running broker (in process, loopback TCP): files deleted by the service,
pulls below the new min answered as RocketMQ answers them, GET_MIN_OFFSET, a slave holding the
files it has not received, and ``autoCreateTopicEnable=false``."""

from __future__ import annotations

from pathlib import Path

import trio
from broker_support import FILE, config, connect, pull, put, running, send

from hanet.broker import Broker
from hanet.ha import BrokerRole
from hanet.protocol import (
    GetMinOffsetRequestHeader,
    GetMinOffsetResponseHeader,
    RemotingCommand,
    RequestCode,
    ResponseCode,
)
from hanet.testing import wait_until

EVERY_HOUR = ";".join(str(h) for h in range(24))
RETENTION = {
    "delete_when": EVERY_HOUR,
    "file_reserved_time": 0,
    "clean_resource_interval": 0.1,
    "delete_commit_log_files_interval": 0.0,
    "delete_consume_queue_files_interval": 0.0,
}


async def fill(broker: Broker, topic: str, files: int) -> None:
    """Put 1 KiB messages until the commit log has ``files`` files."""
    while len(broker.store.commit_log.files) < files:
        result = await put(broker, topic, b"m" * 1024, queue_id=0)
        assert result.ok, result


async def min_offset(conn: object, topic: str, queue_id: int) -> int:
    header = GetMinOffsetRequestHeader(topic, queue_id)
    answer = await conn.invoke(  # type: ignore[attr-defined]
        RemotingCommand.request(RequestCode.GET_MIN_OFFSET, header.to_fields())
    )
    assert answer.code == ResponseCode.SUCCESS
    return GetMinOffsetResponseHeader.from_fields(answer.fields).offset


async def test_a_broker_deletes_expired_files_and_moves_pulls_to_the_new_min(
    tmp_path: Path,
) -> None:
    async with running(config(tmp_path / "m", **RETENTION)) as (broker, addresses):
        await fill(broker, "T", 4)
        await wait_until(lambda: len(broker.store.commit_log.files) == 1)
        store = broker.store
        assert store.min_offset == 3 * FILE
        low = store.min_queue_offset("T", 0)
        assert low > 0
        async with connect(addresses.broker) as conn:
            assert await min_offset(conn, "T", 0) == low
            pulled = await pull(conn, "T", 0, 0)
            assert pulled.code == ResponseCode.PULL_OFFSET_MOVED
            assert pulled.header is not None
            assert pulled.header.next_begin_offset == pulled.header.min_offset == low
            found = await pull(conn, "T", 0, low)
            assert found.code == ResponseCode.SUCCESS
            assert found.records[0].queue_offset == low
            assert found.records[0].physical_offset >= 3 * FILE
        retention = broker.retention
        assert retention is not None and retention.statistics.deleted_files == 3


async def test_a_connected_slave_keeps_the_files_it_has_not_received(tmp_path: Path) -> None:
    master_config = config(tmp_path / "m", full_sync=True, **RETENTION)
    async with running(master_config) as (master, addresses):
        await fill(master, "T", 3)
        slave_config = config(
            tmp_path / "s",
            broker_role=BrokerRole.SLAVE,
            ha_master_address=f"127.0.0.1:{addresses.ha[1] if addresses.ha else 0}",
            **RETENTION,
        )
        async with running(slave_config, serve_broker_port=False) as (slave, _):
            await wait_until(lambda: slave.store.max_offset == master.store.max_offset)
            await fill(master, "T", 6)
            # the slave keeps up: the master deletes all but its last file
            await wait_until(lambda: len(master.store.commit_log.files) == 1)
            # the slave deletes its own expired files as RocketMQ's slaves do
            await wait_until(lambda: len(slave.store.commit_log.files) == 1)
        # the slave is gone: it holds nothing; connected and stalled, it would
        low = master.store.min_offset
        await fill(master, "T", 3)
        await wait_until(lambda: master.store.min_offset > low)


async def test_a_stalled_slave_holds_files_until_it_acknowledges(tmp_path: Path) -> None:
    master_config = config(tmp_path / "m", **RETENTION)
    async with running(master_config) as (master, addresses):
        await fill(master, "T", 2)
        assert addresses.ha is not None
        # a slave that asks from offset FILE + 1 record, then never acknowledges anything more
        stream = await trio.open_tcp_stream(*addresses.ha)
        start = FILE
        await stream.send_all(start.to_bytes(8, "big"))
        await wait_until(
            lambda: (
                master.master is not None
                and any(s.ack_offset == start for s in master.master.status().slaves)
            )
        )
        await fill(master, "T", 5)
        await trio.sleep(1.0)  # several rounds
        assert master.store.min_offset == FILE  # the file holding its offset and later kept
        retention = master.retention
        assert retention is not None
        assert retention.statistics.held_by is not None
        assert retention.statistics.held_by[1] == start
        await stream.aclose()  # gone: it holds nothing any more
        await wait_until(lambda: len(master.store.commit_log.files) == 1)


async def test_auto_create_topic_disabled_answers_topic_not_exist(tmp_path: Path) -> None:
    cfg = config(tmp_path / "m", auto_create_topic_enable=False)
    async with running(cfg) as (broker, ad), connect(ad.broker) as conn:
        sent = await send(conn, "Unknown", b"x")
        assert sent.code == ResponseCode.TOPIC_NOT_EXIST
        assert sent.remark == "topic[Unknown] not exist, apply first please!"
        assert "Unknown" not in broker.topic_table
        assert "TBW102" not in broker.topic_table  # RocketMQ registers it only with auto
        broker.topic_table.ensure("Known", 4)
        assert (await send(conn, "Known", b"x")).code == ResponseCode.SUCCESS
        assert broker.store.max_offset > 0
