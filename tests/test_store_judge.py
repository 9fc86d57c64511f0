"""One judgement of a scan stop (``hanet.store.lowlevel.judge_stop``) and the scan's result
type: what a blank record, the end of the bytes, zeros, a partial record or bad data mean for
the commit log file they are in, the same for every reader; the scanner's flags are
keyword-only in both implementations (C and pure Python)."""

from __future__ import annotations

import pytest

from hanet.store import ScanStop, StopReason
from hanet.store.lowlevel import (
    IndexScanResult,
    StopKind,
    encode_blank,
    judge_stop,
    native_scan,
    scan_index_py,
)

FILE_END = 4096


def _stop(reason: StopReason, offset: int = 1000, blank: int = 0) -> ScanStop:
    return ScanStop(offset, reason, "bad" if reason is StopReason.INVALID else "", blank)


def test_a_blank_record_that_ends_its_file_goes_on_in_the_next_file() -> None:
    verdict = judge_stop(_stop(StopReason.BLANK, blank=FILE_END - 1000), FILE_END)
    assert verdict.kind is StopKind.NEXT_FILE and not verdict.damaged


def test_a_blank_record_that_does_not_end_its_file_is_damage() -> None:
    verdict = judge_stop(_stop(StopReason.BLANK, blank=100), FILE_END)
    assert verdict.damaged
    assert verdict.stop.reason is StopReason.INVALID
    assert verdict.stop.detail == "blank record of 100 bytes does not end the file"


def test_the_end_of_the_bytes_is_the_next_file_only_at_the_file_end() -> None:
    assert judge_stop(_stop(StopReason.END, FILE_END), FILE_END).kind is StopKind.NEXT_FILE
    assert judge_stop(_stop(StopReason.END), FILE_END).kind is StopKind.DATA_END


@pytest.mark.parametrize("reason", [StopReason.UNWRITTEN, StopReason.INCOMPLETE])
def test_unwritten_or_partial_data_ends_the_last_file_only(reason: StopReason) -> None:
    assert judge_stop(_stop(reason), FILE_END).kind is StopKind.DATA_END
    verdict = judge_stop(_stop(reason), FILE_END, last_file=False)
    assert verdict.damaged and "more files follow" in verdict.stop.detail


def test_zeros_inside_written_data_are_damage_a_partial_record_waits() -> None:
    verdict = judge_stop(_stop(StopReason.UNWRITTEN), FILE_END, written=True)
    assert verdict.damaged and "zeros where a record should start" in verdict.stop.detail
    partial = judge_stop(_stop(StopReason.INCOMPLETE), FILE_END, written=True, last_file=False)
    assert partial.kind is StopKind.DATA_END


def test_a_zeroed_hole_with_data_after_it_is_damage_naming_the_data() -> None:
    asked: list[int] = []

    def data_after(offset: int) -> int | None:
        asked.append(offset)
        return 3000

    verdict = judge_stop(_stop(StopReason.UNWRITTEN), FILE_END, data_after=data_after)
    assert asked == [1000]
    assert verdict.damaged and verdict.data_after == 3000
    assert verdict.stop.detail == "a zeroed hole at offset 1000: non-zero data follows at 3000"
    assert judge_stop(_stop(StopReason.UNWRITTEN), FILE_END, data_after=lambda _: None).kind is (
        StopKind.DATA_END
    )


def test_invalid_is_damage_as_it_is() -> None:
    stop = _stop(StopReason.INVALID)
    verdict = judge_stop(stop, FILE_END)
    assert verdict.damaged and verdict.stop == stop


SCANS = [pytest.param(scan_index_py, id="python")]
if native_scan is not None:  # pragma: no branch
    SCANS.append(pytest.param(native_scan, id="native"))


@pytest.mark.parametrize("scan", SCANS)
def test_a_scan_result_is_a_named_tuple_with_its_stop(scan: object) -> None:
    data = encode_blank(64)
    result = scan(data, 0, None, 8192, 64)  # type: ignore[operator]
    assert isinstance(result, IndexScanResult)
    assert (result.position, result.reason, result.blank_size, result.records) == (
        0,
        StopReason.BLANK,
        64,
        0,
    )
    assert result.stop(8192) == ScanStop(8192, StopReason.BLANK, "", 64)
    assert judge_stop(result.stop(8192), 8192 + 64).kind is StopKind.NEXT_FILE


@pytest.mark.parametrize("scan", SCANS)
def test_the_scan_flags_are_keyword_only(scan: object) -> None:
    with pytest.raises(TypeError):
        scan(b"", 0, None, 0, None, True, True)  # type: ignore[operator]
    assert scan(b"", 0, None, 0, None, check_crc=False, check_physical_offset=True)[:2] == (0, 0)  # type: ignore[operator]
