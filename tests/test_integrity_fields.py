"""Whole-record integrity: one flipped bit in any field of a record on a master's disk is
named, with the record's offset, by every reader: the master before it pushes, a slave before
it keeps, ``hanet verify``, recovery and a pull. Records carry RocketMQ 5's whole-record CRC
property (``__CRC32#``), which a RocketMQ 5 reader checks the same way."""

from __future__ import annotations

import contextlib
import logging
import shutil
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import trio.testing
from broker_support import broker_status

from hanet.broker import BrokerMetrics, read_log, serve_pull
from hanet.cli import main
from hanet.ha import BrokerConfig, HAMaster
from hanet.protocol import (
    BrokerStatus,
    DamagedRangeInfo,
    HanetRequestCode,
    RemotingCommand,
    ResponseCode,
)
from hanet.store import (
    CommitLogStore,
    CorruptRecordError,
    Message,
    MessageRecord,
    StoreConfig,
    StoreLayoutError,
    StoreRole,
    decode_record,
    encode_record,
    scan_records,
)
from hanet.store.lowlevel import (
    CRC32_PROPERTY,
    CRC32_RESERVED_LEN,
    native_scan,
    record_crc,
    scan_index_py,
)
from hanet.testing import flip_store_byte

FILE = 16384
REPORT = struct.Struct(">q")
HEADER = struct.Struct(">qi")

# (field, byte position in an IPv4 record, mask XORed into that byte). Topic, body and
# properties positions are found per record (they follow the variable-length body).
FIELDS = {
    "total size": (3, 0x01),
    "magic": (7, 0x04),
    "body crc": (11, 0x01),
    "queue id": (15, 0x01),
    "flag": (19, 0x01),
    "queue offset": (27, 0x01),
    "physical offset": (35, 0x01),
    "sys flag": (39, 0x02),  # MULTI_TAGS: a defined bit, only the whole-record CRC sees it
    "sys flag host bit": (39, 0x10),
    "born timestamp": (47, 0x01),
    "born host": (48, 0x01),
    "store timestamp": (63, 0x01),
    "store host": (67, 0x01),
    "store port": (71, 0x01),
    "reconsume times": (75, 0x01),
    "prepared transaction offset": (83, 0x01),
    "body length": (87, 0x01),
    "body": (88, 0x01),
    "topic": (-1, 0x02),  # resolved below
    "properties": (-2, 0x01),
    "crc property digit": (-3, 0x01),
    "crc property name": (-4, 0x01),
}


def open_store(path: Path, role: StoreRole = StoreRole.MASTER) -> CommitLogStore:
    return CommitLogStore.open(path, StoreConfig(mapped_file_size=FILE, role=role))


def put(store: CommitLogStore, n: int) -> None:
    for i in range(n):
        message = Message(
            topic="Orders", body=b"%05d" % i * 20, queue_id=i % 2, properties={"TAGS": "t"}
        )
        assert store.put(message).ok


def field_position(record: MessageRecord, field: str) -> tuple[int, int]:
    position, mask = FIELDS[field]
    body_end = 88 + len(record.body)
    if position == -1:
        return body_end + 1, mask  # the topic's first byte
    if position == -2:
        return body_end + 1 + len(record.topic) + 2, mask  # the first property's name
    if position == -3:
        return record.size - 2, mask  # the CRC property's last digit
    if position == -4:
        return record.size - CRC32_RESERVED_LEN + 2, mask  # "C" of __CRC32#
    return position, mask


def flip(store: CommitLogStore, offset: int, field: str) -> None:
    """Flip bits of ``field`` of the record at ``offset`` on disk (the mapping sees it)."""
    position, mask = field_position(store.read_record(offset), field)
    flip_store_byte(store.root, offset + position, FILE, mask)


def log_bytes(store: CommitLogStore, start: int, end: int) -> bytes:
    out = bytearray()
    while start + len(out) < end:
        chunk = store.read(start + len(out), end - start - len(out))
        assert chunk
        out += chunk
    return bytes(out)


