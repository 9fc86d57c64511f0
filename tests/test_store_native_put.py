"""The put path's native helpers agree with their pure-Python references, on good and bad
input: the index keys of a scan window (``key_batch``) and their index file entries
(``index_entries``), a put's properties field
(``put_properties``) and a whole record written and sealed in one call (``write_record``)."""

from __future__ import annotations

import functools
import os
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hanet.store import Message, MessageRecord, decode_record, encode_record
from hanet.store.lowlevel import (
    CRC32_PROPERTY,
    index_entries_py,
    native_index_entries,
    native_new_message,
    native_put_properties,
    native_write_record,
    new_message,
    new_message_py,
    put_properties_py,
    record_crc,
    scan_index_py,
    write_record_py,
)
from hanet.store.lowlevel import index_key_batch_py as key_batch_py
from hanet.store.lowlevel import native_index_key_batch as native_key_batch

needs_native = pytest.mark.skipif(
    native_key_batch is None, reason="hanet.store._speedups is not built"
)
ROLLBACK = 0x3 << 2

_text = st.text(
    alphabet=st.sampled_from(["a", "Z", "0", " ", "é", "中", "😀", "\x01", "-"]), max_size=12
)
_raw_value = st.binary(max_size=10).map(lambda b: b.replace(b"\x02", b"").replace(b"\x00", b""))


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
    assert native_key_batch is not None
    buf, rows = _window([("TopicA", b"UNIQ_KEY\x01ABC\x02", 0)])
    fields = list(struct.unpack("=qiiqiqqii", rows))
    bad_rows = []
    for at, value in (
        (6, len(buf)),
        (6, -1),
        (7, len(buf)),
        (0, 1000 + len(buf)),
        (0, -(2**63)),  # offset - base would overflow
    ):
        row = list(fields)
        row[at] = value
        bad_rows.append(struct.pack("=qiiqiqqii", *row))
    shorter = buf[: fields[6] + fields[7] + 5]  # the properties run past the end
    for bad, data in [(row, buf) for row in bad_rows] + [(rows, shorter)]:
        with pytest.raises(ValueError, match="outside the buffer"):
            key_batch_py(memoryview(data), 1000, bad, -(2**63), 0)
        with pytest.raises(ValueError, match="outside the buffer"):
            native_key_batch(memoryview(data), 1000, bad, -(2**63), 0)
    with pytest.raises(ValueError):
        native_key_batch(memoryview(buf), 1000, rows[:-1], 0, 0)


needs_writer = pytest.mark.skipif(
    native_write_record is None or native_put_properties is None,
    reason="hanet.store._speedups is not built",
)


@needs_writer
@given(
    st.dictionaries(st.text(max_size=6) | st.just(CRC32_PROPERTY), st.text(max_size=8), max_size=5)
)
def test_put_properties_as_the_reference(properties: dict[str, str]) -> None:
    assert native_put_properties is not None
    assert native_put_properties(properties) == put_properties_py(properties)
    assert native_put_properties(properties).endswith(b"__CRC32#\x010000000000\x02")


@needs_writer
def test_put_properties_refuses_what_the_reference_refuses() -> None:
    assert native_put_properties is not None
    with pytest.raises(UnicodeEncodeError):
        put_properties_py({"a": "\ud800"})
    with pytest.raises(UnicodeEncodeError):
        native_put_properties({"a": "\ud800"})
    # not str: formatted as the reference's f-string does
    weird: dict[str, Any] = {"n": 5, "f": 1.5}
    assert native_put_properties(weird) == put_properties_py(weird)


