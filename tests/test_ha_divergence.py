"""A slave that cannot follow its master (virtual time, real stores): ahead of a master that lost
its tail (refused, shown on both sides, ``--truncate-to`` / ``--resync`` as the way out), and a
slave whose commit log files are not the master's size (stops with one clear error)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import trio
import trio.testing
from ha_support import FILE, Link, commit_log_bytes, open_store, put

from hanet.cli import build_parser, main
from hanet.errors import ConfigError
from hanet.ha import BrokerConfig, HAMaster, HASlave
from hanet.store import CommitLogStore, StoreRole
from hanet.testing import wait_until

CONFIG = BrokerConfig(mapped_file_size_commit_log=FILE, full_sync=True, reconnect_interval=5.0)


async def replicate(master: HAMaster, slave_store: CommitLogStore, config: BrokerConfig) -> None:
    """Run a slave until it has everything the master has."""
    async with trio.open_nursery() as nursery:
        await nursery.start(HASlave(slave_store, config, connector=Link(nursery, master)).run)
        await wait_until(lambda: slave_store.max_offset == master.store.max_offset, seconds=120)
        nursery.cancel_scope.cancel()


def record_boundary(store: CommitLogStore, n: int) -> int:
    entry = store.consume_queue_entry("T", 0, n)
    assert entry is not None
    return entry[0]


async def diverged_slave(
    tmp_path: Path, master_store: CommitLogStore, *, new_puts: int = 0
) -> tuple[int, int]:
    """A slave holding all of 200 records, a master that lost everything from record 150 on
    (then took ``new_puts`` other records); returns (master's max, slave's max)."""
    put(master_store, 200)
    master = HAMaster(master_store, CONFIG)
    with open_store(tmp_path / "slave", StoreRole.SLAVE) as slave_store:
        await replicate(master, slave_store, CONFIG)
        slave_end = slave_store.max_offset
    master_store.truncate_to(record_boundary(master_store, 150))
    put(master_store, new_puts, size=60, fill=7)
    return master_store.max_offset, slave_end


def leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for sub in error.exceptions for leaf in leaves(sub)]
    return [error]


# -- 1. a slave ahead of its master ----------------------------------------------------------------


async def test_a_slave_ahead_of_the_master_is_refused_and_shown_on_both_sides(
    autojump_clock: trio.testing.MockClock,
    master_store: CommitLogStore,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    master_end, slave_end = await diverged_slave(tmp_path, master_store)
    assert slave_end > master_end
    master = HAMaster(master_store, CONFIG)
    caplog.clear()
    with open_store(tmp_path / "slave", StoreRole.SLAVE) as slave_store:
        async with trio.open_nursery() as nursery:
            link = Link(nursery, master)
            slave = HASlave(slave_store, CONFIG, connector=link)
            await nursery.start(slave.run)
            await wait_until(lambda: link.connects >= 6, seconds=120)  # 25 s of refusals
            status = slave.status()
            assert status.diverged and status.refused_offset == slave_end
            assert status.refusals >= 5
            await trio.sleep(65)  # a minute later the master says it again
            nursery.cancel_scope.cancel()
        assert slave_store.max_offset == slave_end  # nothing lost, nothing taken
    ahead = (
        f"the master's log ends at {master_end}, this slave's at {slave_end}: the slave is ahead"
    )
    closed = master.status().closed
    assert closed and all(s.state.startswith("closed: diverged: ") for s in closed)
    assert all(ahead in s.state and f"--truncate-to {master_end}" in s.state for s in closed)
    levels = [
        r.levelno for r in caplog.records if r.name == "hanet.ha.master" and ahead in r.getMessage()
    ]
    assert levels.count(logging.ERROR) == 2  # once, then once more after a minute
    assert levels[0] == logging.ERROR and levels.count(logging.WARNING) >= 10
    slave_errors = [
        r.getMessage()
        for r in caplog.records
        if r.name == "hanet.ha.slave" and r.levelno == logging.ERROR
    ]
    assert len(slave_errors) == 2
    assert f"right after our report of offset {slave_end}" in slave_errors[0]
    assert "--truncate-to" in slave_errors[0] and "--resync" in slave_errors[0]


async def test_truncate_to_the_masters_end_lets_the_slave_follow_again(
    autojump_clock: trio.testing.MockClock, master_store: CommitLogStore, tmp_path: Path
) -> None:
    master_end, slave_end = await diverged_slave(tmp_path, master_store)
    with open_store(tmp_path / "slave", StoreRole.SLAVE) as slave_store:
        done = HASlave.truncate_store(slave_store, master_end)
        assert f"from {slave_end} to {master_end}" in done
        assert slave_store.max_offset == master_end
    put(master_store, 100, fill=3)  # the master goes on
    master = HAMaster(master_store, CONFIG)
    with open_store(tmp_path / "slave", StoreRole.SLAVE) as slave_store:
        async with trio.open_nursery() as nursery:
            link = Link(nursery, master)
            slave = HASlave(slave_store, CONFIG, connector=link)
            await nursery.start(slave.run)
            await wait_until(lambda: slave_store.max_offset == master_store.max_offset, seconds=120)
            assert not slave.status().diverged
            nursery.cancel_scope.cancel()
        assert link.connects == 1
        end = master_store.max_offset
        assert commit_log_bytes(slave_store, 0, end) == commit_log_bytes(master_store, 0, end)
        assert slave_store.dispatch_error is None
        assert slave_store.max_queue_offset("T", 0) == master_store.max_queue_offset("T", 0)


async def test_resync_starts_over_even_when_the_master_took_other_records(
    autojump_clock: trio.testing.MockClock, master_store: CommitLogStore, tmp_path: Path
) -> None:
    await diverged_slave(tmp_path, master_store, new_puts=30)
    with open_store(tmp_path / "slave", StoreRole.SLAVE) as slave_store:
        done = HASlave.empty_store(slave_store)
        assert "starts over" in done
    with open_store(tmp_path / "slave", StoreRole.SLAVE) as slave_store:
        assert (slave_store.min_offset, slave_store.max_offset) == (0, 0)
        assert slave_store.max_queue_offset("T", 0) == 0
        await replicate(HAMaster(master_store, CONFIG), slave_store, CONFIG)
        end = master_store.max_offset
        assert commit_log_bytes(slave_store, 0, end) == commit_log_bytes(master_store, 0, end)
        assert slave_store.max_queue_offset("T", 0) == master_store.max_queue_offset("T", 0)
        for q in range(master_store.max_queue_offset("T", 0)):
            assert slave_store.consume_queue_entry("T", 0, q) == master_store.consume_queue_entry(
                "T", 0, q
            )


async def test_truncate_store_accepts_only_record_boundaries_inside_the_data(
    autojump_clock: trio.testing.MockClock, master_store: CommitLogStore, tmp_path: Path
) -> None:
    end = put(master_store, 200)
    inside = record_boundary(master_store, 120)
    with pytest.raises(ValueError, match="inside the record at"):
        HASlave.truncate_store(master_store, inside + 5)
    with pytest.raises(ValueError, match="ends at"):
        HASlave.truncate_store(master_store, end + 1)
    assert master_store.max_offset == end  # untouched
    assert "nothing to truncate" in HASlave.truncate_store(master_store, end)
    early = record_boundary(master_store, 30)
    HASlave.truncate_store(master_store, 2 * FILE)  # a file start
    assert master_store.max_offset == 2 * FILE
    HASlave.truncate_store(master_store, early)  # a record start
    assert master_store.max_offset == early
    assert "starts over" in HASlave.truncate_store(master_store, 0)


# -- 2. commit log files of another size -----------------------------------------------------------


@pytest.mark.parametrize("full_sync", [True, False], ids=["full-sync", "last-file"])
@pytest.mark.parametrize(("master_size", "slave_size"), [(8192, 16384), (16384, 8192)])
async def test_a_file_size_mismatch_stops_the_slave_with_one_clear_error(
    autojump_clock: trio.testing.MockClock,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    master_size: int,
    slave_size: int,
    full_sync: bool,
) -> None:
    config = BrokerConfig(mapped_file_size_commit_log=master_size, full_sync=full_sync)
    slave_config = BrokerConfig(mapped_file_size_commit_log=slave_size, full_sync=full_sync)
    with (
        open_store(tmp_path / "master", size=master_size) as master_store,
        open_store(tmp_path / "slave", StoreRole.SLAVE, size=slave_size) as slave_store,
    ):
        put(master_store, 200)
        master = HAMaster(master_store, config)
        errors: list[BaseException] = []
        try:
            async with trio.open_nursery() as nursery:
                link = Link(nursery, master)
                slave = HASlave(slave_store, slave_config, connector=link)
                await nursery.start(slave.run)

                async def keep_putting() -> None:  # until the next file boundary shows it
                    for _ in range(400):
                        await trio.sleep(0.1)
                        put(master_store, 1)

                nursery.start_soon(keep_putting)
                with trio.fail_after(120):
                    await trio.sleep_forever()
        except* ConfigError as group:
            errors.extend(leaves(group))
        assert len(errors) == 1
        message = str(errors[0])
        assert message.startswith("commit log file size mismatch: ")
        assert f"this slave's files are {slave_size} bytes" in message
        assert "--mapped-file-size" in message
        if master_size < slave_size:
            assert f"probably {master_size} bytes" in message
        assert link.connects == 1  # stopped, not reconnecting
        assert slave.status().error == message
        assert any(r.levelno == logging.ERROR and message in r.getMessage() for r in caplog.records)
        # every byte the slave kept is the master's byte at the same offset, and no file of
        # the slave holds bytes of two master files
        low, high = slave_store.min_offset, slave_store.max_offset
        assert commit_log_bytes(slave_store, low, high) == commit_log_bytes(master_store, low, high)
        for start in range(low - low % slave_size, high, slave_size):
            first, last = max(start, low), min(start + slave_size, high) - 1
            assert first // master_size == last // master_size


# -- 3. the command line -------------------------------------------------------------------------


def test_truncate_to_and_resync_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["slave", "--store", str(tmp_path / "s"), "--master-ha", "127.0.0.1:1"]
    args = build_parser().parse_args([*base, "--truncate-to", "4096"])
    assert (args.truncate_to, args.resync) == (4096, False)
    args = build_parser().parse_args([*base, "--resync"])
    assert (args.truncate_to, args.resync) == (None, True)
    for bad in (
        ["--truncate-to", "4096", "--resync"],
        ["--truncate-to", "-1"],
        ["--truncate-to", "x"],
    ):
        with pytest.raises(SystemExit) as exit_info:
            build_parser().parse_args([*base, *bad])
        assert exit_info.value.code == 2
    capsys.readouterr()
    # an offset that is not a record boundary: one line, exit 2, the store untouched
    with open_store(tmp_path / "s", StoreRole.MASTER, size=64 * 1024) as store:
        end = put(store, 20)
    argv = [*base, "--mapped-file-size", "64K", "--truncate-to", "7"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("hanet: cannot truncate to 7: ")
    with open_store(tmp_path / "s", StoreRole.SLAVE, size=64 * 1024) as store:
        assert store.max_offset == end


async def test_the_slave_verb_truncates_then_replicates(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="hanet.broker")
    with open_store(tmp_path / "s", StoreRole.MASTER, size=64 * 1024) as store:
        put(store, 20)
        cut = record_boundary(store, 12)
        end = store.max_offset
    ready = tmp_path / "ready.json"
    base = ["slave", "--store", str(tmp_path / "s"), "--master-ha", "127.0.0.1:1"]
    async with trio.open_nursery() as nursery:
        args = build_parser().parse_args(
            [
                *base,
                "--mapped-file-size",
                "64K",
                "--truncate-to",
                str(cut),
                "--reconnect-interval",
                "60",
                "--ready-file",
                str(ready),
            ]
        )
        nursery.start_soon(args.func, args)
        await wait_until(ready.exists, 10)
        nursery.cancel_scope.cancel()
    out = [r.getMessage() for r in caplog.records if r.name == "hanet.broker"]
    assert out[0].startswith(
        f"--truncate-to {cut}: store {tmp_path / 's'}, commit log [0, {end}): truncated the "
        f"commit log from {end} to {cut} ({end - cut} bytes cut, kept in {tmp_path / 's' / 'cut'}"
    )
    assert out[0].endswith("); replication resumes from there")
    (kept,) = (tmp_path / "s" / "cut").iterdir()  # the cut bytes, byte for byte
    assert sum(p.stat().st_size for p in kept.iterdir()) == end - cut
    assert out[1].startswith("SLAVE ready: ")
    with open_store(tmp_path / "s", StoreRole.SLAVE, size=64 * 1024) as store:
        assert store.max_offset == cut
