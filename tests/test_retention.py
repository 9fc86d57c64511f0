"""Retention (RocketMQ's CleanCommitLogService / CleanConsumeQueueService): the sans-IO decision,
the store's deletions and min offsets, and the service in virtual time with a fake wall clock,
fake file times and an injected disk usage."""

from __future__ import annotations

import gc
import logging
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing

from hanet.broker import GetMessageStatus, serve_pull
from hanet.store import (
    CommitLogStore,
    Holder,
    Message,
    RetentionConfig,
    RetentionService,
    StoreConfig,
)
from hanet.store.lowlevel import CommitLogFile, parse_delete_when, plan_retention

FILE = 4096
CQ_FILE = 200  # 10 entries a consume queue file
CONFIG = StoreConfig(mapped_file_size=FILE, consume_queue_file_size=CQ_FILE, flush_interval=0.05)
HOUR = 3600.0
DAY0 = 1_700_000_000.0  # a fixed "now" for the fake wall clock


def files(*ages_hours: float, now: float = DAY0) -> list[CommitLogFile]:
    """Commit log files of FILE bytes, the i-th last written ``ages_hours[i]`` hours ago."""
    return [
        CommitLogFile(i * FILE, (i + 1) * FILE, now - age * HOUR)
        for i, age in enumerate(ages_hours)
    ]


# -- 1. the decision (sans-IO) ---------------------------------------------------------------


def test_delete_when_takes_rocketmq_hours_and_refuses_anything_else() -> None:
    assert parse_delete_when("04") == {4}
    assert parse_delete_when("04;16") == {4, 16}
    assert parse_delete_when(" 0 ; 23 ") == {0, 23}
    for bad in ("", "4am", "24", "04;", "-1", "04,16"):
        with pytest.raises(ValueError, match="deleteWhen"):
            parse_delete_when(bad)
    with pytest.raises(ValueError, match="deleteWhen"):
        RetentionConfig(delete_when="25")
    with pytest.raises(ValueError, match="disk_space_clean_forcibly_ratio"):
        RetentionConfig(disk_space_clean_forcibly_ratio=85)


def test_expired_files_go_only_at_the_delete_hour_oldest_first_never_the_last() -> None:
    config = RetentionConfig(delete_when="04;16", file_reserved_time=72)
    log = files(100, 90, 80, 10, 100)  # the last file is "old" too: never deleted
    quiet = plan_retention(log, now=DAY0, hour=3, disk_ratio=0.5, config=config)
    assert quiet.delete == () and not quiet.triggered
    at_four = plan_retention(log, now=DAY0, hour=4, disk_ratio=0.5, config=config)
    assert [f.start for f in at_four.delete] == [0, FILE, 2 * FILE]
    assert at_four.time_up and not at_four.space_full and not at_four.forced
    at_sixteen = plan_retention(log, now=DAY0, hour=16, disk_ratio=0.5, config=config)
    assert at_sixteen.delete == at_four.delete
    # a young file stops the round: no hole, even if an older one follows it
    holey = plan_retention(files(100, 10, 100, 5), now=DAY0, hour=4, disk_ratio=0.5, config=config)
    assert [f.start for f in holey.delete] == [0]
    # exactly fileReservedTime old counts as expired (RocketMQ: now >= modified + reserved)
    edge = plan_retention(files(72, 1), now=DAY0, hour=4, disk_ratio=0.5, config=config)
    assert [f.start for f in edge.delete] == [0]


def test_a_round_deletes_at_most_the_batch_max() -> None:
    config = RetentionConfig(delete_when="04")
    plan = plan_retention(files(*[100] * 15), now=DAY0, hour=4, disk_ratio=0.1, config=config)
    assert len(plan.delete) == 10