def _record_args(**changes: Any) -> list[Any]:
    fields: dict[str, Any] = {
        "pos": 7,
        "size": 0,
        "queue_id": 3,
        "flag": -1,
        "queue_offset": 2**40,
        "physical_offset": 12345,
        "sys_flag": 0,
        "born_timestamp": 1_700_000_000_123,
        "born_host": b"\x0a\x00\x00\x01",
        "born_port": 50000,
        "store_timestamp": 1_700_000_000_456,
        "store_host": b"\x7f\x00\x00\x01",
        "store_port": 10911,
        "reconsume_times": 2,
        "prepared_transaction_offset": -5,
        "body": b"hello" * 30,
        "topic": b"TopicW",
        "properties": put_properties_py({"TAGS": "a", "KEYS": "k"}),
    }
    fields.update(changes)
    if "size" not in changes:
        header = (
            88 + (12 if fields["sys_flag"] & 0x10 else 0) + (12 if fields["sys_flag"] & 0x20 else 0)
        )
        fields["size"] = (
            header + len(fields["body"]) + 1 + len(fields["topic"]) + 2 + len(fields["properties"])
        )
    return list(fields.values())


def _written(function: Any, args: list[Any]) -> bytes | type[BaseException]:
    buf = bytearray(b"\xee" * 1200)
    try:
        function(memoryview(buf), *args)
    except (ValueError, struct.error, TypeError) as exc:
        return type(exc)
    return bytes(buf)


@needs_writer
@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"sys_flag": 0x10 | 0x4, "born_host": bytes(range(16))},
        {"sys_flag": 0x20, "store_host": bytes(16)},
        {"sys_flag": 0x30, "born_host": bytes(16), "store_host": bytes(16)},
        {"body": b""},
        {"body": bytes(range(256)) * 2, "pos": 0},
        {"topic": b"T" * 127, "body": b"x"},
    ],
)
def test_write_record_as_the_reference(changes: dict[str, Any]) -> None:
    args = _record_args(**changes)
    written = _written(native_write_record, args)
    assert written == _written(write_record_py, args)
    assert isinstance(written, bytes)
    pos, size = args[0], args[1]
    record = decode_record(written[pos : pos + size])
    assert record.body == args[15] and record.topic == args[16].decode()
    assert int(record.properties_raw[-11:-1][::-1]) == record_crc(written[pos : pos + size])
    assert written[:pos] == b"\xee" * pos and set(written[pos + size :]) == {0xEE}


@needs_writer
@pytest.mark.parametrize(
    "changes",
    [
        {"size": 1},  # not the record's size
        {"pos": 1000},  # past the end of the buffer
        {"pos": -1},
        {"born_host": bytes(16)},  # the host does not match sys_flag
        {"sys_flag": 0x20},
        {"topic": b""},
        {"topic": b"T" * 128},
        {"properties": b"short"},
        {"queue_id": 2**31},  # out of a field's range
        {"flag": -(2**31) - 1},
        {"queue_offset": 2**63},
        {"born_port": 2**32},
        {"reconsume_times": "1"},
        {"body": "text"},
    ],
)
def test_write_record_refuses_as_the_reference(changes: dict[str, Any]) -> None:
    args = _record_args(**changes)
    expected = _written(write_record_py, args)
    assert expected in (ValueError, struct.error, TypeError)
    assert _written(native_write_record, args) == expected


needs_entries = pytest.mark.skipif(
    native_index_entries is None, reason="hanet.store._speedups is not built"
)


def _entries_both(view: bytes, keys: list[Any], *header: int) -> Any:
    assert native_index_entries is not None
    try:
        expected: Any = index_entries_py(view, keys, *header)
    except (ValueError, struct.error, ZeroDivisionError, TypeError) as exc:
        expected = type(exc)
    try:
        got: Any = native_index_entries(view, keys, *header)
    except (ValueError, struct.error, ZeroDivisionError, TypeError) as exc:
        got = type(exc)
    assert got == expected
    return expected


@needs_entries
@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(-3, 40), min_size=16, max_size=16),
    st.lists(
        st.tuples(
            st.integers(0, 2**31 - 1),
            st.integers(0, 2**50),
            st.integers(1_700_000_000_000, 1_700_000_900_000),
        ),
        max_size=12,
    ),
    st.integers(0, 30),
    st.sampled_from([0, 1_700_000_000_000, 1_800_000_000_000]),
)
def test_index_entries_as_the_reference(
    slot_values: list[int], keys: list[tuple[int, int, int]], count: int, begin: int
) -> None:
    view = bytes(40) + struct.pack(">16i", *slot_values) + bytes(100)
    result = _entries_both(view, keys, count, 16, begin, 7, 3, 9, begin)
    assert isinstance(result, tuple)
    packed, pending, *_, number = result
    assert len(packed) == 20 * len(keys)
    assert number == count + len(keys)
    assert set(pending.values()) <= set(range(count, number))


