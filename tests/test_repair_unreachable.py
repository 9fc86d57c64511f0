"""``--repair-from`` says why a replica gave nothing back: a lost tail no replica returned is
named in the log (issue #21's soak found one skipped in silence)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from hanet.broker import repair_store
from hanet.store import CommitLogStore, Message, StoreConfig
from hanet.testing import free_ports

CONFIG = StoreConfig(mapped_file_size=4096)


async def test_a_replica_that_gave_nothing_is_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with CommitLogStore.open(tmp_path, CONFIG) as store:
        store.put(Message("T", b"x"))
    (port,) = free_ports(1)  # nothing listens there
    with caplog.at_level(logging.WARNING, "hanet.broker.repair"):
        assert await repair_store(CONFIG, tmp_path, f"127.0.0.1:{port}") == []
    (line,) = [r.getMessage() for r in caplog.records if r.name == "hanet.broker.repair"]
    assert line.startswith(f"--repair-from: nothing taken from 127.0.0.1:{port}: ")
    assert "connect" in line