def test_a_full_disk_deletes_expired_files_at_any_hour_and_past_the_forced_ratio_any_file() -> None:
    config = RetentionConfig(delete_when="04", disk_max_used_space_ratio=75)
    log = files(100, 10, 1, 0)
    calm = plan_retention(log, now=DAY0, hour=12, disk_ratio=0.75, config=config)
    assert not calm.triggered
    full = plan_retention(log, now=DAY0, hour=12, disk_ratio=0.80, config=config)
    assert full.space_full and not full.forced
    assert [f.start for f in full.delete] == [0]  # only what is past fileReservedTime
    forced = plan_retention(log, now=DAY0, hour=12, disk_ratio=0.86, config=config)
    assert forced.forced and [f.start for f in forced.delete] == [0, FILE, 2 * FILE]
    unreadable = plan_retention(log, now=DAY0, hour=12, disk_ratio=None, config=config)
    assert unreadable.space_full and not unreadable.forced  # as RocketMQ's negative ratio
    off = RetentionConfig(clean_file_forcibly_enable=False)
    assert not plan_retention(log, now=DAY0, hour=12, disk_ratio=0.99, config=off).forced


def test_a_slave_keeps_what_it_has_not_received_until_the_forced_ratio() -> None:
    config = RetentionConfig(delete_when="04")
    log = files(100, 100, 100, 100)
    slow = Holder("slave 10.0.0.2:5000", FILE + 100)  # inside the second file
    fast = Holder("slave 10.0.0.3:5000", 3 * FILE)
    plan = plan_retention(
        log, now=DAY0, hour=4, disk_ratio=0.5, config=config, holders=[fast, slow]
    )
    assert [f.start for f in plan.delete] == [0]
    assert plan.held_by == slow and plan.overridden == () and plan.held_file == log[1]
    # a slave that acknowledged a whole file's end exactly has all of it
    exact = Holder("slave x", 2 * FILE)
    plan = plan_retention(log, now=DAY0, hour=4, disk_ratio=0.5, config=config, holders=[exact])
    assert [f.start for f in plan.delete] == [0, FILE]
    # the bound: past diskSpaceCleanForciblyRatio nobody holds files back (a dead slave
    # cannot fill the disk), and the plan names whom it overrides
    plan = plan_retention(
        log, now=DAY0, hour=4, disk_ratio=0.9, config=config, holders=[slow, fast]
    )
    assert [f.start for f in plan.delete] == [0, FILE, 2 * FILE]
    assert plan.held_by is None and plan.overridden == (slow,)  # the fast one had them all


# -- 2. the store: deletions and min offsets -------------------------------------------------


def fill(store: CommitLogStore, count: int, size: int = 200) -> None:
    for i in range(count):
        result = store.put(Message("T", bytes([65 + i % 26]) * size, queue_id=i % 2))
        assert result.ok, result


def test_deleting_commit_log_files_moves_every_min_offset_and_survives_a_restart(
    tmp_path: Path,
) -> None:
    root = tmp_path / "s"
    with CommitLogStore.open(root, CONFIG) as store:
        fill(store, 100)  # ~ 6 files of 4 KiB
        store.flush()
        assert len(store.commit_log.files) >= 5
        before_max = store.max_offset
        second = store.commit_log.files[2].start_offset
        assert store.delete_first_commit_log_file()
        assert store.delete_first_commit_log_file()
        assert store.min_offset == second
        assert not (root / "commitlog" / f"{0:020d}").exists()
        for queue_id in (0, 1):
            low = store.min_queue_offset("T", queue_id)
            entry = store.consume_queue_entry("T", queue_id, low)
            assert entry is not None and entry[0] >= second
            previous = store.consume_queue_entry("T", queue_id, low - 1)
            assert previous is None  # below the min: not served any more
            assert store.get_message("T", queue_id, low) is not None
        # pulls below the new min answer OFFSET_TOO_SMALL with the min as the next offset
        result = serve_pull(store, "T", 0, 0, 32)
        assert result.status is GetMessageStatus.OFFSET_TOO_SMALL
        assert result.next_offset == result.min_offset == store.min_queue_offset("T", 0) > 0
        mins = {q: store.min_queue_offset("T", q) for q in (0, 1)}
        # consume queue files wholly below the new min go; never a queue's last file
        cq = root / "consumequeue" / "T" / "0"
        count_before = len(list(cq.iterdir()))
        deleted = store.clean_consume_queue("T", 0)
        assert deleted >= 1 and len(list(cq.iterdir())) == count_before - deleted
        assert store.min_queue_offset("T", 0) == mins[0]
        fill(store, 5)
    with CommitLogStore.open(root, CONFIG) as store:  # the trimmed store recovers as it was
        assert store.min_offset == second and store.max_offset > before_max
        assert {q: store.min_queue_offset("T", q) for q in (0, 1)} == mins