@pytest.fixture
def damaged(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[CommitLogStore, int]]:
    """A master store of 60 records, the 31st with ``request.param`` flipped on disk."""
    store = open_store(tmp_path / "master")
    put(store, 60)
    entry = store.consume_queue_entry("Orders", 0, 15)
    assert entry is not None
    flip(store, entry[0], request.param)
    yield store, entry[0]
    store.close()


all_fields = pytest.mark.parametrize("damaged", list(FIELDS), indirect=True)


def test_records_carry_rocketmq_5s_whole_record_crc(tmp_path: Path) -> None:
    """The definition of RocketMQ 5's CommitLog with enabledAppendPropCRC: the last 20 bytes
    of the properties are ``__CRC32#`` \\x01, 10 digits (least significant first) and \\x02,
    the CRC is zlib's (& 0x7FFFFFFF) of every byte of the record before them."""
    with open_store(tmp_path / "s") as store:
        put(store, 1)
        data = store.read(0, store.max_offset)
    record = decode_record(data)
    props = record.properties_raw
    assert props.startswith(b"TAGS\x01t\x02")
    tail = props[-CRC32_RESERVED_LEN:]
    assert tail[:9] == CRC32_PROPERTY.encode() + b"\x01" and tail[-1:] == b"\x02"
    crc = zlib.crc32(data[: len(data) - CRC32_RESERVED_LEN]) & 0x7FFFFFFF
    assert int(tail[9:19][::-1]) == crc == record_crc(data)
    assert record.properties == {"TAGS": "t"}  # hidden from users; the raw bytes keep it


def test_a_put_drops_a_crc_property_it_is_given(tmp_path: Path) -> None:
    """A message re-put with the property of the record it came from (a retry, a replay)
    gets a CRC of its own record."""
    with open_store(tmp_path / "s") as store:
        stale = {"TAGS": "t", CRC32_PROPERTY: "1234567890"}
        assert store.put(Message(topic="T", body=b"x", properties=stale)).ok
        record = store.read_record(0)
        assert record.properties_raw.count(CRC32_PROPERTY.encode()) == 1
        assert record.properties == {"TAGS": "t"}


@pytest.mark.parametrize("scan", ["python", "native"])
def test_both_scanners_check_a_sealed_record_alike(scan: str) -> None:
    if scan == "native" and native_scan is None:  # pragma: no cover
        pytest.skip("the native scanner is not built")
    run = scan_index_py if scan == "python" else native_scan
    assert run is not None
    record = MessageRecord.create(topic="T", body=b"b" * 200, properties={"K": "v"}, crc32=True)
    good = encode_record(record, seal=True)
    assert run(good, 0, None, 0, None, check_physical_offset=True)[1:5] == (0, "", 0, 1)
    for position in range(len(good)):
        bad = bytearray(good)
        bad[position] ^= 0x01
        result = run(bytes(bad), 0, None, 0, None, check_physical_offset=True)
        assert result[4] == 0, f"a flip at byte {position} went unnoticed"
        assert result == scan_index_py(bytes(bad), 0, None, 0, None, check_physical_offset=True)
    # without CRC checks, only the form of the property is checked
    digit = bytearray(good)
    digit[-2] ^= 0x01
    assert run(bytes(digit), 0, None, 0, None, check_crc=False, check_physical_offset=True)[4] == 1


def test_a_rocketmq_4_record_without_the_property_still_reads() -> None:
    """Records of a RocketMQ 4.9.8 master carry no CRC property: they scan as before."""
    record = MessageRecord.create(topic="T", body=b"b", properties={"TAGS": "a"})
    data = encode_record(record)
    assert list(scan_records(data)) == [record]


@all_fields
async def test_the_master_pushes_nothing_from_the_damaged_record(
    autojump_clock: trio.testing.MockClock, damaged: tuple[CommitLogStore, int]
) -> None:
    store, bad = damaged
    received, master = await push_all(store)
    assert len(received) == bad
    assert f"corrupt record at offset {bad}" in master.status().closed[0].state
    (damaged_range,) = store.damage.ranges  # marked: named, refused, repairable
    assert damaged_range.start == bad and store.statistics().damaged


