"""The file-backed Raft log in DLedger's data and index files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hanet.dledger import (
    ENTRY_HEADER_SIZE,
    INDEX_ENTRY_SIZE,
    DLedgerError,
    FileLog,
    HardState,
    LogEntry,
    decode_entry,
    decode_index_entry,
    entry_body_crc,
)
from hanet.store import FlushDiskType, MessageRecord, encode_record, lowlevel

DATA = 4096
INDEX = 32 * 16


def record(n: int, size: int = 20) -> bytes:
    body = f"message-{n:06d}".encode().ljust(size, b".")
    return encode_record(MessageRecord.create(topic="T", body=body, queue_offset=n))


def entries(first: int, count: int, term: int = 1) -> list[LogEntry]:
    return [LogEntry(i, term, record(i)) for i in range(first, first + count)]


def open_log(path: Path, **kwargs: object) -> FileLog:
    return FileLog.open(path, data_file_size=DATA, index_file_size=INDEX, **kwargs)  # type: ignore[arg-type]


def test_round_trip_and_layout(tmp_path: Path) -> None:
    with open_log(tmp_path, flush=FlushDiskType.SYNC_FLUSH) as log:
        log.append([LogEntry(1, 1, b"", noop=True), *entries(2, 3)])
        assert (log.last_index, log.last_term) == (4, 1)
        assert log.term_at(0) == 0 and log.term_at(4) == 1 and log.term_at(5) is None
        got = log.entries_from(1, 10)
        assert got[0] == LogEntry(1, 1, b"", noop=True)
        assert got[1:] == entries(2, 3)
        assert log.entries_from(3, 1) == entries(3, 1)
    data = (tmp_path / "data" / "00000000000000000000").read_bytes()
    assert len(data) == DATA
    first = decode_entry(data)
    assert (first.index, first.term, first.pos, first.body) == (0, 1, 0, b"")
    second = decode_entry(data, ENTRY_HEADER_SIZE)
    assert (second.index, second.pos, second.body) == (1, ENTRY_HEADER_SIZE, record(2))
    index = (tmp_path / "index" / "00000000000000000000").read_bytes()
    ie = decode_index_entry(index, 2 * INDEX_ENTRY_SIZE)
    assert (ie.index, ie.term, ie.pos) == (2, 1, second.pos + second.size)


def test_reopen_keeps_everything(tmp_path: Path) -> None:
    with open_log(tmp_path) as log:
        log.append(entries(1, 5, term=1) + entries(6, 5, term=3))
        log.save_hard_state(HardState(3, "n1"))
    with open_log(tmp_path) as log:
        assert log.recovery.truncated_at is None
        assert (log.last_index, log.last_term) == (10, 3)
        assert log.entries_from(1, 20) == entries(1, 5, term=1) + entries(6, 5, term=3)
        assert log.load_hard_state() == HardState(3, "n1")
        log.append(entries(11, 1, term=3))
        assert log.last_index == 11


def test_hard_state_is_replaced_atomically(tmp_path: Path) -> None:
    with open_log(tmp_path) as log:
        assert log.load_hard_state() == HardState()
        log.save_hard_state(HardState(1, None))
        log.save_hard_state(HardState(2, "n0"))
        # the next save's temporary file is made ahead (empty), so it needs no new descriptor
        assert (tmp_path / "hardstate.tmp").stat().st_size == 0
        assert json.loads((tmp_path / "hardstate").read_text()) == {"term": 2, "voted_for": "n0"}
    assert not (tmp_path / "hardstate.tmp").exists()


def test_blank_fill_and_many_files(tmp_path: Path) -> None:
    with open_log(tmp_path) as log:
        log.append(entries(1, 60))
        files = sorted(p.name for p in (tmp_path / "data").iterdir())
        assert len(files) > 1 and all(len(name) == 20 for name in files)
        assert files[1] == f"{DATA:020d}"
        # the entry that did not fit starts the next file; a blank fills the rest
        per_file = DATA // (ENTRY_HEADER_SIZE + len(record(1)))
        assert log.position(per_file + 1) == DATA
        raw = (tmp_path / "data" / files[0]).read_bytes()
        tail = per_file * (ENTRY_HEADER_SIZE + len(record(1)))
        assert int.from_bytes(raw[tail : tail + 4], "big", signed=True) == -1
        assert int.from_bytes(raw[tail + 4 : tail + 8], "big") == DATA - tail
    with open_log(tmp_path) as log:
        assert log.last_index == 60 and log.entries_from(1, 100) == entries(1, 60)
        # index files roll too: 16 entries per index file here
        assert len(list((tmp_path / "index").iterdir())) == 4


def test_torn_tail_is_dropped(tmp_path: Path) -> None:
    with open_log(tmp_path) as log:
        log.append(entries(1, 5))
        end = log.end_pos
    path = tmp_path / "data" / "00000000000000000000"
    with path.open("r+b") as f:  # a torn entry: header and half of its body
        f.seek(end)
        f.write(
            (1).to_bytes(4, "big") + (200).to_bytes(4, "big") + (5).to_bytes(8, "big") + b"\x01"
        )
    with open_log(tmp_path) as log:
        assert log.recovery.truncated_at == end
        assert log.last_index == 5 and log.end_pos == end
        log.append(entries(6, 1))
    with open_log(tmp_path) as log:
        assert log.recovery.truncated_at is None and log.entries_from(1, 9) == entries(1, 6)


@pytest.mark.parametrize("where", ["entry body", "message body"])
def test_crc_failure_truncates(tmp_path: Path, where: str) -> None:
    with open_log(tmp_path) as log:
        log.append(entries(1, 6))
        third = log.position(3)
    path = tmp_path / "data" / "00000000000000000000"
    raw = bytearray(path.read_bytes())
    if where == "entry body":
        raw[third + ENTRY_HEADER_SIZE + 30] ^= 0xFF  # the message CRC would fail too
    else:
        # a valid entry CRC over a message whose own body CRC is wrong
        bad = bytearray(record(3))
        bad[-10] ^= 0xFF  # inside the message body
        entry_crc = entry_body_crc(bytes(bad))
        raw[third + ENTRY_HEADER_SIZE : third + ENTRY_HEADER_SIZE + len(bad)] = bad
        raw[third + 40 : third + 44] = entry_crc.to_bytes(4, "big")
    path.write_bytes(bytes(raw))
    with open_log(tmp_path) as log:
        assert log.recovery.truncated_at == third
        assert log.last_index == 2
        assert log.entries_from(1, 9) == entries(1, 2)
        index = (tmp_path / "index" / "00000000000000000000").read_bytes()
        assert index[2 * INDEX_ENTRY_SIZE :] == bytes(len(index) - 2 * INDEX_ENTRY_SIZE)


def test_truncate_from_across_files(tmp_path: Path) -> None:
    with open_log(tmp_path) as log:
        log.append(entries(1, 60, term=1))
        log.truncate_from(10)
        assert log.last_index == 9 and log.term_at(10) is None
        assert len(list((tmp_path / "data").iterdir())) == 1
        assert len(list((tmp_path / "index").iterdir())) == 1
        log.append(entries(10, 30, term=2))
    with open_log(tmp_path) as log:
        assert log.recovery.truncated_at is None
        assert log.entries_from(1, 100) == entries(1, 9, term=1) + entries(10, 30, term=2)
        log.truncate_from(1)
        assert log.last_index == 0 and log.last_term == 0
    with open_log(tmp_path) as log:
        assert log.last_index == 0 and log.end_pos == 0


def test_append_checks(tmp_path: Path) -> None:
    with open_log(tmp_path) as log:
        log.append(entries(1, 1, term=2))
        with pytest.raises(ValueError, match="index"):
            log.append(entries(3, 1, term=2))
        with pytest.raises(ValueError, match="term"):
            log.append(entries(2, 1, term=1))
        with pytest.raises(ValueError, match="no-op"):
            log.append([LogEntry(2, 2, b"")])
        assert log.next_entry_pos(10) == log.end_pos


def test_a_batch_is_written_as_entry_by_entry_and_a_bad_one_writes_nothing(
    tmp_path: Path,
) -> None:
    """An append writes a batch in a few large writes: the files are byte for byte those of
    one append per entry; an entry refused anywhere in a batch leaves the log untouched."""
    with open_log(tmp_path / "batch") as log:
        log.append(entries(1, 50))
        with pytest.raises(ValueError, match="term"):
            log.append([*entries(51, 5, term=2), *entries(56, 1, term=1)])
        assert log.last_index == 50
        end = log.end_pos
        log.append(entries(51, 5, term=2))
    with open_log(tmp_path / "single") as log:
        for entry in [*entries(1, 50), *entries(51, 5, term=2)]:
            log.append([entry])
    for kind in ("data", "index"):
        batch = sorted((tmp_path / "batch" / kind).iterdir())
        single = sorted((tmp_path / "single" / kind).iterdir())
        assert [p.name for p in batch] == [p.name for p in single]
        assert [p.read_bytes() for p in batch] == [p.read_bytes() for p in single]
    with open_log(tmp_path / "batch") as log:
        assert log.last_index == 55
        assert log.position(51) == log.next_entry_pos(len(record(51)), end)


def test_a_file_of_another_size_is_refused(tmp_path: Path) -> None:
    with open_log(tmp_path) as log:
        log.append(entries(1, 1))
    with pytest.raises(Exception, match="expected 8192"):
        FileLog.open(tmp_path, data_file_size=2 * DATA, index_file_size=INDEX)
    assert os.path.exists(tmp_path / "data" / "00000000000000000000")


@pytest.mark.parametrize("text", ["[1, 2]", "3", '"term"', "null"])
def test_a_hard_state_that_is_not_an_object_is_a_dledger_error(tmp_path: Path, text: str) -> None:
    with open_log(tmp_path) as log:
        (tmp_path / "hardstate").write_text(text)
        with pytest.raises(DLedgerError, match="not a hard state document"):
            log.load_hard_state()


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_a_refused_open_closes_the_files_it_opened(tmp_path: Path) -> None:
    with open_log(tmp_path) as log:
        log.append(entries(1, 80))  # several data files
    data = sorted((tmp_path / "data").iterdir())
    assert len(data) > 2
    before = _open_fds()
    # a later data file of the wrong size: the earlier ones were open
    with data[-1].open("ab") as f:
        f.write(b"x")
    with pytest.raises(DLedgerError, match="expected 4096"):
        FileLog.open(tmp_path, data_file_size=DATA, index_file_size=INDEX)
    assert _open_fds() == before
    os.truncate(data[-1], DATA)
    # the data files fit, the index files do not
    with pytest.raises(DLedgerError, match=f"expected {2 * INDEX}"):
        FileLog.open(tmp_path, data_file_size=DATA, index_file_size=2 * INDEX)
    assert _open_fds() == before


def test_entries_read_back_in_runs_are_the_entries_one_by_one(tmp_path: Path) -> None:
    with open_log(tmp_path) as log:
        log.append(entries(1, 60))
        one_by_one = [log.read_entry(i) for i in range(1, 61)]
        for first, count in [(1, 60), (5, 1), (20, 30), (59, 10)]:
            got = log.entries_from(first, count)
            expected = one_by_one[first - 1 : first - 1 + count]
            assert [(e.index, e.term, e.body) for e in got] == [
                (e.index + 1, e.term, e.body) for e in expected
            ]


def test_a_body_damaged_on_disk_fails_a_read_in_a_run_as_one_by_one(tmp_path: Path) -> None:
    with open_log(tmp_path) as log:
        log.append(entries(1, 10))
        at = log.position(5) + ENTRY_HEADER_SIZE + 3
        with (tmp_path / "data" / f"{0:020d}").open("r+b") as f:
            f.seek(at)
            byte = f.read(1)
            f.seek(at)
            f.write(bytes([byte[0] ^ 0xFF]))
        with pytest.raises(DLedgerError) as one:
            log.read_entry(5)
        with pytest.raises(DLedgerError) as run:
            log.entries_from(1, 10)
        assert type(run.value) is type(one.value)
        assert log.entries_from(1, 4) == entries(1, 4)


needs_native_pack = pytest.mark.skipif(
    lowlevel.native_pack_entries is None, reason="hanet.store._speedups is not built"
)


def _files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def _append_outcome(log: FileLog, batch: list[LogEntry]) -> str:
    try:
        log.append(batch)
    except (ValueError, DLedgerError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return "appended"


@needs_native_pack
@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.lists(
            st.tuples(st.integers(0, 3), st.integers(0, 1500), st.integers(-1, 1)),
            min_size=1,
            max_size=6,
        ),
        min_size=1,
        max_size=8,
    )
)
def test_batches_are_packed_the_same_natively_and_in_python(
    tmp_path_factory: pytest.TempPathFactory, batches: list[list[tuple[int, int, int]]]
) -> None:
    """The store extension's pack_entries writes the same data and index files and keeps the
    same terms and positions as FileLog.append's loops (the reference), batch after batch,
    across file ends; a batch the reference refuses (an index or term out of order, a no-op
    with a body, a client entry without one) is refused the same and writes nothing."""
    roots = {name: tmp_path_factory.mktemp(name) for name in ("python", "native")}
    outcomes: dict[str, list[str]] = {name: [] for name in roots}
    for name, root in roots.items():
        with pytest.MonkeyPatch.context() as patch:
            chosen = lowlevel.native_pack_entries if name == "native" else None
            patch.setattr("hanet.dledger._filelog._NATIVE_PACK", chosen)
            with open_log(root) as log:
                for batch in batches:
                    index, term = log.last_index + 1, max(log.last_term, 1)
                    made = []
                    for k, (kind, size, skew) in enumerate(batch):
                        noop = kind == 0
                        body = b"" if noop else bytes([k % 251]) * (size + 1)
                        if kind == 3 and skew:  # damaged: out of order, or a body mismatch
                            made.append(LogEntry(index + k + skew, term, body, noop))
                        elif kind == 2 and skew < 0:
                            made.append(LogEntry(index + k, term, body, not noop))
                        else:
                            term += max(skew, 0)
                            made.append(LogEntry(index + k, term, body, noop))
                    outcomes[name].append(_append_outcome(log, made))
                outcomes[name].append(repr(log.entries_from(1, 10_000)))
    assert outcomes["native"] == outcomes["python"]
    assert _files(roots["native"]) == _files(roots["python"])


@needs_native_pack
def test_the_native_packer_leaves_what_it_does_not_take_to_the_python_loop() -> None:
    pack = lowlevel.native_pack_entries
    assert pack is not None
    good = [LogEntry(3, 2, b"", True), LogEntry(4, 2, b"abc")]
    packed = pack(good, 3, 1, 100, DATA)
    assert packed is not None
    data, index, terms, positions, sizes = packed
    assert len(data) == 2 * ENTRY_HEADER_SIZE + 3 and len(index) == 2 * INDEX_ENTRY_SIZE
    assert decode_entry(data, ENTRY_HEADER_SIZE).body == b"abc"
    assert list(memoryview(positions).cast("q")) == [100, 100 + ENTRY_HEADER_SIZE]
    assert list(memoryview(terms).cast("q")) == [2, 2]
    assert list(memoryview(sizes).cast("q")) == [ENTRY_HEADER_SIZE, ENTRY_HEADER_SIZE + 3]
    for batch, expected, last_term, end in (
        ([], 3, 1, 100),  # nothing to pack
        (good, 4, 1, 100),  # index out of sequence
        (good, 3, 3, 100),  # a term below the last
        ([LogEntry(3, 2, b"x", True)], 3, 1, 100),  # a no-op with a body
        ([LogEntry(3, 2, b"")], 3, 1, 100),  # a client entry without one
        (good, 3, 1, DATA - ENTRY_HEADER_SIZE),  # crosses into the next file
        ([LogEntry(3, 2, b"x" * DATA)], 3, 1, 0),  # larger than a file
        ([LogEntry(3, 2, bytearray(b"x"))], 3, 1, 0),  # type: ignore[arg-type]  # not bytes
    ):
        assert pack(batch, expected, last_term, end, DATA) is None
