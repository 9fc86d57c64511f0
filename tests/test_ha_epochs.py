"""Epochs in replication (virtual time, real stores): a slave compares its master's epoch history
before it follows, refuses (default) or truncates to the consistent point, copies the master's
epochs as it replicates, and follows a master without epochs as before."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
import trio
import trio.testing
from ha_support import Link, commit_log_bytes, open_store, put
from test_ha_divergence import CONFIG, leaves, record_boundary

from hanet.ha import BrokerConfig, HAMaster, HASlave, start_master_term
from hanet.store import (
    EPOCH_FILE,
    CommitLogStore,
    EpochEntry,
    EpochFile,
    EpochFileError,
    EpochHistory,
    StoreRole,
)
from hanet.testing import wait_until

TRUNCATE = BrokerConfig(
    mapped_file_size_commit_log=CONFIG.mapped_file_size_commit_log,
    full_sync=True,
    reconnect_interval=5.0,
    ha_divergence="truncate",
)


@pytest.fixture(name="master_store")
def master_store_fixture(tmp_path: Path) -> Iterator[CommitLogStore]:
    with open_store(tmp_path / "master") as store:
        yield store


def epochs_of(store: CommitLogStore) -> EpochHistory:
    """What HANET_EPOCHS answers for ``store``."""
    return EpochFile.load(store.root).history(store.max_offset)


def source_of(
    store: CommitLogStore, calls: list[int] | None = None
) -> Callable[[EpochHistory], Awaitable[EpochHistory]]:
    async def source(mine: EpochHistory) -> EpochHistory:
        if calls is not None:
            calls.append(store.max_offset)
        return epochs_of(store)

    return source


async def follow(
    master_store: CommitLogStore, slave_store: CommitLogStore, config: BrokerConfig = CONFIG
) -> HASlave:
    """Replicate with the epoch check until the slave has everything the master has."""
    master = HAMaster(master_store, config)
    async with trio.open_nursery() as nursery:
        slave = HASlave(
            slave_store,
            config,
            connector=Link(nursery, master),
            epoch_source=source_of(master_store),
        )
        await nursery.start(slave.run)
        await wait_until(lambda: slave_store.max_offset == master_store.max_offset)
        nursery.cancel_scope.cancel()
    return slave


async def lost_tail_then_same_size_puts(tmp_path: Path, master_store: CommitLogStore) -> int:
    """The issue's reproduction: a slave holds 200 records of epoch 1; the master loses
    everything from record 150 on, restarts (epoch 2) and takes 50 new records of the same
    size, so both logs end at the same offset. Returns where they part."""
    start_master_term(master_store)
    put(master_store, 200)
    with open_store(tmp_path / "slave", StoreRole.SLAVE) as slave_store:
        await follow(master_store, slave_store)
        assert EpochFile.load(slave_store.root).entries == (EpochEntry(1, 0),)
    point = record_boundary(master_store, 150)
    end = master_store.max_offset
    master_store.truncate_to(point)
    assert start_master_term(master_store) == EpochEntry(2, point)
    put(master_store, 50, fill=99)
    assert master_store.max_offset == end  # same size: the offsets alone cannot tell
    return point


async def test_a_slave_past_the_consistent_point_refuses_and_names_it(
    autojump_clock: trio.testing.MockClock,
    master_store: CommitLogStore,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    point = await lost_tail_then_same_size_puts(tmp_path, master_store)
    master = HAMaster(master_store, CONFIG)
    calls: list[int] = []
    with open_store(tmp_path / "slave", StoreRole.SLAVE) as slave_store:
        before = commit_log_bytes(slave_store, 0, slave_store.max_offset)
        async with trio.open_nursery() as nursery:
            link = Link(nursery, master)
            slave = HASlave(
                slave_store, CONFIG, connector=link, epoch_source=source_of(master_store, calls)
            )
            await nursery.start(slave.run)
            await wait_until(
                lambda: len(calls) >= 4, 30
            )  # asks again every reconnect interval (5 s)
            status = slave.status()
            nursery.cancel_scope.cancel()
        assert link.connects == 0  # not one HA byte exchanged
        assert status.epoch_diverged_at == point and not status.connected
        assert status.epoch_check is not None
        assert f"diverged from the master at offset {point}" in status.epoch_check
        assert f"--truncate-to {point}" in status.epoch_check
        # nothing cut, nothing taken
        assert commit_log_bytes(slave_store, 0, slave_store.max_offset) == before
        assert not (slave_store.root / "cut").exists()
    errors = [
        r.getMessage()
        for r in caplog.records
        if r.name == "hanet.ha.epochs" and r.levelno == logging.ERROR
    ]
    assert len(errors) == 1 and f"offset {point}" in errors[0]  # then once a minute


async def test_truncate_policy_cuts_to_the_point_keeps_the_bytes_and_follows(
    autojump_clock: trio.testing.MockClock, master_store: CommitLogStore, tmp_path: Path
) -> None:
    point = await lost_tail_then_same_size_puts(tmp_path, master_store)
    with open_store(tmp_path / "slave", StoreRole.SLAVE) as slave_store:
        cut_expected = commit_log_bytes(slave_store, point, slave_store.max_offset)
        slave = await follow(master_store, slave_store, TRUNCATE)
        status = slave.status()
        assert status.epoch_diverged_at is None
        assert status.epoch_check is not None and f"diverged at {point}: truncated" in (
            status.epoch_check
        )
        assert slave.epochs is not None and slave.epochs.truncations == 1
        end = master_store.max_offset
        assert commit_log_bytes(slave_store, 0, end) == commit_log_bytes(master_store, 0, end)
        assert slave_store.max_queue_offset("T", 0) == master_store.max_queue_offset("T", 0)
        assert EpochFile.load(slave_store.root).entries == (EpochEntry(1, 0), EpochEntry(2, point))
        (kept,) = (slave_store.root / "cut").iterdir()
        (piece,) = kept.glob(f"*.from-{point}")  # the cut file's tail, then later files linked
        size = CONFIG.mapped_file_size_commit_log
        later = sorted(p for p in kept.iterdir() if p != piece)
        assert b"".join([piece.read_bytes(), *(p.read_bytes() for p in later)]).startswith(
            cut_expected
        )
        assert len(piece.read_bytes()) == size - point % size and later


async def test_a_slave_copies_the_masters_epochs_as_it_reaches_them(
    autojump_clock: trio.testing.MockClock, master_store: CommitLogStore, tmp_path: Path
) -> None:
    start_master_term(master_store)
    put(master_store, 30)
    second = start_master_term(master_store)
    put(master_store, 30, fill=5)
    third = start_master_term(master_store)
    put(master_store, 5, fill=9)
    with open_store(tmp_path / "slave", StoreRole.SLAVE) as slave_store:
        slave = await follow(master_store, slave_store)
        assert slave.epochs is not None and slave.epochs.note == (
            "a new slave: took the master's epochs"
        )
        assert EpochFile.load(slave_store.root).entries == (EpochEntry(1, 0), second, third)
        # a second run: the same history, nothing to do
        slave = await follow(master_store, slave_store)
        assert slave.epochs is not None and slave.epochs.note is not None
        assert slave.epochs.note.startswith("consistent with the master")


async def test_a_master_without_epochs_is_followed_as_before(
    autojump_clock: trio.testing.MockClock, master_store: CommitLogStore, tmp_path: Path
) -> None:
    put(master_store, 40)  # a RocketMQ 4.9.8 master: no epoch file, no HANET_EPOCHS

    async def rocketmq_498(mine: EpochHistory) -> str:
        return "the master's broker port keeps no epochs (a RocketMQ 4.9.8 broker)"

    master = HAMaster(master_store, CONFIG)
    with open_store(tmp_path / "slave", StoreRole.SLAVE) as slave_store:
        async with trio.open_nursery() as nursery:
            slave = HASlave(
                slave_store, CONFIG, connector=Link(nursery, master), epoch_source=rocketmq_498
            )
            await nursery.start(slave.run)
            await wait_until(lambda: slave_store.max_offset == master_store.max_offset)
            nursery.cancel_scope.cancel()
        assert slave.status().epoch_check == (
            "epochs not compared: the master's broker port keeps no epochs (a RocketMQ 4.9.8 "
            "broker)"
        )
        assert not (slave_store.root / EPOCH_FILE).exists()
        end = master_store.max_offset
        assert commit_log_bytes(slave_store, 0, end) == commit_log_bytes(master_store, 0, end)


async def test_no_common_epoch_is_refused_even_with_truncate(
    autojump_clock: trio.testing.MockClock, master_store: CommitLogStore, tmp_path: Path
) -> None:
    with open_store(tmp_path / "slave") as other:  # written under another master's epoch 7
        put(other, 10)
        EpochFile.load(other.root).append(EpochEntry(7, 0))
    with open_store(tmp_path / "slave", StoreRole.SLAVE) as slave_store:
        start_master_term(master_store)
        put(master_store, 10)
        master = HAMaster(master_store, TRUNCATE)
        async with trio.open_nursery() as nursery:
            link = Link(nursery, master)
            slave = HASlave(
                slave_store, TRUNCATE, connector=link, epoch_source=source_of(master_store)
            )
            await nursery.start(slave.run)
            await trio.sleep(12)
            status = slave.status()
            nursery.cancel_scope.cancel()
        assert link.connects == 0 and status.epoch_diverged_at == -1
        assert status.epoch_check is not None and "--resync" in status.epoch_check
        assert not (slave_store.root / "cut").exists()


async def test_a_damaged_epoch_file_stops_the_slave_with_its_name(
    autojump_clock: trio.testing.MockClock, master_store: CommitLogStore, tmp_path: Path
) -> None:
    start_master_term(master_store)
    with open_store(tmp_path / "slave", StoreRole.SLAVE) as slave_store:
        (slave_store.root / EPOCH_FILE).write_bytes(b"hanet-epochs 1\n1 0\ncrc32 deadbeef\n")
        with pytest.raises(BaseException) as info:
            await follow(master_store, slave_store)
        (error,) = [e for e in leaves(info.value) if isinstance(e, EpochFileError)]
        assert str(slave_store.root / EPOCH_FILE) in str(error) and error.offset == 19
