"""Tests of hanet.store's mapped files and mapped file queue."""

from __future__ import annotations

from pathlib import Path

import pytest

from hanet.store import OffsetMismatchError, StoreLayoutError
from hanet.store.lowlevel import MappedFile, MappedFileQueue, file_name, list_mapped_files


def test_file_names_are_20_digits() -> None:
    assert file_name(0) == "00000000000000000000"
    assert file_name(1073741824) == "00000000001073741824"


def test_create_preallocates_and_prefaults(tmp_path: Path) -> None:
    mapped = MappedFile.create(tmp_path / file_name(4096), 4096, 4096)
    try:
        assert (tmp_path / "00000000000000004096").stat().st_size == 4096
        assert mapped.end_offset == 8192
        assert mapped.write_offset == 4096
        mapped.view[0:3] = b"abc"
        mapped.wrote = 3
        assert mapped.flush() == 3
        with pytest.raises(StoreLayoutError, match="exists"):
            MappedFile.create(tmp_path / file_name(4096), 4096, 4096)
    finally:
        mapped.close()
        mapped.close()
    assert (tmp_path / "00000000000000004096").read_bytes()[:3] == b"abc"


def test_unwarmed_file(tmp_path: Path) -> None:
    mapped = MappedFile.create(tmp_path / file_name(0), 0, 8192, warm=False)
    mapped.prefault()
    mapped.delete()
    assert not (tmp_path / file_name(0)).exists()


@pytest.mark.parametrize("warm", [True, False], ids=["mapping", "written-through"])
def test_append_raw_crosses_into_new_files_and_reads_never_cross(
    tmp_path: Path, warm: bool
) -> None:
    # A warm queue copies into the mapping; one that is not writes through the file (pwrite):
    # the same bytes either way, on disk and through the mapping, and a view taken before a
    # write shows it.
    queue = MappedFileQueue(tmp_path / "q", 100, warm=warm)
    assert queue.max_offset == 0
    data = bytes(range(250))
    queue.append_raw(0, data[:30])
    early = queue.files[0].view[30:40]
    queue.append_raw(30, data[30:])
    assert early == data[30:40]
    assert (tmp_path / "q" / file_name(100)).read_bytes() == data[100:200]
    assert [p.name for _, p in list_mapped_files(tmp_path / "q")] == [
        file_name(0),
        file_name(100),
        file_name(200),
    ]
    assert queue.min_offset == 0
    assert queue.max_offset == 250
    assert queue.read(90, 50) == data[90:100]
    assert queue.read(100, 1000) == data[100:200]
    assert queue.read(240, 1000) == data[240:250]
    assert queue.read(250, 10) == b""
    assert queue.read(1000, 10) == b""
    with pytest.raises(OffsetMismatchError) as info:
        queue.append_raw(249, b"x")
    assert (info.value.expected, info.value.actual) == (250, 249)
    queue.close()


def test_empty_queue_accepts_any_start(tmp_path: Path) -> None:
    queue = MappedFileQueue(tmp_path, 100)
    queue.append_raw(1234, b"abcd")
    assert queue.files[0].start_offset == 1200
    assert queue.min_offset == 1234
    assert queue.max_offset == 1238
    assert queue.read(1234, 10) == b"abcd"
    with pytest.raises(ValueError, match="below"):
        queue.read(1200, 10)
    queue.close()


def test_load_refuses_wrong_size_and_gaps(tmp_path: Path) -> None:
    (tmp_path / file_name(0)).write_bytes(bytes(100))
    (tmp_path / file_name(100)).write_bytes(bytes(99))
    with pytest.raises(StoreLayoutError, match="99 bytes, expected 100"):
        MappedFileQueue(tmp_path, 100).load()
    (tmp_path / file_name(100)).unlink()
    (tmp_path / file_name(200)).write_bytes(bytes(100))
    with pytest.raises(StoreLayoutError, match="gap"):
        MappedFileQueue(tmp_path, 100).load()
    (tmp_path / file_name(200)).unlink()
    (tmp_path / file_name(150)).write_bytes(bytes(100))
    with pytest.raises(StoreLayoutError, match="multiple"):
        MappedFileQueue(tmp_path, 100).load()


def test_truncate_deletes_later_files_and_zeroes(tmp_path: Path) -> None:
    queue = MappedFileQueue(tmp_path, 100)
    queue.append_raw(0, b"\xff" * 250)
    queue.truncate(130)
    assert queue.max_offset == 130
    assert len(queue.files) == 2
    assert not (tmp_path / file_name(200)).exists()
    assert queue.files[1].view[30:100].tobytes() == bytes(70)
    queue.append_raw(130, b"\x01" * 80)
    assert queue.max_offset == 210
    queue.truncate(100)
    assert [m.start_offset for m in queue.files] == [0]
    assert queue.max_offset == 100
    queue.close()
    again = MappedFileQueue(tmp_path, 100)
    again.load()
    assert again.max_offset == 100  # loaded files count as full until recovery says otherwise
    again.flush()
    again.delete_all()
    assert again.max_offset == 0
    assert list_mapped_files(tmp_path) == []


def test_bad_file_size() -> None:
    with pytest.raises(ValueError):
        MappedFileQueue(Path("x"), 0)


def test_leftover_of_a_crash_while_preallocating_is_removed(tmp_path: Path) -> None:
    queue = MappedFileQueue(tmp_path, 100)
    queue.append_raw(0, b"x" * 100)
    queue.close()
    (tmp_path / (file_name(100) + ".creating")).write_bytes(b"")
    again = MappedFileQueue(tmp_path, 100)
    again.load()
    assert [m.start_offset for m in again.files] == [0]
    assert not (tmp_path / (file_name(100) + ".creating")).exists()
    again.append_raw(100, b"y")
    assert again.read(100, 10) == b"y"
    again.close()