async def push_all(store: CommitLogStore) -> tuple[bytearray, HAMaster]:
    """What a master of ``store`` pushes to a slave asking from 0, until it closes."""
    master = HAMaster(store, BrokerConfig(mapped_file_size_commit_log=FILE, full_sync=True))
    received = bytearray()
    async with trio.open_nursery() as nursery:
        stream, master_end = trio.testing.memory_stream_pair()
        nursery.start_soon(master.handle_stream, master_end)
        await stream.send_all(REPORT.pack(0))
        with trio.fail_after(60):
            while True:
                header = await stream.receive_some(HEADER.size)
                if not header:
                    break
                while len(header) < HEADER.size:
                    header += await stream.receive_some(HEADER.size - len(header))
                offset, size = HEADER.unpack(header)
                body = b""
                while len(body) < size:
                    body += await stream.receive_some(size - len(body))
                assert offset == len(received)
                received += body
                if body:
                    with contextlib.suppress(trio.BrokenResourceError):
                        await stream.send_all(REPORT.pack(len(received)))
        nursery.cancel_scope.cancel()
    return received, master


@all_fields
def test_a_slave_keeps_nothing_from_the_damaged_record(
    damaged: tuple[CommitLogStore, int], tmp_path: Path
) -> None:
    """A master that pushed the damaged bytes anyway (an older or a careless one): the slave
    keeps the records before, names the bad one and keeps nothing of it."""
    store, bad = damaged
    data = log_bytes(store, 0, store.max_offset)
    with open_store(tmp_path / "slave", StoreRole.SLAVE) as slave:
        slave.append_raw(0, data)
        assert slave.max_offset == bad
        error = slave.dispatch_error
        assert isinstance(error, CorruptRecordError) and error.offset == bad
        assert error.reason


@all_fields
def test_verify_fails_with_the_offset(
    damaged: tuple[CommitLogStore, int], capsys: pytest.CaptureFixture[str]
) -> None:
    store, bad = damaged
    assert main(["verify", str(store.root), "--mapped-file-size", str(FILE)]) != 0
    assert f"offset {bad}" in capsys.readouterr().err


@all_fields
def test_recovery_keeps_the_later_records_and_names_the_damaged_range(
    damaged: tuple[CommitLogStore, int], caplog: pytest.LogCaptureFixture
) -> None:
    store, bad = damaged
    size = len(store.read(bad, 4096)) and store.consume_queue_entry("Orders", 0, 15)
    assert size
    end, later = store.max_offset, store.consume_queue_entry("Orders", 1, 29)
    store.close()
    caplog.set_level(logging.WARNING)
    with open_store(store.root) as reopened:
        assert reopened.max_offset == end  # nothing after the damaged record was dropped
        (damaged_range,) = reopened.damage.ranges
        assert damaged_range.start == bad
        assert damaged_range.end == bad + size[1]  # exactly the one record
        assert reopened.statistics().damaged[0][:2] == (bad, bad + size[1])
        assert later is not None
        assert reopened.read_record(later[0]).queue_offset == 29  # the last record survives
        assert reopened.consume_queue_entry("Orders", 1, 29) == later
        assert (reopened.root / "damaged.json").exists()
    assert str(bad) in caplog.text
    with open_store(store.root) as again:  # the mark is persisted
        assert again.damage.ranges == (damaged_range,)


@all_fields
def test_a_read_refuses_the_damaged_record(damaged: tuple[CommitLogStore, int]) -> None:
    store, bad = damaged
    with pytest.raises(CorruptRecordError) as info:
        store.read_record(bad)
    assert info.value.offset == bad


# -- records without the CRC property (a RocketMQ 4.9.8 master's) ------------------------------


