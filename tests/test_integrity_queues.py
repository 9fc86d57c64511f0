"""Consume queues are derived data: a queue file cut short, zeroed entries or a lost
``consumequeue`` directory are named by ``hanet verify`` (exit 1) and rebuilt from the commit
log when the store opens, instead of a store that refuses to start or a consumer stuck on
errors."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from hanet.cli import main
from hanet.store import CommitLogStore, CorruptRecordError, Message, StoreConfig
from hanet.store.lowlevel import file_name

CONFIG = StoreConfig(mapped_file_size=64 * 1024, consume_queue_file_size=20 * 50)


def make_store(root: Path, count: int = 300) -> None:
    with CommitLogStore.open(root, CONFIG) as store:
        for i in range(count):
            message = Message("Orders", b"order %d" % i, queue_id=i % 2, properties={"TAGS": "a"})
            assert store.put(message).ok


def queue_file(root: Path, queue_id: int, index: int) -> Path:
    return (
        root
        / "consumequeue"
        / "Orders"
        / str(queue_id)
        / file_name(index * CONFIG.consume_queue_file_size)
    )


def verify(root: Path) -> int:
    return main(["verify", str(root), "--mapped-file-size", str(CONFIG.mapped_file_size)])


def all_readable(root: Path, count: int = 300) -> None:
    with CommitLogStore.open(root, CONFIG) as store:
        assert store.dispatch_error is None
        for i in range(count):
            record = store.get_message("Orders", i % 2, i // 2)
            assert record is not None and record.body == b"order %d" % i
        assert store.max_queue_offset("Orders", 0) == count // 2
    assert verify(root) == 0


def test_a_queue_file_cut_short_is_rebuilt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    make_store(tmp_path)
    path = queue_file(tmp_path, 1, 1)
    with path.open("r+b") as f:
        f.truncate(333)
    assert verify(tmp_path) == 1
    assert "consume queue Orders/1" in capsys.readouterr().err
    caplog.set_level(logging.WARNING)
    all_readable(tmp_path)
    assert "consume queue Orders/1" in caplog.text and "rebuilt from the commit log" in caplog.text
    aside = list((tmp_path / "consumequeue" / "Orders").glob("1.damaged-*"))
    assert len(aside) == 1  # the damaged files are kept for a look


@pytest.mark.parametrize("where", ["middle", "last file", "file end"])
def test_zeroed_entries_are_rebuilt(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
    where: str,
) -> None:
    """Two entries zeroed on disk: before, a consumer pulling them got errors for good."""
    make_store(tmp_path)
    # queue 0 holds 150 entries: files of 50 (0-49, 50-99, 100-149)
    index, entry = {"middle": (1, 10), "last file": (2, 30), "file end": (1, 48)}[where]
    path = queue_file(tmp_path, 0, index)
    data = bytearray(path.read_bytes())
    data[entry * 20 : (entry + 2) * 20] = bytes(40)
    path.write_bytes(bytes(data))
    assert verify(tmp_path) == 1
    err = capsys.readouterr().err
    assert f"consume queue Orders/0 entry {index * 50 + entry} is (0, 0, 0)" in err
    caplog.set_level(logging.WARNING)
    all_readable(tmp_path)
    assert f"consume queue Orders/0: entry {index * 50 + entry} is zeroed" in caplog.text


def test_a_lost_consumequeue_directory_is_rebuilt(tmp_path: Path) -> None:
    make_store(tmp_path)
    shutil.rmtree(tmp_path / "consumequeue")
    all_readable(tmp_path)


def test_a_pull_refuses_an_entry_that_points_at_another_record(tmp_path: Path) -> None:
    """An entry pointing at another record of the same size (damaged on disk) would serve the
    wrong message: the pull checks the record's topic, queue, queue offset and tag hash."""
    from hanet.broker import serve_pull

    make_store(tmp_path)
    path = queue_file(tmp_path, 0, 0)
    data = bytearray(path.read_bytes())
    data[5 * 20 : 6 * 20] = data[7 * 20 : 8 * 20]  # entry 5 now points at the record of 7
    path.write_bytes(bytes(data))
    with CommitLogStore.open(tmp_path, CONFIG) as store:
        entry = store.consume_queue_entry("Orders", 0, 5)
        assert entry is not None
        assert serve_pull(store, "Orders", 0, 0, 5).records  # the entries before it serve
        with pytest.raises(CorruptRecordError) as info:
            serve_pull(store, "Orders", 0, 5, 1)
        assert info.value.offset == entry[0]
        assert "entry Orders/0 5" in info.value.reason and "Orders/0 7" in info.value.reason
    assert verify(tmp_path) == 1
