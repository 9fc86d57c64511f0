"""Out of descriptors: a store and a DLedger log that are open keep flushing, and a DLedger node
keeps changing term, with no descriptor left to open (every ``os.open`` fails with EMFILE)."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from hanet.dledger import FileLog, HardState
from hanet.store import CommitLogStore, Message, PutStatus, StoreConfig


def test_a_store_flushes_and_closes_without_new_descriptors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = CommitLogStore.open(tmp_path, StoreConfig(mapped_file_size=64 * 1024))
    assert store.put(Message("T", b"before")).status is PutStatus.PUT_OK
    tried: list[str] = []

    def failing_open(path: Any, *args: Any, **kwargs: Any) -> int:
        tried.append(str(path))
        raise OSError(errno.EMFILE, "Too many open files", str(path))

    monkeypatch.setattr(os, "open", failing_open)
    assert store.put(Message("T", b"during")).status is PutStatus.PUT_OK
    flushed = store.flush()
    assert flushed == store.max_offset
    store.close()
    monkeypatch.undo()
    assert tried == []
    with CommitLogStore.open(tmp_path, StoreConfig(mapped_file_size=64 * 1024)) as again:
        assert again.max_offset == flushed


def test_a_dledger_log_saves_its_hard_state_without_new_descriptors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = FileLog.open(tmp_path, data_file_size=64 * 1024, index_file_size=32 * 64)
    log.save_hard_state(HardState(1, "n0"))
    real_open = os.open
    opened = 0

    def one_left(path: Any, *args: Any, **kwargs: Any) -> int:
        # as many as a save frees: the spare for the next save is made from the one it closed
        nonlocal opened
        if opened >= 1:
            raise OSError(errno.EMFILE, "Too many open files", str(path))
        opened += 1
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", one_left)
    for term in range(2, 12):
        opened = 0
        log.save_hard_state(HardState(term, "n1"))
    log.close()
    monkeypatch.undo()
    with FileLog.open(tmp_path, data_file_size=64 * 1024, index_file_size=32 * 64) as again:
        assert again.load_hard_state() == HardState(11, "n1")
