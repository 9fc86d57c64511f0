"""A master lists the slaves whose epochs diverged from its own in its status document and in
``hanet status`` (issue #21), not only in its log (in-process brokers over loopback TCP)."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest
import trio
from broker_support import config, fmt, put, running

from hanet.broker import fetch_epochs
from hanet.cli import build_parser
from hanet.protocol import BrokerStatus
from hanet.store import EpochEntry, EpochHistory


async def status_verb(*argv: str) -> int:
    args = build_parser().parse_args(["status", *argv])
    done: int = await args.func(args)
    return done


async def test_the_master_lists_a_diverged_slave_in_its_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with running(config(tmp_path / "m")) as (master, addresses):
        await put(master, "T", b"z" * 300)
        end = master.store.max_offset
        assert master.status().diverged_slaves == ()
        # a slave holding more of epoch 1 than this master, then an epoch 2 of its own
        slave = EpochHistory((EpochEntry(1, 0), EpochEntry(2, end + 100)), end + 900)
        for _ in range(3):
            await fetch_epochs(fmt(addresses.broker), slave)
        await fetch_epochs(fmt(addresses.broker), EpochHistory((), 0))  # a new slave: not one
        (listed,) = master.status().diverged_slaves
        assert listed.address.startswith("127.0.0.1:")
        assert (listed.diverged_at, listed.slave_end, listed.master_end) == (end, end + 900, end)
        assert (listed.slave_epochs, listed.checks) == (f"1@0, 2@{end + 100}", 3)

        broker = fmt(addresses.broker)
        assert await status_verb("--broker", broker, "--json") == 0
        document = json.loads(capsys.readouterr().out)
        (shown,) = BrokerStatus.from_json(document).diverged_slaves
        assert attrs.evolve(shown, last_seen_ago=listed.last_seen_ago) == listed
        assert await status_verb("--broker", broker) == 0
        out = " ".join(capsys.readouterr().out.split())  # the table folds long rows
        assert "slave diverged" in out
        assert f"its log goes on to {end + 900} past the consistent point {end}" in out
        assert "3 checks" in out

        # the slave truncated to the point (haDivergence=truncate): its next check is not listed
        await fetch_epochs(fmt(addresses.broker), EpochHistory((EpochEntry(1, 0),), end))
        assert master.status().diverged_slaves == ()


async def test_a_slave_that_stopped_asking_is_dropped_from_the_list(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with running(config(tmp_path / "m")) as (master, addresses):
        await put(master, "T", b"z" * 300)
        end = master.store.max_offset
        slave = EpochHistory((EpochEntry(1, 0), EpochEntry(2, end + 1)), end + 50)
        await fetch_epochs(fmt(addresses.broker), slave)
        assert len(master.status().diverged_slaves) == 1
        await trio.sleep(60)
        assert master.status().diverged_slaves[0].last_seen_ago >= 60
        await trio.sleep(61)
        assert master.status().diverged_slaves == ()


def test_the_document_reads_without_the_list() -> None:
    """An older broker's document has no ``diverged_slaves``: an empty list."""
    status = BrokerStatus("SYNC_MASTER", None, None, 0, 0, 0, 0, 0, 0, None, 1.0)
    document = status.to_json()
    del document["diverged_slaves"]
    assert BrokerStatus.from_json(document) == status
