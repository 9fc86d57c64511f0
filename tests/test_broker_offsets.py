"""Consumer offsets: the store, its file (atomic, with a .bak), the broker port requests, the
flush every 5 s and at shutdown (in-process; virtual time where no socket is involved)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import trio
import trio.testing
from broker_support import commit, config, connect, pull, query, running, send

from hanet.broker import (
    MAX_QUEUE_ID,
    OFFSETS_FILE,
    Broker,
    ConfigFileError,
    ConsumerOffsets,
    ConsumerOffsetsFull,
    write_config_file,
)
from hanet.ha import BrokerRole
from hanet.protocol import ResponseCode

# -- the store and its file -------------------------------------------------------------------


def test_commit_query_and_the_rocketmq_file_shape(tmp_path: Path) -> None:
    path = tmp_path / "config" / "consumerOffset.json"
    offsets = ConsumerOffsets(path)
    assert offsets.query("g", "T", 0) == -1
    offsets.commit("g", "T", 0, 12)
    offsets.commit("g", "T", 3, 7)
    offsets.commit("h", "T", 0, 1)
    assert (offsets.query("g", "T", 0), offsets.query("g", "T", 3)) == (12, 7)
    assert offsets.query("g", "T", 1) == -1 and offsets.query("g", "U", 0) == -1
    assert (offsets.dirty, offsets.persist(), offsets.dirty) == (True, True, False)
    assert not offsets.persist()  # unchanged: not written again
    assert json.loads(path.read_text()) == {
        "offsetTable": {"T@g": {"0": 12, "3": 7}, "T@h": {"0": 1}}
    }
    offsets.commit("g", "T", 0, 12)  # the same offset: nothing to write
    assert not offsets.dirty
    assert ConsumerOffsets.load(path).table() == offsets.table()


async def test_persist_async_writes_a_snapshot_in_a_worker_thread(tmp_path: Path) -> None:
    """The file is written off the trio thread; a commit made meanwhile stays dirty; a failed
    write makes the table dirty again."""
    path = tmp_path / "consumerOffset.json"
    offsets = ConsumerOffsets(path)
    offsets.commit("g", "T", 0, 1)
    assert await offsets.persist_async()
    assert not offsets.dirty and offsets.persists == 1 and offsets.last_persisted is not None
    assert json.loads(path.read_text())["offsetTable"] == {"T@g": {"0": 1}}
    assert not await offsets.persist_async()
    offsets.commit("g", "T", 0, 2)
    path.with_name(path.name + ".tmp").mkdir()  # the temporary file cannot be written
    with pytest.raises(OSError):
        await offsets.persist_async()
    assert (offsets.dirty, offsets.last_error is not None, offsets.persists) == (True, True, 1)
    path.with_name(path.name + ".tmp").rmdir()
    assert await offsets.persist_async()
    assert json.loads(path.read_text())["offsetTable"] == {"T@g": {"0": 2}}
    assert offsets.last_error is None


def test_the_table_is_bounded_and_updates_of_kept_offsets_always_pass(tmp_path: Path) -> None:
    offsets = ConsumerOffsets(max_entries=2, max_queue_offsets=3)
    offsets.commit("g", "T", 0, 1)
    offsets.commit("g", "U", 0, 1)
    with pytest.raises(ConsumerOffsetsFull, match=r"at most 2\): T@h is not added"):
        offsets.commit("h", "T", 0, 1)
    offsets.commit("g", "T", 1, 1)
    with pytest.raises(ConsumerOffsetsFull, match="at most 3"):
        offsets.commit("g", "T", 2, 1)
    for queue_id in (-1, MAX_QUEUE_ID + 1):
        with pytest.raises(ConsumerOffsetsFull, match="outside"):
            ConsumerOffsets().commit("g", "T", queue_id, 1)
    offsets.commit("g", "T", 0, 9)  # an offset the table holds: always updated
    assert offsets.query("g", "T", 0) == 9
    offsets.update({("T", "g"): {0: 10}})  # the master's table: replaces (one offset fewer)
    offsets.commit("g", "T", 5, 1)
    assert offsets.table() == {("T", "g"): {0: 10, 5: 1}, ("U", "g"): {0: 1}}


def test_a_write_keeps_the_previous_file_as_bak_and_leaves_no_tmp(tmp_path: Path) -> None:
    path = tmp_path / "consumerOffset.json"
    offsets = ConsumerOffsets(path)
    offsets.commit("g", "T", 0, 1)
    offsets.persist()
    offsets.commit("g", "T", 0, 2)
    offsets.persist()
    assert json.loads(path.read_text())["offsetTable"] == {"T@g": {"0": 2}}
    assert json.loads((tmp_path / "consumerOffset.json.bak").read_text())["offsetTable"] == {
        "T@g": {"0": 1}
    }
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "consumerOffset.json",
        "consumerOffset.json.bak",
    ]


def test_missing_file_is_an_empty_start(tmp_path: Path) -> None:
    assert ConsumerOffsets.load(tmp_path / "nope.json").table() == {}


@pytest.mark.parametrize(
    "content", [b"{not json", b"[1, 2]", b'{"offsetTable": {"no-at-sign": {}}}', b"\xff\xfe"]
)
def test_a_corrupt_file_starts_from_the_bak_and_says_so(
    tmp_path: Path, content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "consumerOffset.json"
    write_config_file(path, {"offsetTable": {"T@g": {"0": 5}}})
    write_config_file(path, {"offsetTable": {"T@g": {"0": 9}}})
    path.write_bytes(content)
    with caplog.at_level(logging.ERROR, "hanet.broker"):
        offsets = ConsumerOffsets.load(path)
    assert offsets.table() == {("T", "g"): {0: 5}}
    assert str(path) in caplog.text and "consumerOffset.json.bak" in caplog.text


def test_a_corrupt_file_without_a_usable_bak_refuses_to_start(tmp_path: Path) -> None:
    path = tmp_path / "consumerOffset.json"
    path.write_text("{oops")
    with pytest.raises(ConfigFileError, match=r"consumerOffset\.json is unusable.*no consumer"):
        ConsumerOffsets.load(path)
    (tmp_path / "consumerOffset.json.bak").write_text('{"offsetTable": 3}')
    with pytest.raises(ConfigFileError, match=r"\.bak is unusable too"):
        ConsumerOffsets.load(path)


def test_a_crash_between_the_renames_reads_the_bak(tmp_path: Path) -> None:
    path = tmp_path / "consumerOffset.json"
    write_config_file(path, {"offsetTable": {"T@g": {"1": 3}}})
    path.rename(tmp_path / "consumerOffset.json.bak")
    assert ConsumerOffsets.load(path).table() == {("T", "g"): {1: 3}}


def test_update_takes_each_topic_group_of_the_master(tmp_path: Path) -> None:
    offsets = ConsumerOffsets(tmp_path / "o.json", {("T", "g"): {0: 1, 1: 1}, ("U", "g"): {0: 4}})
    offsets.persist()
    offsets.update({("T", "g"): {0: 5}})
    assert offsets.table() == {("T", "g"): {0: 5}, ("U", "g"): {0: 4}}
    assert offsets.dirty


def test_merge_keeps_the_larger_offset_of_each_queue_and_says_what_the_other_lacks(
    tmp_path: Path,
) -> None:
    # The slave's table: commits made to it while the master was down.
    slave = ConsumerOffsets(tmp_path / "o.json", {("T", "g"): {0: 9, 1: 2}, ("U", "g"): {0: 4}})
    slave.persist()
    master = {("T", "g"): {0: 5, 1: 6, 2: 1}, ("V", "h"): {0: 3}}
    newer = slave.merge(master)
    assert slave.table() == {
        ("T", "g"): {0: 9, 1: 6, 2: 1},
        ("U", "g"): {0: 4},
        ("V", "h"): {0: 3},
    }
    assert newer == {("T", "g"): {0: 9}, ("U", "g"): {0: 4}}
    assert slave.dirty
    # A second merge with what the master took changes nothing.
    slave.persist()
    assert slave.merge(slave.table()) == {} and not slave.dirty


# -- in a broker ------------------------------------------------------------------------------


async def test_offsets_are_flushed_every_interval_and_at_shutdown(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    cfg = config(tmp_path, flush_consumer_offset_interval=5.0)
    path = tmp_path / OFFSETS_FILE
    async with running(cfg, serve_broker_port=False) as (broker, _):
        broker.offsets.commit("g", "T", 0, 10)
        await trio.sleep(4.9)
        assert not path.exists()
        await trio.sleep(0.2)
        # The write runs in a worker thread (real time, while the mock clock jumps): waiting
        # for the offsets' own lock waits for the write in flight.
        await broker.offsets.persist_async()
        assert json.loads(path.read_text())["offsetTable"] == {"T@g": {"0": 10}}
        broker.offsets.commit("g", "T", 0, 11)
        assert broker.offsets.persists == 1
        await trio.sleep(1)
    assert json.loads(path.read_text())["offsetTable"] == {"T@g": {"0": 11}}
    async with running(cfg, serve_broker_port=False) as (broker, _):
        assert broker.offsets.query("g", "T", 0) == 11


async def test_a_broker_with_corrupt_offsets_and_no_bak_does_not_start(tmp_path: Path) -> None:
    path = tmp_path / OFFSETS_FILE
    path.parent.mkdir(parents=True)
    path.write_text("garbage")
    with pytest.raises(ConfigFileError, match=r"consumerOffset\.json"):
        await Broker(config(tmp_path)).run()
    # The store was closed cleanly: a broker starts once the file is moved away.
    path.rename(tmp_path / "moved.json")
    async with running(config(tmp_path)) as (broker, _):
        assert broker.offsets.query("g", "T", 0) == -1


async def test_commit_and_query_on_the_broker_port_of_a_master_and_a_slave(
    tmp_path: Path,
) -> None:
    async with running(config(tmp_path / "m")) as (_, master):
        assert master.broker is not None and master.ha is not None
        slave_cfg = config(
            tmp_path / "s",
            broker_role=BrokerRole.SLAVE,
            ha_master_address=f"127.0.0.1:{master.ha[1]}",
        )
        async with running(slave_cfg) as (slave, slave_addresses):
            async with connect(master.broker) as c:
                # A new group of a queue that does not exist yet: 0 (nothing is on disk).
                assert await query(c, "g", "T", 0) == 0
                assert (await commit(c, "g", "T", 0, 42)).code == ResponseCode.SUCCESS
                assert await query(c, "g", "T", 0) == 42
                # The offset carried in a pull (sysFlag bit 0x1) is committed too.
                await send(c, "T", b"x", 0)
                await pull(c, "T", 0, 0, group="g", commit_offset=43)
                assert await query(c, "g", "T", 0) == 43
            async with connect(slave_addresses.broker) as c:
                await commit(c, "g", "T", 1, 7)  # the master unreachable: a slave takes it
                assert await query(c, "g", "T", 1) == 7
            assert slave.offsets.table() == {("T", "g"): {1: 7}}
    on_disk = json.loads((tmp_path / "s" / OFFSETS_FILE).read_text())
    assert on_disk["offsetTable"] == {"T@g": {"1": 7}}


async def test_a_new_group_on_a_queue_far_behind_is_not_found(tmp_path: Path) -> None:
    cfg = config(tmp_path, total_memory_bytes=100 * 1024)  # 40 %: 40 KiB count as in memory
    async with running(cfg) as (_, addresses), connect(addresses.broker) as c:
        await send(c, "T", b"first", 0)
        assert await query(c, "g", "T", 0) == 0
        for _ in range(60):
            await send(c, "T", b"x" * 1000, 1)
        assert await query(c, "g", "T", 0) is None  # its first message is on disk only


async def test_a_commit_past_the_bounds_is_answered_system_error(tmp_path: Path) -> None:
    async with running(config(tmp_path)) as (broker, addresses), connect(addresses.broker) as c:
        broker.offsets.max_entries = 1
        assert (await commit(c, "g", "T", 0, 1)).code == ResponseCode.SUCCESS
        refused = await commit(c, "g", "U", 0, 1)
        assert refused.code == ResponseCode.SYSTEM_ERROR
        assert "U@g is not added" in str(refused.remark)
        assert (await commit(c, "g", "T", 0, 2)).code == ResponseCode.SUCCESS
        assert await query(c, "g", "T", 0) == 2
