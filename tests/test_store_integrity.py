"""Store integrity: raw appends never keep bad records, dispatch failures refuse puts, recovery
says what it did."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import pytest

from hanet.store import CommitLogStore, Message, PutStatus, StoreConfig, StoreRole
from hanet.store.lowlevel import scan_index

FILE = 4096
MASTER = StoreConfig(mapped_file_size=FILE, consume_queue_file_size=200)
SLAVE = StoreConfig(mapped_file_size=FILE, consume_queue_file_size=200, role=StoreRole.SLAVE)


def fill(store: CommitLogStore, n: int, topic: str = "T") -> list[int]:
    starts = []
    for i in range(n):
        result = store.put(Message(topic, bytes([i]) * 60, queue_id=i % 2))
        assert result.ok
        starts.append(result.wrote_offset)
    return starts


def test_append_raw_keeps_only_the_valid_prefix(tmp_path: Path) -> None:
    with (
        CommitLogStore.open(tmp_path / "m", MASTER) as master,
        CommitLogStore.open(tmp_path / "s", SLAVE) as slave,
    ):
        starts = fill(master, 5)
        data = bytearray(master.read(0, FILE))
        data[starts[3] + 110] ^= 0xFF  # a body byte of the fourth record
        slave.append_raw(0, data[: starts[1] + 10])  # a partial second record is held
        assert slave.validated_offset == starts[1]
        assert slave.max_offset == starts[1] + 10
        slave.append_raw(starts[1] + 10, data[starts[1] + 10 :])
        assert slave.max_offset == slave.validated_offset == starts[3]
        error = slave.dispatch_error
        assert error is not None and error.offset == starts[3] and "CRC" in error.reason
        assert slave.read(0, FILE) == master.read(0, starts[3])
        assert slave.max_queue_offset("T", 1) == 1  # record 1 only (3 is the bad one)
        # the right bytes then go on from there, and the error is gone
        slave.append_raw(starts[3], master.read(starts[3], FILE))
        assert slave.dispatch_error is None
        assert slave.read(0, FILE) == master.read(0, FILE)
        assert slave.max_queue_offset("T", 1) == master.max_queue_offset("T", 1)


def test_bad_record_inside_a_held_partial_record_drops_it(tmp_path: Path) -> None:
    with (
        CommitLogStore.open(tmp_path / "m", MASTER) as master,
        CommitLogStore.open(tmp_path / "s", SLAVE) as slave,
    ):
        starts = fill(master, 3)
        data = bytearray(master.read(0, FILE))
        data[starts[1] + 4] ^= 0xFF  # the magic of the second record
        slave.append_raw(0, data[: starts[1] + 6])  # a header too short to judge yet
        assert slave.max_offset == starts[1] + 6
        slave.append_raw(starts[1] + 6, data[starts[1] + 6 :])
        assert slave.max_offset == slave.validated_offset == starts[1]
        assert slave.dispatch_error is not None and "magic" in slave.dispatch_error.reason


def test_a_large_record_in_small_frames_is_not_rescanned_per_frame(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A partial record is judged by its first 8 bytes: later frames that still do not
    complete it are neither copied nor scanned again (not quadratic in the record's size)."""
    with (
        CommitLogStore.open(tmp_path / "m", StoreConfig(mapped_file_size=1 << 20)) as master,
        CommitLogStore.open(
            tmp_path / "s", StoreConfig(mapped_file_size=1 << 20, role=StoreRole.SLAVE)
        ) as slave,
    ):
        assert master.put(Message("T", b"a" * 100)).ok
        record = master.put(Message("T", bytes(range(256)) * 2048))  # 512 KiB
        assert master.put(Message("T", b"b" * 100)).ok
        data = master.read(0, master.max_offset)
        scanned: list[int] = []

        def counting(buf: Any, start: int, end: Any, *args: Any, **flags: Any) -> Any:
            scanned.append(len(buf))
            return scan_index(buf, start, end, *args, **flags)

        monkeypatch.setattr("hanet.store._replica.scan_index", counting)
        frame = 1024
        for offset in range(0, len(data), frame):
            slave.append_raw(offset, data[offset : offset + frame])
            if offset + frame <= record.wrote_offset + 8:
                continue
            if offset + frame < record.wrote_offset + record.wrote_size:
                assert slave.validated_offset == record.wrote_offset
        assert slave.validated_offset == slave.max_offset == len(data)
        assert slave.read(0, len(data)) == data
        assert slave.max_queue_offset("T", 0) == 3
        assert slave.dispatch_error is None
        assert sum(scanned) < 3 * len(data)  # each byte scanned about once, not per frame


