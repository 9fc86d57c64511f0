"""HANET_EPOCHS on the broker port (in-process brokers over loopback TCP): a master's terms, the
answer a slave reads, a damaged epoch file, an ACL master, the metrics and status of a
diverged slave."""

from __future__ import annotations

import errno
import json
import logging
import os
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import pytest
from broker_support import config, fmt, put, running
from test_acl_broker import OPERATOR, acl_file
from test_broker_metrics import STATUS, sample
from test_ha_divergence import leaves

from hanet.broker import MAX_HISTORY_BODY, BrokerMetrics, apply_properties, fetch_epochs
from hanet.cli import build_config, build_parser
from hanet.client import RemotingConnection, signing
from hanet.ha import BrokerConfig, format_epochs
from hanet.protocol import HanetRequestCode, MasterLink, RemotingCommand, ResponseCode
from hanet.store import EPOCH_FILE, EpochEntry, EpochFile, EpochFileError, EpochHistory
from hanet.testing import wait_until


async def ask(address: str) -> RemotingCommand:
    host, _, port = address.rpartition(":")
    async with RemotingConnection.connect(host, int(port)) as conn:
        return await conn.invoke(RemotingCommand.request(HanetRequestCode.HANET_EPOCHS))


async def test_each_master_start_is_a_term_served_as_hanet_epochs(tmp_path: Path) -> None:
    cfg = config(tmp_path / "m")
    async with running(cfg) as (master, addresses):
        first_end = (await put(master, "T", b"x" * 500)).wrote_offset + 1
        history = await fetch_epochs(fmt(addresses.broker))
        assert history == EpochHistory((EpochEntry(1, 0),), master.store.max_offset)
        assert first_end <= master.store.max_offset
        assert master.status().epoch == 1
    async with running(cfg) as (master, addresses):  # restarted: epoch 2 where the log ended
        end = master.store.max_offset
        await put(master, "T", b"y" * 500)
        assert master.status().epoch == 2
        answer = await ask(fmt(addresses.broker))
        assert answer.code == ResponseCode.SUCCESS
        assert answer.fields["maxOffset"] == str(master.store.max_offset)
        assert EpochHistory.from_json(json.loads(bytes(answer.body))) == (
            EpochHistory((EpochEntry(1, 0), EpochEntry(2, end)), master.store.max_offset)
        )


async def test_a_damaged_epoch_file_is_named_and_stops_a_master(tmp_path: Path) -> None:
    cfg = config(tmp_path / "m")
    async with running(cfg) as (_, addresses):
        (tmp_path / "m" / EPOCH_FILE).write_bytes(b"hanet-epochs 1\n1 0\ncrc32 00000000\n")
        answer = await ask(fmt(addresses.broker))
        assert answer.code == ResponseCode.SYSTEM_ERROR
        assert f"{tmp_path / 'm' / EPOCH_FILE} at byte 19: CRC mismatch" in (answer.remark or "")
        with pytest.raises(OSError, match="answered HANET_EPOCHS with code 1: epoch file"):
            await fetch_epochs(fmt(addresses.broker))
    with pytest.raises(BaseException) as info:
        async with running(cfg):
            pass
    (error,) = [e for e in leaves(info.value) if isinstance(e, EpochFileError)]
    assert "CRC mismatch" in str(error) and error.path == tmp_path / "m" / EPOCH_FILE


