"""``hanet verify`` and ``hanet dump`` go on past damage (issue #21): each bad range is named
with where the valid records resume, what follows it is still checked, and the epoch file is
checked against the log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hanet.cli import main
from hanet.store import (
    EPOCH_FILE,
    CommitLogStore,
    EpochEntry,
    Message,
    PutResult,
    StoreConfig,
)
from hanet.store.lowlevel import (
    file_name,
    format_epoch_file,
)
from hanet.testing import flip_store_byte

FILE = 4096
CONFIG = StoreConfig(mapped_file_size=FILE)
Capture = pytest.CaptureFixture[str]


def make_store(root: Path, n: int = 80) -> list[PutResult]:
    with CommitLogStore.open(root, CONFIG) as store:
        return [
            store.put(Message("T", b"m%03d" % i, queue_id=i % 2, properties={"TAGS": "a"}))
            for i in range(n)
        ]


def run(capsys: Capture, *argv: str) -> tuple[int, str, str]:
    status = main([*argv, "--mapped-file-size", str(FILE)])
    out, err = capsys.readouterr()
    return status, out, err


BORN_HOST = 50  # a byte of the born host: only the whole-record CRC covers it
PHYSICAL_OFFSET = 35  # a byte of PHYSICALOFFSET: checked against the record's place


def flip_two(root: Path, position: int) -> tuple[list[PutResult], list[int]]:
    """80 records over several files; record 10 (first file) and the second record of the
    second file each with the byte at ``position`` flipped."""
    results = make_store(root)
    second = next(i for i, r in enumerate(results) if r.wrote_offset >= FILE)
    bad = [10, second + 1]
    for i in bad:
        flip_store_byte(root, results[i].wrote_offset + position, FILE)
    return results, bad


@pytest.fixture
def two_flips(tmp_path: Path) -> tuple[Path, list[PutResult], list[int]]:
    return (tmp_path, *flip_two(tmp_path, BORN_HOST))


def test_verify_names_every_damaged_range_and_what_follows(
    two_flips: tuple[Path, list[PutResult], list[int]], capsys: Capture
) -> None:
    root, results, bad = two_flips
    later = results[-3]  # a consume queue entry after both damaged ranges, changed
    queue_id = (len(results) - 3) % 2
    cq = root / "consumequeue" / "T" / str(queue_id) / file_name(0)
    data = bytearray(cq.read_bytes())
    data[20 * later.queue_offset + 19] ^= 1  # its tags hash
    cq.write_bytes(bytes(data))
    status, out, err = run(capsys, "verify", str(root))
    assert (status, out) == (1, "")
    for i in bad:
        start, end = results[i].wrote_offset, results[i + 1].wrote_offset
        assert f"bad record at offset {start}: " in err
        assert f"; damaged commit log range [{start}, {end}) (" in err
        assert f"; valid records resume at {end}\n" in err
        assert f"1 consume queue entry points into the damaged range [{start}, {end})" in err
    assert f"consume queue T/{queue_id} entry {later.queue_offset} is " in err
    assert "does not follow" not in err  # a gap of queue offsets across damage is the damage
    assert "not checked" not in err
    assert "5 problem(s) found" in err


def test_verify_names_a_range_the_store_marked_once(tmp_path: Path, capsys: Capture) -> None:
    results = make_store(tmp_path)
    flip_store_byte(tmp_path, results[20].wrote_offset + 50, FILE)
    with CommitLogStore.open(tmp_path, CONFIG) as store:  # recovery marks it, keeps the rest
        (marked,) = store.damage.ranges
        assert store.max_offset == results[-1].wrote_offset + results[-1].wrote_size
    status, _, err = run(capsys, "verify", str(tmp_path))
    assert status == 1
    assert err.count(f"[{marked.start}, {marked.end})") == 2  # the range, its queue entry
    assert f"damaged commit log range {marked}, marked by the store: not repaired yet" in err


def test_damage_at_the_data_end_is_reported_as_before(tmp_path: Path, capsys: Capture) -> None:
    """Nothing valid after the bad record (a torn last write): named where it starts."""
    results = make_store(tmp_path, 30)
    flip_store_byte(tmp_path, results[-1].wrote_offset + 50, FILE)
    status, _, err = run(capsys, "verify", str(tmp_path))
    assert status == 1
    assert f"bad record at offset {results[-1].wrote_offset}: " in err
    assert "valid records resume" not in err


def test_dump_names_the_damaged_ranges_and_goes_on(tmp_path: Path, capsys: Capture) -> None:
    root = tmp_path
    results, bad = flip_two(root, PHYSICAL_OFFSET)
    status, out, err = run(capsys, "dump", str(root), "--json")
    assert status == 1
    offsets = [json.loads(line)["physical_offset"] for line in out.splitlines()]
    assert offsets == [r.wrote_offset for i, r in enumerate(results) if i not in bad]
    for i in bad:
        start, end = results[i].wrote_offset, results[i + 1].wrote_offset
        assert f"hanet: damaged commit log range [{start}, {end}) (" in err
    assert err.endswith("hanet: 2 damaged range(s) skipped\n")
    status, out, err = run(capsys, "dump", str(root), "--from", str(results[bad[0]].wrote_offset))
    assert (status, out) == (1, "")  # a bad record asked for by --from: named, not skipped
    assert f"stopped at offset {results[bad[0]].wrote_offset}" in err


def test_dump_shows_a_whole_record_crc_mismatch(
    two_flips: tuple[Path, list[PutResult], list[int]], capsys: Capture
) -> None:
    """A byte only the whole-record CRC covers: the record is shown, marked as failing."""
    root, results, bad = two_flips
    status, out, _ = run(capsys, "dump", str(root), "--json")
    assert status == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["physical_offset"] for r in rows] == [r.wrote_offset for r in results]
    assert [i for i, row in enumerate(rows) if not row["crc_ok"]] == bad
    _, out, _ = run(capsys, "dump", str(root))
    assert [i for i, line in enumerate(out.splitlines()) if "crc=BAD" in line] == bad


# -- the epoch file --------------------------------------------------------------------------


def write_epochs(root: Path, *entries: tuple[int, int]) -> None:
    (root / EPOCH_FILE).write_bytes(format_epoch_file([EpochEntry(*e) for e in entries]))


def test_verify_checks_a_fitting_epoch_file_quietly(tmp_path: Path, capsys: Capture) -> None:
    results = make_store(tmp_path, 30)
    end = results[-1].wrote_offset + results[-1].wrote_size
    status, clean, _ = run(capsys, "verify", str(tmp_path))
    write_epochs(tmp_path, (1, 0), (2, results[12].wrote_offset), (3, end))
    assert run(capsys, "verify", str(tmp_path)) == (status, clean, "") == (0, clean, "")


@pytest.mark.parametrize(
    ("kind", "named"),
    [
        ("past the end", "past the commit log's end"),
        ("not a record start", "which is not a record's start"),
        ("not ascending", "does not follow epoch 2 at"),
        ("flipped digit", "CRC mismatch"),
        ("cut short", "the last line is cut short"),
    ],
)
def test_verify_names_an_epoch_file_that_is_damaged_or_does_not_fit(
    tmp_path: Path, capsys: Capture, kind: str, named: str
) -> None:
    results = make_store(tmp_path, 30)
    end = results[-1].wrote_offset + results[-1].wrote_size
    middle = results[12].wrote_offset
    if kind == "past the end":
        write_epochs(tmp_path, (1, 0), (2, middle), (3, end + 500))
    elif kind == "not a record start":
        write_epochs(tmp_path, (1, 0), (2, middle + 3))
    elif kind == "not ascending":
        write_epochs(tmp_path, (1, 0), (2, middle), (3, middle - 40))
    else:
        write_epochs(tmp_path, (1, 0), (2, middle))
        data = bytearray((tmp_path / EPOCH_FILE).read_bytes())
        if kind == "flipped digit":
            data[data.index(b"\n2 ") + 3] ^= 0x01
        else:
            del data[-3:]
        (tmp_path / EPOCH_FILE).write_bytes(bytes(data))
    status, out, err = run(capsys, "verify", str(tmp_path))
    assert (status, out) == (1, "")
    assert f"hanet: epoch file {tmp_path / EPOCH_FILE}" in err and named in err
