"""The record index (``hanet.store._index``): the native scanner (``_speedups.c``) and the
pure-Python reference (``scan_index_py`` on ``RecordScanner``) give the same rows, stop
reason, stop offset and detail, on the scanner's own vectors and on generated and mutated
regions (hypothesis); the native one survives random bytes under ``python -X dev``; and the
store tests pass with ``HANET_NO_EXTENSIONS=1`` too."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hanet.store import MessageRecord, StopReason, encode_record, offset_msg_id
from hanet.store.lowlevel import (
    BLANK_MAGIC,
    INDEX_FIXED_COLUMNS,
    INDEX_ROW,
    INDEX_STOP_REASONS,
    INDEX_VAR_COLUMNS,
    NATIVE_SCANNER,
    IndexScanFunction,
    IndexScanResult,
    RecordScanner,
    decode_properties,
    encode_blank,
    index_scan_column_windows,
    index_scan_columns_py,
    index_topic_names,
    java_string_hash,
    native_columns,
    native_index_scan_columns,
    native_scan,
    parse_host,
    record_columns_py,
    scan_index_py,
    scan_index_windows,
)

ROW = INDEX_ROW
STOP_REASONS = INDEX_STOP_REASONS
ScanFunction = IndexScanFunction
ScanResult = IndexScanResult
scan_windows = scan_index_windows
topic_names = index_topic_names

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "rocketmq-store-8k" / "commitlog" / ("0" * 20)
VECTOR_A = encode_record(  # docs/protocol.md §2.6
    MessageRecord.create(
        topic="TopicTest",
        body=b"Hello RocketMQ",
        queue_id=3,
        queue_offset=7,
        physical_offset=0x40001000,
        born_timestamp=1700000000000,
        born_host=parse_host("192.168.1.10:53211")[0],
        born_port=53211,
        store_timestamp=1700000000123,
        store_host=parse_host("192.168.1.20:10911")[0],
        store_port=10911,
        properties={"TAGS": "TagA", "KEYS": "order-42", "WAIT": "true"},
    )
)

IMPLEMENTATIONS = ["python", "native"]


@pytest.fixture(params=IMPLEMENTATIONS)
def scan(request: pytest.FixtureRequest) -> ScanFunction:
    """Each implementation in turn (native skipped when the extension is not built)."""
    if request.param == "python":
        return scan_index_py
    if native_scan is None:  # pragma: no cover
        pytest.skip("hanet.store._speedups is not built")
    return native_scan


def rows(result: ScanResult) -> list[tuple[int, ...]]:
    return list(ROW.iter_unpack(result[5]))


def reason(result: ScanResult) -> StopReason:
    return STOP_REASONS[result[1]]


# -- the scanner's vectors, for both implementations -----------------------------------------


def test_the_native_scanner_is_selected_when_built() -> None:
    wanted = native_scan is not None and not os.environ.get("HANET_NO_EXTENSIONS")
    assert wanted == NATIVE_SCANNER


def test_vector_a(scan: ScanFunction) -> None:
    result = scan(VECTOR_A, 0, None, 0x40001000, None, check_crc=True, check_physical_offset=True)
    assert result[:5] == (148, 0, "", 0, 1)
    assert rows(result) == [(0x40001000, 148, 3, 7, 2598919, 1700000000123, 0x67, 9, 0)]
    assert list(topic_names(VECTOR_A, result[5])) == ["TopicTest"]


def test_fixture_has_47_messages_then_a_blank_record(scan: ScanFunction) -> None:
    data = FIXTURE.read_bytes()
    result = scan(data)
    assert result[:5] == (8084, 1, "", 108, 47)
    table = rows(result)
    assert [row[0] for row in table] == [172 * i for i in range(47)]
    assert {row[1] for row in table} == {172}
    assert [row[3] for row in table] == list(range(47))
    assert {row[8] for row in table} == {0}
    assert list(topic_names(data, result[5])) == ["abc"]
    expected = [(172 * i, r) for i, r in enumerate(RecordScanner(data))]
    assert [row[4] for row in table] == [r.tags_hash for _, r in expected]
    assert [row[5] for row in table] == [r.store_timestamp for _, r in expected]


def test_base_offset_and_start(scan: ScanFunction) -> None:
    data = FIXTURE.read_bytes()
    result = scan(memoryview(data), 172 * 3, None, 8192 * 5)
    assert rows(result)[0][0] == 8192 * 5 + 516
    assert result.stop(8192 * 5).offset == 8192 * 5 + 8084


@pytest.mark.parametrize("cut", [1, 7, 8, 50, 88, 171])
def test_incomplete_tail(scan: ScanFunction, cut: int) -> None:
    result = scan(FIXTURE.read_bytes(), 0, 172 + cut)
    assert result[0] == 172
    assert reason(result) is StopReason.INCOMPLETE
    assert result[4] == 1
    assert result[2] == (
        "a partial record header" if cut < 8 else "a record of 172 bytes is partial"
    )


def test_end_on_a_boundary_and_past_it(scan: ScanFunction) -> None:
    data = FIXTURE.read_bytes()
    assert scan(data, 0, 344)[:5] == (344, 0, "", 0, 2)
    assert scan(data, 9000)[:5] == (9000, 0, "", 0, 0)  # start past the buffer
    assert scan(data, 10, 5)[:5] == (10, 0, "", 0, 0)  # start past end


def test_unwritten_zeros(scan: ScanFunction) -> None:
    assert scan(VECTOR_A + bytes(100))[:5] == (148, 2, "", 0, 1)


@pytest.mark.parametrize(
    ("position", "detail"),
    [
        (4, "unknown magic code 0x9AA320A7"),
        (0, "total size 1073741972 goes beyond the end of the file"),
        (100, "body CRC mismatch"),
        (0x57, "body length 78 does not fit"),
        (0x66, "topic length 73 does not fit"),
        (0x71, "total size 148 does not match its fields (properties length 98)"),
    ],
)
def test_flipped_bytes(scan: ScanFunction, position: int, detail: str) -> None:
    buf = bytearray(VECTOR_A * 2)
    buf[148 + position] ^= 0x40
    result = scan(buf, 0, None, 1000)
    assert result[:5] == (148, 4, detail, 0, 1)
    assert result.stop(1000).offset == 1148
    assert result == scan_index_py(buf, 0, None, 1000)


def test_physical_offset_check(scan: ScanFunction) -> None:
    assert (
        scan(VECTOR_A, 0, None, 0x40001000, None, check_crc=True, check_physical_offset=True)[4]
        == 1
    )
    assert scan(VECTOR_A, 0, None, 0, None, check_crc=True, check_physical_offset=True)[:5] == (
        0,
        4,
        "physical offset field 1073745920 does not match the record's offset",
        0,
        0,
    )


def test_crc_check_can_be_skipped(scan: ScanFunction) -> None:
    buf = bytearray(VECTOR_A)
    buf[100] ^= 1
    assert scan(buf, 0, None, 0, None, check_crc=False)[4] == 1
    assert scan(buf)[2] == "body CRC mismatch"


def test_blank_records_and_limit(scan: ScanFunction) -> None:
    assert scan(encode_blank(8))[:5] == (0, 1, "", 8, 0)
    assert scan(encode_blank(9))[:5] == (0, 4, "blank record of bad size 9", 0, 0)
    assert scan(encode_blank(9), limit=9)[:5] == (0, 1, "", 9, 0)  # the file goes on
    assert scan(encode_blank(7))[:3] == (0, 4, "blank record of bad size 7")
    # A record that fits the file (limit) but not the data (end) is incomplete, not invalid.
    assert scan(VECTOR_A[:100], limit=148)[:3] == (0, 3, "a record of 148 bytes is partial")
    assert scan(VECTOR_A[:100], limit=147)[:3] == (
        0,
        4,
        "total size 148 goes beyond the end of the file",
    )


def test_ipv6_hosts_v2_topics_and_tags(scan: ScanFunction) -> None:
    records = [
        MessageRecord.create(topic="t" * 200, body=b"x", born_host=bytes(16), store_timestamp=5),
        MessageRecord.create(topic="ü", body=b"", store_host=bytes(16), properties={"TAGS": "é😀"}),
        MessageRecord.create(topic="t" * 200, body=b"y" * 50, properties=b"TAGS\x01\xff\xfeA\x02"),
        MessageRecord.create(topic="a", body=b"", properties=b"TAGS\x01x\x02TAGS\x01\x02"),
    ]
    data = b"".join(encode_record(r) for r in records)
    result = scan(data)
    assert result[:5] == (len(data), 0, "", 0, 4)
    table = rows(result)
    assert [row[8] for row in table] == [0, 1, 0, 2]
    assert list(topic_names(data, result[5])) == ["t" * 200, "ü", "a"]
    assert table[1][4] == java_string_hash("é😀")
    assert table[2][4] == java_string_hash("\ufffd\ufffdA")
    assert table[3][4] == 0  # the last TAGS wins, and it is empty
    assert [row[4] for row in table] == [r.tags_hash for r in RecordScanner(data)]


@pytest.mark.parametrize("length", [*range(0, 200, 7), 255, 256, 1023, 1024, 4097, 65536 + 5])
def test_body_crc_of_every_length(scan: ScanFunction, length: int) -> None:
    """The native CRC folds 16-byte blocks with carry-less multiplication and leaves the tail
    to zlib: every length, and a flip in any part of the body, agrees with zlib."""
    body = bytes((i * 7 + length) % 251 for i in range(length))
    data = encode_record(MessageRecord.create(topic="t", body=body))
    assert scan(data)[:5] == (len(data), 0, "", 0, 1)
    for at in {0, length // 2, length - 1} if length else set():
        damaged = bytearray(data)
        damaged[88 + at] ^= 0x01
        assert scan(damaged)[2] == "body CRC mismatch"


def test_arguments(scan: ScanFunction) -> None:
    with pytest.raises(ValueError):
        scan(VECTOR_A, -1)
    with pytest.raises(ValueError):
        scan(VECTOR_A, 0, None, -1)
    with pytest.raises(ValueError):
        scan(VECTOR_A, 0, None, 2**63 - 10)
    assert scan(bytearray(VECTOR_A))[4] == scan(memoryview(VECTOR_A))[4] == 1


def test_windows_give_the_scan_of_one_call(scan: ScanFunction) -> None:
    data = FIXTURE.read_bytes()
    whole = scan(data)
    for window in (1, 100, 172, 500, 8192):
        results = list(scan_windows(data, 0, None, 0, None, window=window, scan=scan))
        assert [row[:6] for r in results for row in ROW.iter_unpack(r[5])] == [
            row[:6] for row in rows(whole)
        ]
        assert results[-1][:4] == whole[:4]


# -- differential: generated and mutated regions ---------------------------------------------

i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
hosts = st.one_of(st.binary(min_size=4, max_size=4), st.binary(min_size=16, max_size=16))
# (no property ends in a zero byte: that is a zeroed tail, INVALID by design)
texts = st.text(
    alphabet=st.characters(exclude_characters="\x00\x01\x02", codec="utf-8"), max_size=12
)
raw_properties = st.one_of(
    st.dictionaries(st.sampled_from(["TAGS", "KEYS", "WAIT", "TAG", "TAGSX"]), texts, max_size=4),
    st.lists(
        st.tuples(st.sampled_from([b"TAGS", b"KEYS", b"", b"T\xffAGS"]), st.binary(max_size=10)),
        max_size=4,
    ).map(lambda items: b"".join(k + b"\x01" + v + b"\x02" for k, v in items)),
    st.binary(max_size=40).filter(lambda raw: not raw.endswith(b"\x00")),
)
topics = st.one_of(
    st.sampled_from(["TopicTest", "a", "ü", "%|_-9"]),
    st.text(max_size=140, alphabet=st.characters(codec="utf-8")),
)


@st.composite
def regions(draw: st.DrawFn) -> bytes:
    """Records at their own physical offsets, maybe a blank record or zeros after them."""
    data = bytearray()
    for _ in range(draw(st.integers(0, 5))):
        record = MessageRecord.create(
            topic=draw(topics),
            body=draw(st.binary(max_size=200)),
            queue_id=draw(st.integers(0, 2**31 - 1)),
            queue_offset=draw(st.integers(0, 2**63 - 1)),
            physical_offset=len(data),
            sys_flag=draw(st.integers(0, 0x3FF)),
            born_host=draw(hosts),
            store_host=draw(hosts),
            store_timestamp=draw(i64),
            properties=draw(raw_properties),
        )
        data += encode_record(record)
    tail = draw(st.sampled_from(["none", "blank", "zeros"]))
    if tail == "blank":  # a valid blank record: it fills the rest of the buffer
        spare = draw(st.integers(0, 40))
        data += encode_blank(8 + spare) + bytes(spare)
    elif tail == "zeros":
        data += bytes(draw(st.integers(0, 100)))
    return bytes(data)


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(regions()))
    for _ in range(draw(st.integers(0, 3))):
        if not data:
            break
        kind = draw(st.sampled_from(["flip", "length", "magic", "cut"]))
        at = draw(st.integers(0, len(data) - 1))
        if kind == "flip":
            data[at] ^= draw(st.integers(1, 255))
        elif kind == "length":  # a bogus i32 / i16 / i8 anywhere (sizes, lengths)
            width = draw(st.sampled_from([1, 2, 4]))
            value = draw(st.integers(0, 256**width - 1))
            data[at : at + width] = value.to_bytes(width, "big")[: len(data) - at]
        elif kind == "magic":
            magic = draw(st.sampled_from([0xDAA320A7, 0xDAA320AB, BLANK_MAGIC, 0]))
            data[at : at + 4] = magic.to_bytes(4, "big")[: len(data) - at]
        else:
            del data[at:]
    return bytes(data)


DIFFERENTIAL = settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def _both(data: bytes, *args: object, **flags: bool) -> ScanResult:
    assert native_scan is not None
    python = scan_index_py(data, *args, **flags)  # type: ignore[arg-type]
    native = native_scan(data, *args, **flags)
    assert native == python
    return native


needs_native = pytest.mark.skipif(native_scan is None, reason="hanet.store._speedups not built")


@needs_native
@DIFFERENTIAL
@given(
    data=regions(),
    check=st.booleans(),
    extra=st.integers(0, 64),
    base=st.integers(0, 2**40),
)
def test_generated_regions_scan_the_same(data: bytes, check: bool, extra: int, base: int) -> None:
    result = _both(data, 0, None, 0, None, check_crc=True, check_physical_offset=True)
    assert reason(result) is not StopReason.INVALID
    _both(data, 0, None, base, len(data) + extra, check_crc=check, check_physical_offset=check)
    for row, record in zip(rows(result), RecordScanner(data), strict=True):
        assert row[4] == record.tags_hash


@needs_native
@DIFFERENTIAL
@given(
    data=mutated(),
    start=st.integers(0, 300),
    end=st.one_of(st.none(), st.integers(-5, 2000)),
    limit=st.one_of(st.none(), st.integers(-5, 2000)),
    check_crc=st.booleans(),
    check_offset=st.booleans(),
    base=st.sampled_from([0, 1, 4096]),
)
def test_mutated_regions_scan_the_same(
    data: bytes,
    start: int,
    end: int | None,
    limit: int | None,
    check_crc: bool,
    check_offset: bool,
    base: int,
) -> None:
    _both(data, start, end, base, limit, check_crc=check_crc, check_physical_offset=check_offset)
    _both(data, 0, None, 0, None, check_crc=check_crc, check_physical_offset=check_offset)


@needs_native
@DIFFERENTIAL
@given(data=st.binary(max_size=600), start=st.integers(0, 50), check=st.booleans())
def test_garbage_after_a_record_scans_the_same(data: bytes, start: int, check: bool) -> None:
    _both(VECTOR_A + data, start, None, 0, None, check_crc=check, check_physical_offset=check)


# -- columns(): per-column buffers of the rows (the Spark source's batches) -------------------

ALL_COLUMNS = [*INDEX_FIXED_COLUMNS, *INDEX_VAR_COLUMNS]


def _columns_both(data: bytes, rows: bytes, base: int, names: list[str]) -> list[Any]:
    python = record_columns_py(data, rows, base, names)
    if native_columns is not None:
        assert native_columns(data, rows, base, names) == python
    return python


def _values(column: object) -> list[bytes | None]:
    assert isinstance(column, tuple)
    offsets_raw, data, validity, nulls = column
    offsets = [v for (v,) in struct.iter_unpack("=i", offsets_raw)]
    out: list[bytes | None] = []
    for i in range(len(offsets) - 1):
        valid = validity is None or validity[i >> 3] >> (i & 7) & 1
        out.append(data[offsets[i] : offsets[i + 1]] if valid else None)
    assert out.count(None) == nulls
    return out


def test_columns_of_vector_a_are_its_fields() -> None:
    result = scan_index_py(
        VECTOR_A, 0, None, 0x40001000, None, check_crc=True, check_physical_offset=True
    )
    cols = dict(
        zip(ALL_COLUMNS, _columns_both(VECTOR_A, result[5], 0x40001000, ALL_COLUMNS), strict=True)
    )
    record = next(iter(RecordScanner(VECTOR_A)))
    for name, code in INDEX_FIXED_COLUMNS.items():
        (value,) = struct.unpack("=" + code, cols[name])
        field = {"physical_offset": 0x40001000, "topic_id": 0}.get(name)
        expected = field if field is not None else getattr(record, name)
        assert value == expected, name
    assert _values(cols["topic"]) == [b"TopicTest"]
    assert _values(cols["body"]) == [b"Hello RocketMQ"]
    assert _values(cols["properties"]) == [record.properties_raw]
    assert _values(cols["tags"]) == [b"TagA"]
    assert _values(cols["keys"]) == [b"order-42"]
    assert _values(cols["store_host"]) == [record.store_host + struct.pack(">i", 10911)]
    assert _values(cols["born_host"]) == [record.born_host + struct.pack(">i", 53211)]
    msg_id = offset_msg_id(record.store_host, record.store_port, 0x40001000)
    assert _values(cols["msg_id"]) == [msg_id.encode()]


@DIFFERENTIAL
@given(data=regions(), base=st.integers(0, 2**40), pick=st.lists(st.sampled_from(ALL_COLUMNS)))
def test_generated_columns_are_the_same(data: bytes, base: int, pick: list[str]) -> None:
    result = scan_index_py(data, 0, None, base)
    cols = dict(zip(ALL_COLUMNS, _columns_both(data, result[5], base, ALL_COLUMNS), strict=True))
    records = list(RecordScanner(data, base_offset=base))
    assert _values(cols["body"]) == [r.body for r in records]
    assert _values(cols["topic"]) == [r.topic.encode() for r in records]
    props = [decode_properties(r.properties_raw) for r in records]
    tags = [None if v is None else v.decode("utf-8", "replace") for v in _values(cols["tags"])]
    assert tags == [p.get("TAGS") for p in props]
    _columns_both(data, result[5], base, pick)


@needs_native
@DIFFERENTIAL
@given(data=regions(), junk=st.binary(min_size=52, max_size=52 * 3), cut=st.integers(0, 51))
def test_bad_rows_raise_in_both(data: bytes, junk: bytes, cut: int) -> None:
    assert native_columns is not None
    result = scan_index_py(data)
    for rows in (junk[: len(junk) // 52 * 52], result[5] + junk[:cut]):
        outcomes: list[tuple[str, object]] = []
        for function in (record_columns_py, native_columns):
            try:
                outcomes.append(("ok", function(data, rows, 0, ALL_COLUMNS)))
            except ValueError:
                outcomes.append(("error", None))
        assert outcomes[0] == outcomes[1]


def test_columns_arguments() -> None:
    functions = [record_columns_py] + ([native_columns] if native_columns else [])
    for function in functions:
        with pytest.raises(ValueError, match="unknown column"):
            function(VECTOR_A, b"", 0, ["nope"])
        with pytest.raises(ValueError):
            function(VECTOR_A, b"\0" * 51, 0, ["size"])
        with pytest.raises(ValueError):
            function(VECTOR_A, b"", -1, ["size"])
        assert function(VECTOR_A, b"", 0, ["size", "tags"]) == [b"", (b"\0" * 4, b"", None, 0)]


# -- scan_columns(): the scan and its rows' columns in one pass --------------------------------


def _scan_columns_both(*args: Any, **flags: Any) -> tuple[ScanResult, list[Any]]:
    python = index_scan_columns_py(*args, **flags)
    if native_index_scan_columns is not None:
        assert native_index_scan_columns(*args, **flags) == python
    return python


@DIFFERENTIAL
@given(
    data=regions(),
    base=st.integers(0, 2**40),
    pick=st.lists(st.sampled_from(ALL_COLUMNS)),
    max_rows=st.integers(1, 6),
    start=st.just(0) | st.integers(0, 300),
    crc=st.booleans(),
)
def test_scan_columns_is_scan_then_columns(
    data: bytes, base: int, pick: list[str], max_rows: int, start: int, crc: bool
) -> None:
    """The same rows and stop as a scan (cut at max_rows records: END right after the last),
    the same columns as columns() of those rows, natively and in Python."""
    flags = {"check_crc": crc, "check_physical_offset": False}
    found, cols = _scan_columns_both(data, start, None, base, None, pick, max_rows, **flags)
    whole = scan_index_py(data, start, None, base, None, **flags)
    if whole.records < max_rows:
        assert found == whole
    else:
        assert found.records == max_rows and found.reason is StopReason.END
        assert found.rows == whole.rows[: max_rows * ROW.size]
        physical, size = ROW.unpack_from(found.rows, len(found.rows) - ROW.size)[:2]
        assert found.position == physical + size - base
    assert cols == record_columns_py(data, found.rows, base, pick)


@DIFFERENTIAL
@given(data=regions(), max_rows=st.integers(1, 4), window=st.integers(1, 400))
def test_scan_column_windows_are_one_scan(data: bytes, max_rows: int, window: int) -> None:
    """Windows of at most max_rows rows: together the rows and the stop of one whole scan
    (topic ids are numbered per window, as scan_windows')."""
    whole = scan_index_py(data, 0, None, 4096)
    for scan in (index_scan_columns_py, native_index_scan_columns):
        if scan is None:
            continue
        results = list(
            index_scan_column_windows(
                data, 0, None, 4096, None, ["size", "tags"], max_rows,
                window=window, scan=scan,
            )
        )  # fmt: skip
        assert all(r.records <= max_rows for r, _ in results)
        rows = [row[:-1] for r, _ in results for row in ROW.iter_unpack(r.rows)]
        assert rows == [row[:-1] for row in ROW.iter_unpack(whole.rows)]  # topic ids per window
        assert results[-1][0].stop(4096) == whole.stop(4096)
        for r, cols in results:
            assert cols == record_columns_py(data, r.rows, 4096, ["size", "tags"])


def test_scan_columns_arguments() -> None:
    functions = [index_scan_columns_py] + (
        [native_index_scan_columns] if native_index_scan_columns else []
    )
    for function in functions:
        with pytest.raises(ValueError, match="max_rows"):
            function(VECTOR_A, 0, None, 0, None, ["size"], 0)
        with pytest.raises(ValueError, match="unknown column"):
            function(VECTOR_A, 0, None, 0x40001000, None, ["nope"], 1)
        with pytest.raises(ValueError):
            function(VECTOR_A, -1, None, 0, None, ["size"], 1)
        found, cols = function(VECTOR_A, 0, None, 0x40001000, None, ["tags", "queue_id"], 5)
        assert found.records == 1 and cols[0] == (struct.pack("=2i", 0, 4), b"TagA", None, 0)
        assert cols[1] == struct.pack("=i", 3)


# -- the native scanner on random bytes, under python -X dev ---------------------------------

_FUZZ = textwrap.dedent(
    """
    import random, struct, sys
    from hanet.store._speedups import columns, scan, scan_columns
    from hanet.store.lowlevel import INDEX_FIXED_COLUMNS, INDEX_VAR_COLUMNS
    names = [*INDEX_FIXED_COLUMNS, *INDEX_VAR_COLUMNS]
    rng = random.Random(int(sys.argv[1]))
    magics = [b"\\xda\\xa3\\x20\\xa7", b"\\xda\\xa3\\x20\\xab", b"\\xcb\\xd4\\x31\\x94"]
    runs = 0
    for _ in range(20000):
        n = rng.randrange(0, 400)
        data = bytearray(rng.randbytes(n))
        for _ in range(rng.randrange(0, 4)):  # plausible prefixes make it past the magic
            at = rng.randrange(0, max(n - 8, 1))
            if n >= at + 8:
                data[at : at + 8] = struct.pack(">i", rng.randrange(-8, n + 8)) + rng.choice(magics)
        if n > 40 and rng.random() < 0.5:
            data[36:40] = struct.pack(">i", rng.choice([0, 0x10, 0x20, 0x30, -1]))
        buf = rng.choice([bytes, bytearray, memoryview])(data)
        start = rng.randrange(0, n + 2)
        end = rng.choice([None, rng.randrange(-2, n + 20)])
        limit = rng.choice([None, rng.randrange(-2, n + 20), 2**40])
        base = rng.randrange(0, 2**40)
        result = scan(
            buf,
            start,
            end,
            base,
            limit,
            check_crc=rng.random() < 0.5,
            check_physical_offset=rng.random() < 0.5,
        )
        assert len(result[5]) == 52 * result[4]
        assert 0 <= result[1] <= 4
        columns(buf, result[5], base, names)  # rows of this buffer: never raises
        found, cols = scan_columns(buf, start, end, base, limit, names, rng.randrange(1, 4))
        assert cols == columns(buf, found[5], base, names)
        junk = bytearray(result[5] + rng.randbytes(52 * rng.randrange(0, 3)))
        for _ in range(rng.randrange(0, 3)):
            if junk:
                junk[rng.randrange(len(junk))] ^= 1 << rng.randrange(8)
        try:
            columns(buf, bytes(junk), base, names)
        except ValueError:
            pass
        runs += 1
    print(runs)
    """
)


@needs_native
@pytest.mark.parametrize("seed", [1, 2])
def test_native_scan_and_columns_survive_random_bytes_under_dev_mode(seed: int) -> None:
    out = subprocess.run(
        [sys.executable, "-X", "dev", "-c", _FUZZ, str(seed)],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONMALLOC": "debug"},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "20000"


@needs_native
def test_the_zlib_crc_path_agrees_too() -> None:
    """``HANET_NO_CLMUL=1`` makes the native scan use zlib's CRC for every body."""
    code = textwrap.dedent(
        """
        from hanet.store import MessageRecord, encode_record
        from hanet.store.lowlevel import native_scan
        from hanet.store._speedups import CLMUL_CRC
        assert native_scan is not None and CLMUL_CRC == 0
        for n in (0, 1, 63, 64, 65, 1000, 4096):
            body = (bytes(range(256)) * 17)[:n]
            data = encode_record(MessageRecord.create(topic="t", body=body))
            assert native_scan(data)[4] == 1
        print("ok")
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "HANET_NO_CLMUL": "1"},
    )
    assert out.stdout.strip() == "ok", out.stderr


# -- the store without the extension ---------------------------------------------------------


@pytest.mark.slow
@needs_native
def test_store_tests_pass_with_the_pure_python_scanner() -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/test_store_store.py",
            "tests/test_store_recovery.py",
            "tests/test_store_integrity.py",
            "tests/test_store_dispatch.py",
            "tests/test_store_disk.py",
            "tests/test_cli_store.py",
            "tests/test_ha_slave_integrity.py",
            "tests/test_store_index.py::test_the_native_scanner_is_selected_when_built",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "HANET_NO_EXTENSIONS": "1"},
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


@pytest.mark.parametrize("zeroed", [1, 3, 20])
def test_a_record_whose_properties_end_in_zeros_is_invalid(scan: ScanFunction, zeroed: int) -> None:
    """A lost write that zeroed a record's tail, the whole-record CRC property with it, must not
    read as an unsealed record whose body CRC still matches (the soak's lost-tail fault)."""
    bad = bytearray(VECTOR_A)
    bad[len(bad) - zeroed :] = bytes(zeroed)
    result = scan(bytes(bad), 0, None, 0x40001000, None, check_crc=True, check_physical_offset=True)
    assert (reason(result), result[2], result[4]) == (
        StopReason.INVALID,
        "properties end in a zero byte (a zeroed tail)",
        0,
    )