@needs_entries
@pytest.mark.parametrize(
    ("keys", "slots", "size"),
    [
        ([(5, 1, 1)], 16, 40 + 16),  # the slot is past the end of the file
        ([(2**31, 1, 1)], 16, 200),  # a key hash out of 32 bits
        ([(-(2**31) - 1, 1, 1)], 16, 200),
        ([(1, 2**63, 1)], 16, 200),  # an offset out of 64 bits
        ([(1, 1, 1)], 0, 200),  # no slots
        ([(1, 1)], 16, 200),  # not a key
        ([(1, "1", 1)], 16, 200),
    ],
)
def test_index_entries_refuse_as_the_reference(keys: list[Any], slots: int, size: int) -> None:
    assert not isinstance(_entries_both(bytes(size), keys, 0, slots, 0, 0, 0, 0, 0), tuple)


@needs_entries
@pytest.mark.parametrize("slots", [-1, -16, 1])
def test_index_entries_of_odd_slot_counts_as_the_reference(slots: int) -> None:
    keys = [(-(2**31), 1, 1), (2**31 - 1, 2, 2), (0, 3, 3)]
    _entries_both(bytes(300), keys, 0, slots, 0, 0, 0, 0, 0)


_message_values = st.tuples(
    _text,
    st.binary(max_size=16),
    st.integers(-(2**31), 2**31 - 1),
    st.integers(-(2**31), 2**31 - 1),
    st.dictionaries(_text, _text, max_size=3),
    st.integers(0, 2**31 - 1),
    st.integers(0, 2**63 - 1),
    st.sampled_from([b"\x7f\x00\x00\x01", b"\x00" * 16, b""]),
    st.integers(0, 65535),
    st.integers(0, 2**31 - 1),
)


@needs_native
@given(_message_values)
def test_new_message_as_the_reference(values: tuple[Any, ...]) -> None:
    """The native Message is the one Message(...) makes of the same values: equal, the same
    hash and repr, the same objects in its fields, frozen."""
    assert native_new_message is not None
    made = native_new_message(*values)
    expected = new_message_py(*values)
    assert type(made) is Message
    assert made == expected
    assert hash(made) == hash(expected)
    assert repr(made) == repr(expected)
    assert made.prepared_transaction_offset == 0
    assert made.properties is values[4] and made.body is values[1]
    with pytest.raises(AttributeError):  # frozen (attrs' FrozenInstanceError)
        made.topic = "other"  # type: ignore[misc]


@needs_native
def test_new_message_refuses_what_it_cannot_build() -> None:
    assert isinstance(native_new_message, functools.partial)
    raw = native_new_message.func  # the extension's function, the class not bound
    values: tuple[Any, ...] = ("T", b"x", 0, 0, {}, 0, 0, b"\x7f\x00\x00\x01", 0, 0)
    with pytest.raises(TypeError):
        raw(Message, *values[:-1])
    with pytest.raises(TypeError):
        raw("Message", *values)
    with pytest.raises(TypeError):  # not made by object.__new__
        raw(int, *values)

    class Other:
        __slots__ = ()

    with pytest.raises(AttributeError):  # a class without these fields
        raw(Other, *values)


def test_the_send_path_uses_the_native_message_when_built() -> None:
    assert (new_message is native_new_message) == (
        native_new_message is not None and not os.environ.get("HANET_NO_EXTENSIONS")
    )
    assert new_message(*("T", b"x", 1, 2, {}, 3, 4, b"\x7f\x00\x00\x01", 5, 6)) == Message(
        "T", b"x", 1, 2, {}, 3, 4, b"\x7f\x00\x00\x01", 5, 6
    )