def rocketmq4_log(count: int, flip_at: int, queue_offset_mask: int) -> tuple[bytes, int]:
    """``count`` records as a RocketMQ 4.9.8 master writes them (no CRC property) in one
    queue; the record ``flip_at`` with ``queue_offset_mask`` XORed into its queue offset."""
    data = bytearray()
    bad = -1
    for i in range(count):
        queue_offset = i ^ queue_offset_mask if i == flip_at else i
        if i == flip_at:
            bad = len(data)
        data += encode_record(
            MessageRecord.create(
                topic="Orders",
                body=b"%05d" % i,
                queue_offset=queue_offset,
                physical_offset=len(data),
                properties={"TAGS": "t"},
            )
        )
    return bytes(data), bad


@pytest.mark.parametrize(
    ("mask", "what"),
    [(1 << 40, "leaves a gap"), (1, "is held by the record")],
    ids=["gap", "repeat"],
)
def test_a_queue_offset_that_disagrees_with_the_consume_queue_is_named(
    tmp_path: Path, mask: int, what: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The whole-record CRC is absent, so the record scans as valid: dispatch compares its
    queue offset with the consume queue, stops there with the offset and the reason (not an
    empty error after trying to fill 2**40 blank entries), and verify fails on it."""
    data, bad = rocketmq4_log(40, 21, mask)
    with open_store(tmp_path / "slave", StoreRole.SLAVE) as slave:
        slave.append_raw(0, data)
        error = slave.dispatch_error
        assert isinstance(error, CorruptRecordError)
        assert error.offset == bad and what in error.reason and "Orders/0" in error.reason
        assert slave.max_queue_offset("Orders", 0) == 21
        assert slave.dispatched_offset == bad
    assert main(["verify", str(tmp_path / "slave"), "--mapped-file-size", str(FILE)]) != 0
    assert f"offset {bad}" in capsys.readouterr().err


@pytest.mark.parametrize("damaged", ["topic", "queue offset", "body"], indirect=True)
def test_spark_marks_the_damaged_record_and_reads_on(damaged: tuple[CommitLogStore, int]) -> None:
    """The Spark source gives the damaged record as a row with ``crc_ok`` false (its bytes
    are not trusted) and goes on with the records after it."""
    pytest.importorskip("pyarrow")
    from hanet.spark import commit_log_batches, find_stores, plan_commit_log

    store, bad = damaged
    store.flush()
    rows = [
        row
        for location in find_stores(str(store.root))
        for part in plan_commit_log(location)
        for batch in commit_log_batches(part, columns=["status", "crc_ok", "physical_offset"])
        for row in batch.to_pylist()
    ]
    assert len(rows) == 60
    assert [row["physical_offset"] for row in rows if not row["crc_ok"]] == [bad]
    assert all(row["status"] == "ok" for row in rows)


@pytest.mark.parametrize("body_size", [0, 10, 63, 64, 100, 1000, 5000])
def test_the_native_seal_fills_what_the_reference_does(body_size: int) -> None:
    """The put path seals with ``_speedups.seal`` when built: the same bytes as
    ``seal_record`` (zlib's CRC)."""
    seal = getattr(pytest.importorskip("hanet.store._speedups"), "seal", None)
    if seal is None:  # pragma: no cover
        pytest.skip("the native scanner is not built")
    record = MessageRecord.create(
        topic="T",
        body=bytes(range(256)) * (body_size // 256) + b"x" * (body_size % 256),
        properties={"TAGS": "a"},
        crc32=True,
    )
    unsealed = bytearray(b"pad" + encode_record(record) + b"tail")
    seal(unsealed, 3, record.size)
    assert bytes(unsealed[3:-4]) == encode_record(record, seal=True)
    with pytest.raises(ValueError):
        seal(unsealed, 8, record.size)  # past the end of the buffer


# -- repair, not loss: the damaged range is refused, then repaired from an intact copy ----------


def reopened_with_damage(tmp_path: Path, field: str) -> tuple[CommitLogStore, int, bytes]:
    """A master store of 60 records reopened after the 31st had ``field`` flipped on disk,
    and that record's intact bytes (what a slave holds)."""
    store = open_store(tmp_path / "master")
    put(store, 60)
    entry = store.consume_queue_entry("Orders", 0, 15)
    assert entry is not None
    good = log_bytes(store, entry[0], entry[0] + entry[1])
    flip(store, entry[0], field)
    store.close()
    return open_store(tmp_path / "master"), entry[0], good


@pytest.mark.parametrize("field", ["queue id", "topic", "store host"])
def test_the_damaged_range_is_repaired_from_an_intact_copy(
    tmp_path: Path, field: str, capsys: pytest.CaptureFixture[str]
) -> None:
    store, bad, good = reopened_with_damage(tmp_path, field)
    with store:
        (damaged_range,) = store.damage.ranges
        assert main(["verify", str(store.root), "--mapped-file-size", str(FILE)]) != 0
        assert f"damaged commit log range {damaged_range}" in capsys.readouterr().err
        entry = store.consume_queue_entry("Orders", 0, 15)  # dispatched before the damage
        assert entry is not None and entry[0] == bad
        wrong = bytearray(good)
        wrong[-3] ^= 1
        with pytest.raises(CorruptRecordError):
            store.repair(damaged_range, bytes(wrong))  # checked before it is written
        with pytest.raises(CorruptRecordError):
            store.repair(damaged_range, good[:-1])  # must fit the range exactly
        assert len(store.statistics().damaged) == 1
        assert store.repair(damaged_range, good) == 1
        assert store.statistics().damaged == ()
        assert store.read_record(bad).queue_offset == 15
        assert store.consume_queue_entry("Orders", 0, 15) == entry
        assert not (store.root / "damaged.json").exists()
    with open_store(store.root) as again:  # repaired on disk: clean at the next open
        assert not again.damage.ranges
        assert again.read_record(bad).queue_offset == 15


async def test_a_damaged_range_is_refused_by_the_master_pulls_and_log_reads(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    store, bad, _ = reopened_with_damage(tmp_path, "topic")
    with store:
        (damaged_range,) = store.damage.ranges
        # a pull that reaches the gap is refused, naming the range (not skipped)
        assert len(serve_pull(store, "Orders", 0, 13, 2).records) == 2
        with pytest.raises(CorruptRecordError) as info:
            serve_pull(store, "Orders", 0, 14, 4)
        assert str(damaged_range) in info.value.reason
        assert serve_pull(store, "Orders", 1, 0, 32).records  # another queue is served
        # the master pushes up to the range, then stops, naming it; the slave keeps its data
        received, master = await push_all(store)
        assert len(received) == bad
        state = master.status().closed[0].state
        assert str(damaged_range) in state and "truncate" not in state
        # HANET_READ_LOG serves up to the range and refuses inside it
        answer = read_log(
            store, RemotingCommand.request(HanetRequestCode.HANET_READ_LOG, {"offset": bad})
        )
        assert answer.code != ResponseCode.SUCCESS and str(damaged_range) in (answer.remark or "")
        before = read_log(
            store, RemotingCommand.request(HanetRequestCode.HANET_READ_LOG, {"offset": 0})
        )
        assert before.code == ResponseCode.SUCCESS and len(before.body or b"") == bad


def test_status_and_metrics_name_the_damaged_ranges() -> None:
    damaged = DamagedRangeInfo(6720, 6944, "whole-record CRC mismatch")
    status = broker_status(
        max_offset=20000,
        flushed_offset=20000,
        dispatched_offset=20000,
        mapped_files=2,
        damaged_ranges=(damaged,),
    )
    assert BrokerStatus.decode(status.encode()) == status
    assert b"hanet_damaged_bytes 224.0" in BrokerMetrics(lambda: status).exposition()


@pytest.mark.parametrize("crashed", [False, True])
def test_a_damaged_last_record_is_kept_after_a_clean_stop_cut_after_a_crash(
    tmp_path: Path, crashed: bool
) -> None:
    store = open_store(tmp_path / "master")
    put(store, 20)
    entry = store.consume_queue_entry("Orders", 1, 9)  # the last record
    assert entry is not None and entry[0] + entry[1] == store.max_offset
    end = store.max_offset
    flip(store, entry[0], "topic")
    store.close()
    if crashed:  # the abort file of a run that did not close the store: a torn last write
        (tmp_path / "master" / "abort").touch()
    with open_store(tmp_path / "master") as reopened:
        if crashed:
            assert reopened.max_offset == entry[0] and not reopened.damage.ranges
        else:  # a replica may hold it: kept and named, so no slave is told to drop its copy
            assert reopened.max_offset == end
            assert [(r.start, r.end) for r in reopened.damage.ranges] == [(entry[0], end)]


def test_a_record_lost_before_its_dispatch_leaves_a_gap_that_a_repair_fills(
    tmp_path: Path,
) -> None:
    store = open_store(tmp_path / "master")
    put(store, 60)
    entry = store.consume_queue_entry("Orders", 0, 15)
    assert entry is not None
    good = log_bytes(store, entry[0], entry[0] + entry[1])
    flip(store, entry[0], "queue offset")
    store.close()
    shutil.rmtree(tmp_path / "master" / "consumequeue")  # rebuilt from the commit log
    with open_store(tmp_path / "master") as reopened:
        (damaged_range,) = reopened.damage.ranges
        assert reopened.dispatch_error is None  # the gap is the damage's, not a bad field
        assert reopened.consume_queue_entry("Orders", 0, 15) == (0, 0x7FFFFFFF, 0)
        assert reopened.max_queue_offset("Orders", 0) == 30
        with pytest.raises(CorruptRecordError) as info:
            serve_pull(reopened, "Orders", 0, 15, 1)  # refused, not skipped
        assert str(damaged_range) in info.value.reason
        assert reopened.put(Message("Orders", b"after", queue_id=0)).ok
        assert reopened.repair(damaged_range, good) == 1
        assert reopened.consume_queue_entry("Orders", 0, 15) == entry
        assert len(serve_pull(reopened, "Orders", 0, 15, 1).records) == 1


def test_a_damaged_range_goes_with_its_file(tmp_path: Path) -> None:
    store, _, _ = reopened_with_damage(tmp_path, "body")
    with store:
        (damaged_range,) = store.damage.ranges
        put(store, 60)  # into a second file
        store.flush()
        assert store.commit_log.files[0].end_offset > damaged_range.end
        assert store.delete_first_commit_log_file()  # the damaged range's file
        assert not store.damage.ranges and not (store.root / "damaged.json").exists()


def test_a_repair_indexes_the_keys_the_index_lost_with_the_damage(tmp_path: Path) -> None:
    store = open_store(tmp_path / "master")
    for i in range(40):
        message = Message("Orders", b"%05d" % i * 20, properties={"KEYS": f"key-{i}"})
        assert store.put(message).ok
    bad = store.query_index("Orders", "key-20", 8, 0, 2**62)[0][0]
    good = log_bytes(store, bad, bad + store.read_record(bad).size)
    flip(store, bad, "body")
    store.close()
    shutil.rmtree(tmp_path / "master" / "index")  # rebuilt from the log, past the damage
    with open_store(tmp_path / "master") as reopened:
        (damaged_range,) = reopened.damage.ranges
        assert reopened.query_index("Orders", "key-20", 8, 0, 2**62)[0] == []
        assert reopened.query_index("Orders", "key-21", 8, 0, 2**62)[0] != []
        assert reopened.repair(damaged_range, good) == 1
        assert reopened.query_index("Orders", "key-20", 8, 0, 2**62)[0] == [bad]


def test_a_malformed_damage_file_is_a_clear_error(tmp_path: Path) -> None:
    open_store(tmp_path / "master").close()
    (tmp_path / "master" / "damaged.json").write_text("{not json")
    with pytest.raises(StoreLayoutError, match=r"damaged\.json: not a list of damaged ranges"):
        open_store(tmp_path / "master")