def test_truncate_to_drops_data_queue_entries_and_survives_a_reopen(tmp_path: Path) -> None:
    with CommitLogStore.open(tmp_path / "m", MASTER) as master:
        starts = fill(master, 60)  # several files
        data = [master.read(o, FILE) for o in range(0, master.max_offset, FILE)]
    cut = starts[40]
    with CommitLogStore.open(tmp_path / "s", SLAVE) as slave:
        offset = 0
        for chunk in data:
            slave.append_raw(offset, chunk)
            offset += len(chunk)
        slave.truncate_to(cut)
        assert slave.max_offset == slave.validated_offset == slave.dispatched_offset == cut
        assert slave.max_queue_offset("T", 0) + slave.max_queue_offset("T", 1) == 40
        with pytest.raises(ValueError, match="cannot truncate"):
            slave.truncate_to(cut + 1)
    with CommitLogStore.open(tmp_path / "s", SLAVE) as again:
        assert again.max_offset == cut
        assert again.recovery.stop is None or again.recovery.end_offset == cut
        assert again.max_queue_offset("T", 0) + again.max_queue_offset("T", 1) == 40


def test_a_partial_record_is_dropped_at_close(tmp_path: Path) -> None:
    with (
        CommitLogStore.open(tmp_path / "m", MASTER) as master,
        CommitLogStore.open(tmp_path / "s", SLAVE) as slave,
    ):
        starts = fill(master, 3)
        slave.append_raw(0, master.read(0, starts[2] + 20))
    with CommitLogStore.open(tmp_path / "s", SLAVE) as again:
        assert again.max_offset == starts[2]
        assert again.recovery.stop is None or again.recovery.stop.reason.value != "invalid"


def _block_queue_directory(root: Path, topic: str) -> None:
    (root / "consumequeue").mkdir(parents=True, exist_ok=True)
    (root / "consumequeue" / topic).write_text("not a directory")


def test_dispatch_failure_refuses_puts_and_keeps_reads(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with CommitLogStore.open(tmp_path, MASTER) as store:
        fill(store, 3)
        before = store.max_offset
        _block_queue_directory(tmp_path, "Blocked")
        result = store.put(Message("Blocked", b"x"))
        assert result.status is PutStatus.SERVICE_NOT_AVAILABLE
        assert "dispatch" in result.detail and "Blocked" in result.detail
        assert store.max_offset == before  # nothing appended
        error = store.dispatch_error
        assert error is not None and error.offset == before
        assert store.statistics().dispatch_error == (error.offset, error.reason)
        # sticky: later puts are refused too, without appending
        again = store.put_batch([Message("T", b"y"), Message("T", b"z")])
        assert [r.status for r in again] == [PutStatus.SERVICE_NOT_AVAILABLE] * 2
        assert store.max_offset == before
        # reads and what replication reads go on working
        record = store.get_message("T", 0, 0)
        assert record is not None and record.body == bytes([0]) * 60
        assert len(store.read(0, FILE)) == before
        errors = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1 and str(before) in errors[0].getMessage()


def test_dispatch_failure_on_a_slave_keeps_replicating(tmp_path: Path) -> None:
    with (
        CommitLogStore.open(tmp_path / "m", MASTER) as master,
        CommitLogStore.open(tmp_path / "s", SLAVE) as slave,
    ):
        fill(master, 2)
        first = master.max_offset
        assert master.put(Message("Blocked", b"x")).ok
        fill(master, 2)
        _block_queue_directory(tmp_path / "s", "Blocked")
        slave.append_raw(0, master.read(0, FILE))
        assert slave.max_offset == master.max_offset  # every byte kept
        error = slave.dispatch_error
        assert error is not None and error.offset == first
        assert slave.dispatched_offset == first


def test_recovery_keeps_the_data_after_a_zeroed_hole_and_names_the_hole(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with CommitLogStore.open(tmp_path, MASTER) as store:
        starts = fill(store, 10)
        end = store.max_offset
    path = tmp_path / "commitlog" / f"{0:020d}"
    data = bytearray(path.read_bytes())
    data[starts[4] : starts[5]] = bytes(starts[5] - starts[4])
    path.write_bytes(bytes(data))
    caplog.set_level(logging.INFO)
    with CommitLogStore.open(tmp_path, MASTER) as store:
        assert store.max_offset == end  # repair, not loss: the records after the hole stay
        assert [(r.start, r.end) for r in store.damage.ranges] == [(starts[4], starts[5])]
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("hole" in m and f"offset {starts[4]}" in m for m in warnings)


@pytest.mark.parametrize("lost", ["abort", "checkpoint"])
def test_recovery_says_what_it_recovered_and_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, lost: str
) -> None:
    with CommitLogStore.open(tmp_path / "live", MASTER) as store:
        fill(store, 10)
        end = store.max_offset
        store.flush()
        # a crash: the files as they are while the store is open (the abort file is there)
        shutil.copytree(tmp_path / "live", tmp_path / "crashed")
    if lost == "checkpoint":  # or a lost checkpoint after a clean exit
        shutil.copytree(tmp_path / "live", tmp_path / "clean")
        (tmp_path / "clean" / "checkpoint").unlink()
    root = tmp_path / ("crashed" if lost == "abort" else "clean")
    caplog.set_level(logging.INFO)
    with CommitLogStore.open(root, MASTER) as again:
        assert again.max_offset == end
    text = "\n".join(r.getMessage() for r in caplog.records if r.levelno >= logging.INFO)
    if lost == "abort":
        assert "abort file present" in text
    else:
        assert "no checkpoint" in text
    assert f"valid data ends at {end}" in text
    assert "recover" in text