async def test_the_master_names_a_diverged_slave_too(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with running(config(tmp_path / "m")) as (master, addresses):
        await put(master, "T", b"z" * 300)
        end = master.store.max_offset
        # a slave that holds more of epoch 1 than this master, then an epoch 2 of its own
        slave = EpochHistory((EpochEntry(1, 0), EpochEntry(2, end + 100)), end + 900)
        for _ in range(3):
            assert isinstance(await fetch_epochs(fmt(addresses.broker), slave), EpochHistory)
        # a new slave (no epochs yet) is not a divergence
        await fetch_epochs(fmt(addresses.broker), EpochHistory((), 0))
        bad = RemotingCommand.request(HanetRequestCode.HANET_EPOCHS, body=b"{not json")
        host, _, port = fmt(addresses.broker).rpartition(":")
        async with RemotingConnection.connect(host, int(port)) as conn:
            answer = await conn.invoke(bad)
        assert answer.code == ResponseCode.SYSTEM_ERROR
        assert "not an epoch history" in (answer.remark or "")
    warnings = [r.getMessage() for r in caplog.records if r.name == "hanet.broker.epochs"]
    assert len(warnings) == 1  # once a minute per slave and point
    assert f"diverged from this master at offset {end}" in warnings[0]
    assert f"its log goes on to {end + 900}" in warnings[0]


async def test_an_acl_master_answers_signed_slaves_and_unsigned_ones_are_not_blocked(
    tmp_path: Path,
) -> None:
    acl_file(tmp_path / "m")
    async with running(config(tmp_path / "m", acl_enable=True)) as (_, addresses):
        unsigned = await fetch_epochs(fmt(addresses.broker))
        assert isinstance(unsigned, str) and "refused HANET_EPOCHS" in unsigned
        assert "--access-key" in unsigned
        with signing(OPERATOR):
            signed = await fetch_epochs(fmt(addresses.broker))
        assert isinstance(signed, EpochHistory) and signed.entries == (EpochEntry(1, 0),)


async def test_no_broker_address_is_a_reason_not_an_error() -> None:
    reason = await fetch_epochs(None)
    assert isinstance(reason, str) and "--master-broker" in reason


def test_a_diverged_slave_in_metrics() -> None:
    link = MasterLink("127.0.0.1:10912", False, 0, 4, None)
    for diverged_at, flag in ((None, 0), (4096, 1)):
        status = attrs.evolve(
            STATUS,
            role="SLAVE",
            slaves=(),
            replicated_offset=None,
            master=attrs.evolve(link, epoch_diverged_at=diverged_at, epoch_check="..."),
        )
        text = BrokerMetrics(partial(attrs.evolve, status)).exposition().decode()
        assert sample(text, "hanet_epoch_diverged ") == flag
        if diverged_at is None:
            assert "hanet_epoch_diverged_offset" not in text
        else:
            assert sample(text, "hanet_epoch_diverged_offset") == diverged_at


def test_the_setting_and_its_names() -> None:
    assert BrokerConfig().ha_divergence == "refuse"
    assert BrokerConfig(ha_divergence="truncate").ha_divergence == "truncate"
    with pytest.raises(ValueError, match="refuse or truncate"):
        BrokerConfig(ha_divergence="drop")
    assert apply_properties({"haDivergence": "truncate"}).ha_divergence == "truncate"
    argv = ["slave", "--master-ha", "127.0.0.1:1", "--ha-divergence", "truncate"]
    assert build_config(build_parser().parse_args(argv)).ha_divergence == "truncate"
    with pytest.raises(SystemExit):
        build_parser().parse_args([*argv[:-1], "drop"])


async def test_a_slave_history_is_bounded(tmp_path: Path) -> None:
    """A body past MAX_HISTORY_BODY is refused unread; one slave host lists a few points."""
    async with running(config(tmp_path / "m")) as (master, addresses):
        await put(master, "T", b"z" * 300)
        broker = fmt(addresses.broker)
        host, _, port = broker.rpartition(":")
        huge = RemotingCommand.request(
            HanetRequestCode.HANET_EPOCHS, body=b" " * (MAX_HISTORY_BODY + 1)
        )
        async with RemotingConnection.connect(host, int(port)) as conn:
            answer = await conn.invoke(huge)
        assert answer.code == ResponseCode.SYSTEM_ERROR
        assert "longer than an epoch history is read from" in (answer.remark or "")
        # a slave whose history would be longer sends none: the master answers all the same
        long = EpochHistory(tuple(EpochEntry(i, i) for i in range(100_000)), 100_000)
        assert isinstance(await fetch_epochs(broker, long), EpochHistory)
        # each check of one host diverged at another point: its newest few are listed
        for point in range(10, 70, 10):
            await fetch_epochs(broker, EpochHistory((EpochEntry(1, 0), EpochEntry(2, point)), 99))
        listed = master.status().diverged_slaves
        assert [d.diverged_at for d in listed] == [30, 40, 50, 60]


def test_a_long_history_is_shown_short() -> None:
    assert format_epochs(()) == "none"
    assert format_epochs((EpochEntry(1, 0), EpochEntry(2, 7))) == "1@0, 2@7"
    shown = format_epochs(tuple(EpochEntry(i, i) for i in range(1, 101)))
    assert shown == "(92 earlier), " + ", ".join(f"{i}@{i}" for i in range(93, 101))


async def test_a_term_a_full_disk_kept_out_of_the_epoch_file_is_recorded_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The epoch file cannot be written when the master starts (ENOSPC): it serves all the
    same, and records its term once the file can be written, at the offset it has reached
    then (the records before count as the previous term's, as its slaves saw them)."""
    full = True
    real = EpochFile.replace

    def replace(self: EpochFile, entries: Any) -> bool:
        if full:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, entries)

    monkeypatch.setattr(EpochFile, "replace", replace)
    with caplog.at_level(logging.WARNING, "hanet.broker"):
        async with running(config(tmp_path)) as (broker, _):
            await put(broker, "T", b"served without the term")
            assert "epoch could not be recorded" in caplog.text
            assert not (tmp_path / EPOCH_FILE).exists()
            full = False
            await wait_until((tmp_path / EPOCH_FILE).exists, seconds=10)
            offset = broker.store.max_offset
    assert EpochFile.load(tmp_path).entries == (EpochEntry(1, offset),)
    assert offset > 0 and "recorded late: epoch 1 from offset" in caplog.text
