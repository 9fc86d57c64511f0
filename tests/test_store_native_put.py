"""The put path's native helpers agree with their pure-Python references, on good and bad
input: the index keys of a scan window (``key_batch``)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hanet.store import MessageRecord, encode_record
from hanet.store.lowlevel import index_key_batch_py as key_batch_py
from hanet.store.lowlevel import native_index_key_batch as native_key_batch
from hanet.store.lowlevel import scan_index_py

needs_native = pytest.mark.skipif(
    native_key_batch is None, reason="hanet.store._speedups is not built"
)
ROLLBACK = 0x3 << 2

_text = st.text(
    alphabet=st.sampled_from(["a", "Z", "0", " ", "é", "中", "😀", "\x01", "-"]), max_size=12
)
_raw_value = st.binary(max_size=10).map(lambda b: b.replace(b"\x02", b""))


def _window(records: list[tuple[str, bytes, int]]) -> tuple[bytes, bytes]:
    """Records (topic, raw properties, sys flag) one after the other, and their scan rows."""
    buf = bytearray()
    for topic, raw, sys_flag in records:
        record = MessageRecord.create(
            topic=topic,
            body=b"body",
            physical_offset=1000 + len(buf),
            sys_flag=sys_flag,
            store_timestamp=1_700_000_000_000 + len(buf),
            properties=raw,
        )
        buf += encode_record(record)
    result = scan_index_py(bytes(buf), base_offset=1000, check_physical_offset=True)
    assert result.records == len(records)
    return bytes(buf), result.rows


def _both(buf: bytes, rows: bytes, indexed: int, skip: int) -> list[tuple[int, int, int]]:
    assert native_key_batch is not None
    expected = key_batch_py(memoryview(buf), 1000, rows, indexed, skip)
    assert native_key_batch(memoryview(buf), 1000, rows, indexed, skip) == expected
    return expected


@needs_native
def test_keys_of_a_window_as_the_reference() -> None:
    records = [
        ("TopicA", b"UNIQ_KEY\x01ABC\x02KEYS\x01k1 k2  k3\x02TAGS\x01t\x02", 0),
        ("TopicA", b"KEYS\x01only\x02", 0),
        ("TopicB", b"UNIQ_KEY\x01\x02", 0),  # an empty unique key is a key
        ("TopicB", b"KEYS\x01a\x02KEYS\x01b c\x02UNIQ_KEY\x01u1\x02UNIQ_KEY\x01u2", 0),
        ("TopicB", b"XKEYS\x01no\x02TAGS\x01KEYS\x01no\x02", 0),  # not a property name
        ("TopicA", b"UNIQ_KEY\x01rolled back\x02", ROLLBACK),
        ("TopicA", b"KEYS\x01caf\xc3\xa9 \xff\xfe bad\x02", 0),  # non-ASCII, invalid UTF-8
        ("Topïc", b"UNIQ_KEY\x01\xf0\x9f\x98\x80\x02", 0),  # a non-ASCII topic, a surrogate pair
        ("TopicA", b"", 0),
    ]
    buf, rows = _window(records)
    batch = _both(buf, rows, 0, 0)
    assert len(batch) == 4 + 1 + 1 + 3 + 3 + 1
    first = batch[0][1]
    # The keys of the record at indexed, from skip on; records below indexed are left out.
    assert _both(buf, rows, first, 2) == batch[2:]
    assert _both(buf, rows, first + 1, 0) == batch[4:]


@needs_native
@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["T", "Topic_1", "主题"]),
            st.lists(
                st.tuples(st.sampled_from(["KEYS", "UNIQ_KEY", "TAGS", "K"]), _text), max_size=4
            ),
            st.lists(_raw_value, max_size=2),
            st.sampled_from([0, ROLLBACK, 0x4]),
        ),
        min_size=1,
        max_size=6,
    ),
    st.integers(0, 3),
    st.integers(0, 5),
)
def test_any_properties_hash_as_the_reference(
    specs: list[tuple[str, list[tuple[str, str]], list[bytes], int]], which: int, skip: int
) -> None:
    records = []
    for topic, pairs, junk, sys_flag in specs:
        raw = b"".join(f"{name}\x01{value}\x02".encode() for name, value in pairs)
        raw += b"\x02".join(junk)
        records.append((topic, raw, sys_flag))
    buf, rows = _window(records)
    offsets = [row[0] for row in struct.iter_unpack("=qiiqiqqii", rows)]
    _both(buf, rows, offsets[min(which, len(offsets) - 1)], skip)


@needs_native
def test_rows_outside_the_buffer_are_refused_by_both() -> None:
    buf, rows = _window([("TopicA", b"UNIQ_KEY\x01ABC\x02", 0)])
    fields = list(struct.unpack("=qiiqiqqii", rows))
    bad_rows = []
    for at, value in ((6, len(buf)), (6, -1), (7, len(buf)), (0, 1000 + len(buf))):
        row = list(fields)
        row[at] = value
        bad_rows.append(struct.pack("=qiiqiqqii", *row))
    shorter = buf[: fields[6] + fields[7] + 5]  # the properties run past the end
    for bad, data in [(row, buf) for row in bad_rows] + [(rows, shorter)]:
        with pytest.raises(ValueError, match="outside the buffer"):
            key_batch_py(memoryview(data), 1000, bad, 0, 0)
        with pytest.raises(ValueError, match="outside the buffer"):
            native_key_batch(memoryview(data), 1000, bad, 0, 0)
    with pytest.raises(ValueError):
        native_key_batch(memoryview(buf), 1000, rows[:-1], 0, 0)