def test_index_files_below_the_new_min_offset_are_deleted_and_the_rest_still_found(
    tmp_path: Path,
) -> None:
    config = attrs.evolve(CONFIG, max_hash_slot_num=8, max_index_num=6)  # 5 keys a file
    with CommitLogStore.open(tmp_path / "s", config) as store:
        for i in range(100):
            message = Message("T", b"x" * 200, queue_id=i % 2, properties={"KEYS": f"k{i}"})
            assert store.put(message).ok
        store.flush()
        assert store.query_index("T", "k0", 10, 0, 2**62)[0] == [0]
        assert store.index is not None
        before = len(store.index.files)
        assert before >= 10
        for _ in range(3):
            assert store.delete_first_commit_log_file()
        low = store.min_offset
        deleted = store.clean_index_files()
        assert deleted >= 1 and len(store.index.files) == before - deleted
        assert all(f.header.end_phy_offset >= low for f in store.index.files)
        assert store.query_index("T", "k0", 10, 0, 2**62)[0] == []  # its file went
        found = store.query_index("T", "k99", 10, 0, 2**62)[0]
        assert len(found) == 1 and found[0] >= low


def test_the_last_file_and_unflushed_records_are_never_deleted(tmp_path: Path) -> None:
    with CommitLogStore.open(tmp_path / "s", CONFIG) as store:
        fill(store, 10)
        assert len(store.commit_log.files) == 1
        assert not store.delete_first_commit_log_file(force=True)
        fill(store, 40)
        assert len(store.commit_log.files) >= 2
        # not flushed yet: kept (the flusher has not run)
        assert not store.delete_first_commit_log_file(force=True)
        store.flush()
        assert store.delete_first_commit_log_file()


def test_a_file_a_reader_maps_is_kept_unless_forced_and_the_view_stays_valid(
    tmp_path: Path,
) -> None:
    with CommitLogStore.open(tmp_path / "s", CONFIG) as store:
        fill(store, 60)
        store.flush()
        view = store.read_view(0, 100)  # e.g. an HA transfer's bytes waiting to be sent
        copy = bytes(view)
        assert not store.delete_first_commit_log_file()
        assert store.min_offset == 0
        assert store.delete_first_commit_log_file(force=True)
        assert store.min_offset == FILE
        assert bytes(view) == copy  # unlinked, still mapped for its holder
        view.release()


def test_a_queue_whose_messages_are_all_deleted_answers_offset_moved_to_its_min(
    tmp_path: Path,
) -> None:
    with CommitLogStore.open(tmp_path / "s", CONFIG) as store:
        for _ in range(5):
            assert store.put(Message("Old", b"x" * 300)).ok
        fill(store, 60)
        store.flush()
        while store.delete_first_commit_log_file():
            pass
        assert store.min_queue_offset("Old", 0) == store.max_queue_offset("Old", 0) == 5
        below = serve_pull(store, "Old", 0, 0, 32)
        assert below.status is GetMessageStatus.OFFSET_TOO_SMALL and below.next_offset == 5
        at_end = serve_pull(store, "Old", 0, 5, 32)
        assert at_end.status is not GetMessageStatus.OFFSET_TOO_SMALL


# -- 3. the service in virtual time ----------------------------------------------------------


