"""``hanet slave --truncate-to`` / ``--resync`` keep the bytes they cut aside (hard links of
whole files, a copy of the partial one) instead of deleting them: data a master lost may exist
only there."""

from __future__ import annotations

from pathlib import Path

from hanet.ha import HASlave
from hanet.store import CommitLogStore, Message, StoreConfig, StoreRole

CONFIG = StoreConfig(mapped_file_size=8192, role=StoreRole.SLAVE)


def fill(root: Path) -> tuple[bytes, int]:
    with CommitLogStore.open(root, StoreConfig(mapped_file_size=8192)) as store:
        for i in range(150):
            assert store.put(Message("T", b"%03d" % i * 30)).ok
        end = store.max_offset
        data = b""
        while len(data) < end:
            data += store.read(len(data), end - len(data))
    return data, end


def kept_bytes(directory: Path) -> bytes:
    parts = sorted(directory.iterdir(), key=lambda p: int(p.name.split(".")[0]))
    out = b""
    for path in parts:
        data = path.read_bytes()
        out += data
    return out


def test_truncate_to_keeps_the_cut_bytes(tmp_path: Path) -> None:
    data, end = fill(tmp_path)
    with CommitLogStore.open(tmp_path, CONFIG) as store:
        entry = store.consume_queue_entry("T", 0, 45)
        assert entry is not None
        cut = entry[0]
        assert cut % 8192 and end - cut > 8192  # inside a file, files after it
        message = HASlave.truncate_store(store, cut)
        assert store.max_offset == cut
    assert f"kept in {tmp_path / 'cut'}" in message
    (directory,) = (tmp_path / "cut").iterdir()
    kept = kept_bytes(directory)
    # the partial file's tail from the cut on, then the later files whole (blank tails included)
    assert kept[: end - cut].rstrip(b"\0") == data[cut:end].rstrip(b"\0")


def test_resync_keeps_every_file(tmp_path: Path) -> None:
    data, end = fill(tmp_path)
    with CommitLogStore.open(tmp_path, CONFIG) as store:
        files = sorted(p.name for p in (tmp_path / "commitlog").iterdir())
        message = HASlave.empty_store(store)
    assert "kept in" in message
    (directory,) = (tmp_path / "cut").iterdir()
    assert sorted(p.name.split(".")[0] for p in directory.iterdir()) == files
    assert kept_bytes(directory)[:end] == data
