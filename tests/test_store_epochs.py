"""The epoch file (``<store>/epoch``) and the consistent point between two epoch histories."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import hanet.store.lowlevel
from hanet.store import EPOCH_FILE, EpochEntry, EpochFile, EpochFileError, EpochHistory
from hanet.store.lowlevel import format_epoch_file as format_file
from hanet.store.lowlevel import parse_epoch_file as parse_file

find_consistent_point = hanet.store.lowlevel.find_consistent_point

E = EpochEntry


# -- the file ---------------------------------------------------------------------------------


def test_absent_file_is_an_empty_history(tmp_path: Path) -> None:
    epochs = EpochFile.load(tmp_path)
    assert epochs.entries == () and epochs.last is None
    assert not (tmp_path / EPOCH_FILE).exists()


def test_terms_are_written_durably_and_read_back(tmp_path: Path) -> None:
    epochs = EpochFile.load(tmp_path)
    assert epochs.begin_term(0) == E(1, 0)
    assert epochs.begin_term(4096) == E(2, 4096)
    again = EpochFile.load(tmp_path)
    assert again.entries == (E(1, 0), E(2, 4096))
    assert not (tmp_path / (EPOCH_FILE + ".tmp")).exists()
    assert (tmp_path / EPOCH_FILE).read_text().startswith("hanet-epochs 1\n1 0\n2 4096\ncrc32 ")


def test_a_term_that_wrote_nothing_is_replaced_by_the_next(tmp_path: Path) -> None:
    epochs = EpochFile(tmp_path / EPOCH_FILE, (E(1, 0), E(2, 100)))
    assert epochs.begin_term(100) == E(3, 100)  # epoch 2 wrote nothing: dropped
    assert epochs.entries == (E(1, 0), E(3, 100))


def test_a_term_after_a_lost_tail_drops_the_epochs_past_the_log(tmp_path: Path) -> None:
    epochs = EpochFile(tmp_path / EPOCH_FILE, (E(1, 0), E(2, 100), E(3, 500)))
    # the log now ends at 300: epoch 3 started past it, epoch 2 lost its tail
    assert epochs.begin_term(300) == E(4, 300)
    assert epochs.entries == (E(1, 0), E(2, 100), E(4, 300))


def test_truncate_from_drops_entries_starting_there(tmp_path: Path) -> None:
    epochs = EpochFile(tmp_path / EPOCH_FILE, (E(1, 0), E(2, 100), E(3, 500)))
    assert epochs.truncate_from(500)
    assert epochs.entries == (E(1, 0), E(2, 100))
    assert not epochs.truncate_from(900)  # nothing to drop: nothing written
    assert EpochFile.load(tmp_path).entries == (E(1, 0), E(2, 100))


def test_out_of_order_entries_are_refused_and_nothing_written(tmp_path: Path) -> None:
    epochs = EpochFile(tmp_path / EPOCH_FILE, (E(1, 0), E(2, 100)))
    for bad in (E(2, 200), E(3, 100), E(1, 300)):
        with pytest.raises(EpochFileError, match="must increase"):
            epochs.append(bad)
    assert not (tmp_path / EPOCH_FILE).exists()


def _damaged(tmp_path: Path, data: bytes) -> EpochFileError:
    (tmp_path / EPOCH_FILE).write_bytes(data)
    with pytest.raises(EpochFileError) as info:
        EpochFile.load(tmp_path)
    assert str(tmp_path / EPOCH_FILE) in str(info.value)
    return info.value


def test_damaged_files_name_the_file_and_offset(tmp_path: Path) -> None:
    EpochFile(tmp_path / EPOCH_FILE).replace((E(1, 0), E(2, 4096)))
    good = (tmp_path / EPOCH_FILE).read_bytes()
    # a flipped digit: the CRC line (offset of that line) says so
    flipped = good.replace(b"2 4096", b"2 4097")
    error = _damaged(tmp_path, flipped)
    assert error.offset == good.index(b"crc32") and "CRC mismatch" in error.reason
    # a line that is not two numbers
    error = _damaged(tmp_path, good.replace(b"2 4096", b"2 40x6"))
    assert error.offset == good.index(b"2 4096") and "EPOCH START_OFFSET" in error.reason
    # cut short: no final newline, then no crc line at all
    error = _damaged(tmp_path, good[:-3])
    assert "cut short" in error.reason
    error = _damaged(tmp_path, good[: good.index(b"crc32")])
    assert error.offset == good.index(b"2 4096") and "crc32" in error.reason
    # another header; out-of-order lines
    assert _damaged(tmp_path, b"junk\n").offset == 0
    error = _damaged(tmp_path, b"hanet-epochs 1\n2 0\n1 5\ncrc32 00000000\n")
    assert error.offset == len(b"hanet-epochs 1\n2 0\n") and "must increase" in error.reason
    assert "at byte" in str(error)


def test_history_json_round_trip_and_validation() -> None:
    history = EpochHistory((E(1, 0), E(3, 700)), 900)
    assert EpochHistory.from_json(history.to_json()) == history
    bad: object
    for bad in (
        [],
        {"entries": [], "maxOffset": -1},
        {"entries": [{"epoch": 1}], "maxOffset": 0},
        {
            "entries": [{"epoch": 2, "startOffset": 0}, {"epoch": 1, "startOffset": 5}],
            "maxOffset": 9,
        },
        {"entries": [{"epoch": True, "startOffset": 0}], "maxOffset": 9},
    ):
        with pytest.raises(ValueError):
            EpochHistory.from_json(bad)


# -- the consistent point ---------------------------------------------------------------------


def test_same_history_agrees_up_to_the_shorter_log() -> None:
    history = [E(1, 0), E(2, 100)]
    assert find_consistent_point(history, 250, history, 300) == 250  # a slave behind
    assert find_consistent_point(history, 300, history, 250) == 250


def test_master_lost_its_tail_and_took_new_puts() -> None:
    # the slave copied epoch 1 up to 5000; the master lost 3000..5000, restarted (epoch 2 at
    # 3000) and wrote up to 5000 again: the logs agree only up to 3000
    slave, master = [E(1, 0)], [E(1, 0), E(2, 3000)]
    assert find_consistent_point(slave, 5000, master, 5000) == 3000


def test_failover_to_a_slave_that_wrote_on_its_own() -> None:
    # A was master through epochs 1..3 and wrote to 900; B had 1..3 up to 600 and became
    # master (epoch 4 at 600); A rejoins: the logs agree up to 600
    a = [E(1, 0), E(2, 200), E(3, 400)]
    b = [E(1, 0), E(2, 200), E(3, 400), E(4, 600)]
    assert find_consistent_point(a, 900, b, 1200) == 600
    assert find_consistent_point(b, 1200, a, 900) == 600


def test_the_same_epoch_number_at_another_start_is_not_shared() -> None:
    a = [E(1, 0), E(2, 300)]
    b = [E(1, 0), E(2, 250)]  # two masters picked epoch 2 at different offsets
    assert find_consistent_point(a, 500, b, 500) == 250


def test_no_common_epoch_is_minus_one() -> None:
    assert find_consistent_point([E(1, 0)], 10, [E(2, 0)], 10) == -1
    assert find_consistent_point([], 10, [E(1, 0)], 10) == -1


# Random histories: a common prefix of terms, then each side's own terms.
@st.composite
def _forked(draw: st.DrawFn) -> tuple[list[EpochEntry], int, list[EpochEntry], int, int]:
    starts = sorted(draw(st.sets(st.integers(0, 10_000), min_size=1, max_size=6)))
    shared = [E(i + 1, s) for i, s in enumerate(starts)]
    fork = draw(st.integers(starts[-1], starts[-1] + 5_000))  # where the two logs part

    def own(first_epoch: int) -> tuple[list[EpochEntry], int]:
        extra = sorted(draw(st.sets(st.integers(fork + 1, fork + 5_000), max_size=3)))
        epochs = draw(st.lists(st.integers(1, 3), min_size=len(extra), max_size=len(extra)))
        entries, epoch = [], first_epoch
        for start, step in zip(extra, epochs, strict=True):
            epoch += step
            entries.append(E(epoch, start))
        end = draw(st.integers(entries[-1].start_offset if entries else fork, 20_000))
        return entries, end

    local, local_end = own(len(shared))
    remote, remote_end = own(len(shared) + 10)  # never the local's epoch numbers
    return shared + local, local_end, shared + remote, remote_end, fork


@given(_forked())
def test_point_is_where_the_histories_fork(
    case: tuple[list[EpochEntry], int, list[EpochEntry], int, int],
) -> None:
    local, local_end, remote, remote_end, _fork = case
    point = find_consistent_point(local, local_end, remote, remote_end)
    # both sides compute the same point, never past either log's end
    assert point == find_consistent_point(remote, remote_end, local, local_end)
    assert 0 <= point <= min(local_end, remote_end)
    # the last shared epoch ends where either side's own terms begin (or its log ends)
    shared_last = max(e.start_offset for e in local if e in remote)
    local_next = [e.start_offset for e in local if e.start_offset > shared_last]
    remote_next = [e.start_offset for e in remote if e.start_offset > shared_last]
    expected = min(
        local_next[0] if local_next else local_end, remote_next[0] if remote_next else remote_end
    )
    assert point == expected


_HISTORIES = st.lists(st.tuples(st.integers(1, 50), st.integers(1, 10**12)), max_size=8).map(
    lambda steps: [
        E(sum(s[0] for s in steps[: i + 1]), sum(s[1] for s in steps[:i]))
        for i in range(len(steps))
    ]
)


@given(_HISTORIES, st.data())
def test_any_one_byte_changed_is_named_never_misread(
    entries: list[EpochEntry], data: st.DataObject
) -> None:
    raw = format_file(entries)
    path = Path("store") / EPOCH_FILE
    assert parse_file(path, raw) == tuple(entries)
    position = data.draw(st.integers(0, len(raw) - 1))
    value = data.draw(st.integers(0, 255).filter(lambda b: b != raw[position]))
    damaged = raw[:position] + bytes([value]) + raw[position + 1 :]
    with pytest.raises(EpochFileError) as info:
        parse_file(path, damaged)
    assert info.value.offset is not None and 0 <= info.value.offset <= len(damaged)
    with pytest.raises(EpochFileError):
        parse_file(path, raw[: data.draw(st.integers(0, len(raw) - 1))])  # cut short