class FakeWall:
    """A wall clock that follows trio's (virtual) clock from a given local hour."""

    def __init__(self, start_hour: int) -> None:
        self.base = DAY0 - DAY0 % 86400 + start_hour * HOUR  # hours counted from midnight UTC
        self.mtimes: dict[str, float] = {}

    def now(self) -> float:
        return self.base + trio.current_time()

    def hour(self, when: float) -> int:
        return int((when % 86400) // HOUR)

    def file_time(self, path: Path) -> float:
        return self.mtimes.get(path.name, self.now())


async def test_the_service_deletes_expired_files_at_the_delete_hour_in_virtual_time(
    autojump_clock: trio.testing.MockClock, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="hanet.store.retention")
    wall = FakeWall(start_hour=1)
    config = RetentionConfig(delete_when="04", file_reserved_time=48)
    with CommitLogStore.open(tmp_path / "s", CONFIG) as store:
        fill(store, 100)
        store.flush()
        names = [m.path.name for m in store.commit_log.files]
        for name in names[:3]:
            wall.mtimes[name] = wall.now() - 50 * HOUR  # expired
        for name in names[3:]:
            wall.mtimes[name] = wall.now() - 1 * HOUR  # young
        service = RetentionService(
            store,
            config,
            clock=wall.now,
            hour_of=wall.hour,
            disk_ratio=lambda: 0.30,
            file_time=wall.file_time,
        )
        heard: list[int] = []
        service.min_offset_listeners.append(heard.append)
        async with trio.open_nursery() as nursery:
            await nursery.start(service.run)
            await trio.sleep(2.5 * HOUR)  # 01:00 .. 03:30: not the hour
            assert store.min_offset == 0 and service.statistics.deleted_files == 0
            assert service.statistics.rounds >= 2.5 * HOUR / 10 - 1
            await trio.sleep(1 * HOUR)  # 04:30: the three expired files went
            assert store.min_offset == 3 * FILE
            assert service.statistics.deleted_files == 3
            assert service.statistics.deleted_queue_files >= 1
            assert heard == [3 * FILE]  # e.g. index files clean to it
            nursery.cancel_scope.cancel()
        for q in (0, 1):
            entry = store.consume_queue_entry("T", q, store.min_queue_offset("T", q))
            assert entry is not None and entry[0] >= 3 * FILE
    messages = [r.getMessage() for r in caplog.records]
    assert any(
        "deleted 3 commit log file(s) older than 48 h (deleteWhen 04); the commit log now starts "
        f"at {3 * FILE}" in m
        for m in messages
    )
    assert sum("deleted commit log file" in m for m in messages) == 3


async def test_a_disk_past_the_forced_ratio_deletes_young_files_and_overrides_a_slave(
    autojump_clock: trio.testing.MockClock, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    wall = FakeWall(start_hour=12)
    usage = [0.80]
    with CommitLogStore.open(tmp_path / "s", CONFIG) as store:
        fill(store, 100)
        store.flush()
        count = len(store.commit_log.files)
        slave = Holder("slave 127.0.0.1:4000", FILE // 2)
        service = RetentionService(
            store,
            RetentionConfig(),  # deleteWhen 04, 72 h
            holders=lambda: [slave],
            clock=wall.now,
            hour_of=wall.hour,
            disk_ratio=lambda: usage[0],
            file_time=wall.file_time,  # every file written just now
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(service.run)
            await trio.sleep(60)  # 80 %: past diskMaxUsedSpaceRatio, but nothing is expired
            assert store.min_offset == 0
            warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
            assert len(warnings) == 1  # said once, not every round
            assert "no commit log file could be deleted" in warnings[0]
            assert "fileReservedTime 72 h" in warnings[0]
            usage[0] = 0.90  # past diskSpaceCleanForciblyRatio 0.85: any age, slaves overridden
            await trio.sleep(15)
            assert len(store.commit_log.files) == 1 or store.min_offset > 0
            await trio.sleep(60)
            assert len(store.commit_log.files) == 1  # all but the last (in batches of 10)
            assert service.statistics.deleted_files == count - 1
            nursery.cancel_scope.cancel()
    overridden = [r.getMessage() for r in caplog.records if "has not received" in r.getMessage()]
    assert overridden and "slave 127.0.0.1:4000" in overridden[0]


async def test_a_connected_slave_holds_files_and_is_logged_once(
    autojump_clock: trio.testing.MockClock, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="hanet.store.retention")
    wall = FakeWall(start_hour=4)
    acked = [FILE + 10]
    with CommitLogStore.open(tmp_path / "s", CONFIG) as store:
        fill(store, 100)
        store.flush()
        service = RetentionService(
            store,
            RetentionConfig(file_reserved_time=0),
            holders=lambda: [Holder("slave 10.1.1.1:777", acked[0])],
            clock=wall.now,
            hour_of=wall.hour,
            disk_ratio=lambda: 0.5,
            file_time=wall.file_time,
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(service.run)
            await trio.sleep(100)
            assert store.min_offset == FILE  # the slave is inside the second file
            assert service.statistics.held_by == ("slave 10.1.1.1:777", FILE + 10)
            acked[0] = 3 * FILE
            await trio.sleep(20)
            assert store.min_offset == 3 * FILE
            nursery.cancel_scope.cancel()
    held = [r.getMessage() for r in caplog.records if "keeping commit log file" in r.getMessage()]
    assert len(held) == 2  # once per file held, not every round
    assert (
        "file 4096 and later: slave 10.1.1.1:777 has acknowledged only up to offset 4106" in held[0]
    )
    assert (
        "file 12288 and later: slave 10.1.1.1:777 has acknowledged only up to offset 12288"
        in held[1]
    )


async def test_a_mapped_file_is_kept_until_destroy_interval_then_unlinked(
    autojump_clock: trio.testing.MockClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    collections: list[int] = []  # full garbage collections on the event loop
    real_collect = gc.collect

    def collect(*args: int) -> int:
        collections.append(1)
        return real_collect(*args)

    monkeypatch.setattr(gc, "collect", collect)
    wall = FakeWall(start_hour=4)
    with CommitLogStore.open(tmp_path / "s", CONFIG) as store:
        fill(store, 60)
        store.flush()
        view = store.read_view(10, 50)
        copy = bytes(view)
        service = RetentionService(
            store,
            RetentionConfig(file_reserved_time=0, destroy_mapped_file_interval_forcibly=120),
            clock=wall.now,
            hour_of=wall.hour,
            disk_ratio=lambda: 0.5,
            file_time=wall.file_time,
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(service.run)
            await trio.sleep(100)
            assert store.min_offset == 0  # held by the view
            assert len(collections) == 1  # once when first found held, not every round
            await trio.sleep(60)
            assert store.min_offset > 0  # unlinked after 120 s anyway
            assert bytes(view) == copy
            nursery.cancel_scope.cancel()
        view.release()


def test_stores_refuse_retention_settings_that_make_no_sense() -> None:
    with pytest.raises(ValueError):
        RetentionConfig(file_reserved_time=-1)
    with pytest.raises(ValueError):
        RetentionConfig(clean_resource_interval=0)


def test_the_min_offset_search_skips_blank_entries_as_a_walk_would(tmp_path: Path) -> None:
    from hanet.store.lowlevel import CQ_BLANK_SIZE, ConsumeQueue

    queue = ConsumeQueue(tmp_path / "cq", "T", 0, 20 * 50, warm=False)
    physical = 0
    expected: dict[int, int] = {}
    q = 3  # a queue that starts late: blanks first
    for run in range(40):
        if run % 7 == 3:
            q += 2  # a gap: blank entries fill it
        queue.append(q, physical, 100, 0)
        expected[q] = physical
        q += 1
        physical += 100
    assert queue.min_queue_offset == 3  # the blanks before the first entry are not held

    def walk(floor: int) -> int:  # RocketMQ's correctMinOffset, entry by entry
        for offset in range(queue.min_queue_offset, queue.max_queue_offset):
            entry = queue.get(offset)
            assert entry is not None
            if entry[1] != CQ_BLANK_SIZE and entry[0] >= floor:
                return offset
        return queue.max_queue_offset

    start = queue.min_queue_offset
    for floor in range(0, physical + 200, 50):
        queue.min_queue_offset = start
        wanted = walk(floor)
        assert queue.correct_min_offset(floor) == wanted, floor
    queue.close()
