"""Recovery of hanet.store.CommitLogStore (docs/protocol.md §4): clean, torn tail, flipped bytes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hanet.cli import main
from hanet.store import CommitLogStore, Message, PutResult, StopReason, StoreConfig
from hanet.store.lowlevel import encode_blank, file_name

SMALL = StoreConfig(mapped_file_size=4096, consume_queue_file_size=200)


def fill(root: Path, count: int, *, close: bool = True) -> tuple[CommitLogStore, list[PutResult]]:
    store = CommitLogStore.open(root, SMALL)
    results = [
        store.put(Message("T", f"message {i}".encode() * 5, queue_id=i % 2)) for i in range(count)
    ]
    assert all(r.ok for r in results)
    if close:
        store.close()
    return store, results


def crash(store: CommitLogStore) -> None:
    """Drop a store as a killed process would: no flush, abort file left, lock released."""
    store.commit_log.close()
    for key in store.queues():
        store._queues[key].close()
    store._lock.release()


def test_clean_reopen_keeps_everything(tmp_path: Path) -> None:
    _, results = fill(tmp_path, 100)
    with CommitLogStore.open(tmp_path, SMALL) as store:
        assert not store.statistics().recovered_abnormally
        assert store.max_offset == results[-1].end_offset
        assert store.max_queue_offset("T", 0) == 50
        assert store.max_queue_offset("T", 1) == 50
        assert store.put(Message("T", b"more")).queue_offset == 50
        record = store.get_message("T", 1, 49)
        assert record is not None
        assert record.body == b"message 99" * 5


def test_torn_tail_is_truncated_after_a_crash(tmp_path: Path) -> None:
    store, results = fill(tmp_path, 30, close=False)
    end = store.max_offset
    last = store.commit_log.files[-1]
    # half of a record, as a crash in the middle of a write leaves it
    last.view[last.wrote : last.wrote + 40] = store.read(results[-1].wrote_offset, 40)
    crash(store)
    with CommitLogStore.open(tmp_path, SMALL) as again:
        stats = again.statistics()
        assert stats.recovered_abnormally
        assert again.max_offset == end
        assert again.recovery.stop is not None
        assert again.recovery.stop.reason is StopReason.INVALID
        assert again.recovery.stop.offset == end
        assert again.read(end, 100) == b""
        assert again.put(Message("T", b"after")).wrote_offset == end
    with CommitLogStore.open(tmp_path, SMALL) as third:
        assert not third.statistics().recovered_abnormally
        assert third.max_queue_offset("T", 0) == 16


def test_a_zeroed_tail_that_took_the_crc_property_is_not_kept_after_a_crash(
    tmp_path: Path,
) -> None:
    """The soak's lost-tail fault: the last record's end zeroed, its whole-record CRC property
    with it; its body CRC still matches, but it is cut as a torn write, not kept as valid."""
    store, results = fill(tmp_path, 30, close=False)
    last = store.commit_log.files[-1]
    end = last.wrote
    last.view[end - 20 : end] = bytes(20)  # the whole-record CRC property
    crash(store)
    with CommitLogStore.open(tmp_path, SMALL) as again:
        assert again.max_offset == results[-1].wrote_offset
        assert again.recovery.stop is not None
        assert again.recovery.stop.detail == "properties end in a zero byte (a zeroed tail)"
        assert again.max_queue_offset("T", 1) == 14  # the 15th message of queue 1 is gone
        assert again.get_message("T", 1, 13) is not None


def test_flipped_byte_verify_names_it_and_recovery_keeps_what_follows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, results = fill(tmp_path, 80)
    victim = results[40]
    files = sorted((tmp_path / "commitlog").iterdir())
    assert len(files) >= 3
    path = tmp_path / "commitlog" / file_name(victim.wrote_offset - victim.wrote_offset % 4096)
    data = bytearray(path.read_bytes())
    data[victim.wrote_offset % 4096 + victim.wrote_size - 30] ^= 0x01  # in the body
    path.write_bytes(bytes(data))

    assert main(["verify", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip()
    damaged_range = f"[{victim.wrote_offset}, {victim.end_offset})"
    assert err.splitlines() == [  # the records after it are checked too
        f"hanet: bad record at offset {victim.wrote_offset}: body CRC mismatch; damaged commit "
        f"log range {damaged_range} (body CRC mismatch); valid records resume at "
        f"{victim.end_offset}",
        f"hanet: 1 consume queue entry points into the damaged range {damaged_range}: its "
        "record cannot be read until it is repaired",
        "hanet: 2 problem(s) found",
    ]

    (tmp_path / "abort").touch()  # as after a crash: walk from the checkpoint
    end = results[-1].wrote_offset + results[-1].wrote_size
    with CommitLogStore.open(tmp_path, SMALL) as store:
        assert store.max_offset == end  # repair, not loss: 41..79 kept
        assert store.statistics().truncated_at is None
        (damaged,) = store.damage.ranges
        assert (damaged.start, damaged.end) == (victim.wrote_offset, victim.end_offset)
        assert store.max_queue_offset("T", 0) == 40
        assert store.get_message("T", 0, 39) is not None
        assert store.put(Message("T", b"new")).wrote_offset == end
    assert main(["verify", str(tmp_path)]) == 1  # the damaged record, until it is repaired
    assert f"damaged commit log range [{victim.wrote_offset}, " in capsys.readouterr().err


def test_lost_consume_queues_are_rebuilt(tmp_path: Path) -> None:
    _, results = fill(tmp_path, 40)
    shutil.rmtree(tmp_path / "consumequeue")
    (tmp_path / "abort").touch()
    with CommitLogStore.open(tmp_path, SMALL) as store:
        assert store.max_queue_offset("T", 0) == 20
        assert store.consume_queue_entry("T", 1, 19) == (
            results[39].wrote_offset,
            results[39].wrote_size,
            0,
        )


def test_consume_queue_ahead_of_commit_log_is_cut(tmp_path: Path) -> None:
    store, results = fill(tmp_path, 20, close=False)
    crash(store)
    # lose the commit log's tail (an OS crash that kept the consume queue's pages only)
    path = tmp_path / "commitlog" / file_name(0)
    data = bytearray(path.read_bytes())
    cut = results[15].wrote_offset
    data[cut:] = bytes(len(data) - cut)
    path.write_bytes(bytes(data))
    with CommitLogStore.open(tmp_path, SMALL) as again:
        assert again.max_offset == cut
        assert again.max_queue_offset("T", 1) == 7  # message 15 had queue 1 offset 7
        assert again.max_queue_offset("T", 0) == 8
        assert again.put(Message("T", b"x", queue_id=1)).queue_offset == 7


def test_garbage_between_files_is_a_damaged_range_the_next_file_is_kept(tmp_path: Path) -> None:
    _, results = fill(tmp_path, 60)
    # turn the blank record that ends the first file into garbage
    first_end = next(r.wrote_offset for r in results if r.wrote_offset >= 4096)
    last_in_first = max(r.end_offset for r in results if r.end_offset <= 4096)
    path = tmp_path / "commitlog" / file_name(0)
    data = bytearray(path.read_bytes())
    data[last_in_first + 4] ^= 0xFF
    path.write_bytes(bytes(data))
    (tmp_path / "abort").touch()
    with CommitLogStore.open(tmp_path, SMALL) as store:
        assert store.max_offset == results[-1].end_offset
        assert first_end == 4096
        assert [(r.start, r.end) for r in store.damage.ranges] == [(last_in_first, 4096)]
        assert len(store.commit_log.files) == len(files_of(results))
        # the intact blank tail (a replica's) repairs it
        (damaged,) = store.damage.ranges
        blank = encode_blank(4096 - last_in_first) + bytes(4096 - last_in_first - 8)
        assert store.repair(damaged, blank) == 0
        assert not store.damage.ranges


def files_of(results: list[PutResult]) -> set[int]:
    return {r.wrote_offset - r.wrote_offset % 4096 for r in results}


FIXTURE = Path(__file__).parent / "fixtures" / "rocketmq-store-8k"  # a real RocketMQ broker's


def test_open_a_copy_of_the_rocketmq_fixture(tmp_path: Path) -> None:
    shutil.copytree(FIXTURE / "commitlog", tmp_path / "commitlog")
    for path in (tmp_path / "commitlog").iterdir():
        path.chmod(0o644)
    config = StoreConfig(mapped_file_size=8192, consume_queue_file_size=200)
    with CommitLogStore.open(tmp_path, config) as store:
        assert store.max_offset == 8192  # the blank record fills the file to its end
        assert store.max_queue_offset("abc", 0) == 47
        assert store.consume_queue_entry("abc", 0, 46) == (
            172 * 46,
            172,
            2567159,
        )  # "TAG1".hashCode()
        record = store.get_message("abc", 0, 46)
        assert record is not None
        assert record.body == b"Once, there was a chance for me!"
        result = store.put(Message("abc", b"hanet was here", properties={"TAGS": "TAG1"}))
        assert (result.wrote_offset, result.queue_offset) == (8192, 47)
    assert main(["verify", str(tmp_path)]) == 0
