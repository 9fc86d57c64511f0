"""The leader's records and the view's re-stamping, packed and read at fixed places: the same
bytes and fields as the store's own record codec (the reference), for any message; the wire
check of an appended record, native scan or Python, refuses what the reference refuses."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hanet.dledger import (
    ENTRY_HEADER_SIZE,
    AppendRequest,
    Bodies,
    Envelope,
    LogEntry,
    NotARecordError,
    append_entries_py,
    decode_envelope,
    encode_envelope,
    put_record,
    put_records,
    record_place,
    stamp_into,
    view_records_py,
)
from hanet.handlers import CorruptedFrameError
from hanet.store import CorruptRecordError, Message, decode_record, encode_record, lowlevel
from hanet.store.lowlevel import (
    CRC32_PROPERTY,
    SYS_FLAG_KNOWN_BITS,
    native_scan,
    scan_index_py,
)

hosts = st.one_of(st.binary(min_size=4, max_size=4), st.binary(min_size=16, max_size=16))
messages = st.builds(
    Message,
    topic=st.text(st.characters(min_codepoint=33, max_codepoint=0x2FF), min_size=1, max_size=200),
    body=st.binary(max_size=300),
    queue_id=st.integers(0, 1023),
    flag=st.integers(-(2**31), 2**31 - 1),
    sys_flag=st.integers(0, 0xFFFF).map(lambda f: f & SYS_FLAG_KNOWN_BITS),
    born_timestamp=st.integers(0, 2**50),
    born_host=hosts,
    born_port=st.integers(0, 65535),
    reconsume_times=st.integers(0, 16),
    properties=st.dictionaries(
        st.text(st.characters(min_codepoint=48, max_codepoint=122), min_size=1, max_size=8),
        st.text(st.characters(min_codepoint=48, max_codepoint=122), max_size=20),
        max_size=4,
    ),
)


def _place(size: int, end: int) -> int:
    return end + 7  # anywhere: the offsets follow it


_WRITERS = {
    "python": None,  # the records packed in Python
    "reference": (lowlevel.write_record_unsealed_py, lowlevel.put_properties_py),
    "native": (
        (lowlevel.native_write_record_unsealed, lowlevel.native_put_properties)
        if lowlevel.native_write_record_unsealed is not None
        and lowlevel.native_put_properties is not None
        else None
    ),
}
needs_native = pytest.mark.skipif(
    lowlevel.native_write_record_unsealed is None, reason="hanet.store._speedups is not built"
)


@pytest.mark.parametrize("writer", sorted(_WRITERS))
@settings(max_examples=200, deadline=None)
@given(batch=st.lists(messages, min_size=1, max_size=4), store=hosts, end=st.integers(0, 2**40))
def test_put_records_are_the_reference_encoding(
    writer: str, batch: list[Message], store: bytes, end: int
) -> None:
    """The same bytes whichever packs them: Python, or the record writer (native or its
    reference) for a topic of up to 127 bytes."""
    clock = iter(range(1_700_000_000_000, 1_700_000_000_100))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("hanet.dledger._records._NATIVE", _WRITERS[writer])
        got = put_records(batch, end, _place, (store, 10911), lambda: next(clock))
    clock = iter(range(1_700_000_000_000, 1_700_000_000_100))
    at = end
    for message, raw in zip(batch, got, strict=True):
        record = put_record(message, (store, 10911), next(clock))
        pos = _place(record.size, at)
        assert raw == encode_record(record._replace(physical_offset=pos + ENTRY_HEADER_SIZE))
        at = pos + ENTRY_HEADER_SIZE + record.size


@settings(max_examples=200, deadline=None)
@given(messages, hosts, st.integers(0, 2**50), st.integers(0, 2**40))
def test_restamping_at_fixed_places_matches_decoding(
    message: Message, store: bytes, offset: int, queue_offset: int
) -> None:
    (raw,) = put_records([message], 0, _place, (store, 4321), lambda: 1_700_000_000_123)
    record = decode_record(raw)
    place = record_place(raw)
    assert (place.size, place.topic, place.queue_id, place.store_timestamp) == (
        record.size,
        record.topic,
        record.queue_id,
        record.store_timestamp,
    )
    assert (place.store_host, place.store_port) == (record.store_host, record.store_port)
    buf = bytearray(b"\0" * 5 + raw)
    stamp_into(buf, 5, offset, queue_offset)
    expected = record._replace(physical_offset=offset, queue_offset=queue_offset)
    assert bytes(buf[5:]) == encode_record(expected)


def test_a_body_that_is_not_one_record_is_refused() -> None:
    (raw,) = put_records([Message(topic="T", body=b"x")], 0, _place, (b"\1\2\3\4", 1), lambda: 1)
    for bad in (raw[:-1], raw + b"\0", b"", raw[:40], b"\0" * 4 + raw[4:]):
        with pytest.raises(ValueError):
            record_place(bad)
    cut_topic = bytearray(raw)
    cut_topic[-4 - 1 - 1] = 200  # the topic length runs past the end (the 1-byte topic "T")
    with pytest.raises(ValueError):
        record_place(bytes(cut_topic))


def test_a_born_host_of_another_length_is_refused_as_the_reference_does() -> None:
    message = Message(topic="T", body=b"x", born_host=b"\1\2\3\4\5")
    with pytest.raises(ValueError):
        put_records([message], 0, _place, (b"\1\2\3\4", 1), lambda: 1)
    with pytest.raises(ValueError):
        encode_record(put_record(message, (b"\1\2\3\4", 1), 1))


def _append_frame(body: bytes) -> bytes:
    entry = LogEntry(1, 1, body)
    request = AppendRequest(1, "a", 0, 0, (entry,), 0)
    return bytes(encode_envelope(Envelope("a", "b", request)))


def _outcome(frame: bytes) -> str:
    try:
        decode_envelope(frame)
    except CorruptedFrameError as exc:
        return str(exc)
    return "accepted"


@settings(max_examples=300, deadline=None)
@given(
    messages,
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=3),
    st.integers(-8, 8),
)
def test_the_wire_check_of_appended_records_is_the_same_native_and_in_python(
    message: Message, flips: list[tuple[int, int]], resize: int
) -> None:
    (raw,) = put_records([message], 0, _place, (b"\1\2\3\4", 1), lambda: 1)
    body = bytearray(raw)
    for at, value in flips:
        body[at % len(body)] = value
    body = body[: len(body) + resize] if resize < 0 else body + bytes(resize)
    frame = _append_frame(bytes(body) or b"\0")
    outcomes = []
    for scan in (scan_index_py, native_scan):
        if scan is None:
            continue  # the extension is not built: the Python path alone
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(lowlevel, "scan_index", scan)
            outcomes.append(_outcome(frame))
    reference = "accepted"
    try:
        record = decode_record(bytes(body))
        if record.size != len(body):
            reference = "holds a record"
    except CorruptRecordError:
        reference = "is not a record"
    assert len(set(outcomes)) == 1
    assert reference in outcomes[0]
    if not flips and not resize:
        assert outcomes[0] == "accepted"


def test_kept_bodies_stay_until_released_and_the_released_are_not_kept_again() -> None:
    bodies = Bodies()
    for index in range(1, 6):
        bodies.keep(index, 1, b"x" * index)
    bodies.release_through(3)
    assert [bodies.get(i) is not None for i in range(1, 6)] == [False] * 3 + [True] * 2
    assert bodies.bytes == 4 + 5 and bodies.released == 3
    bodies.keep(2, 1, b"again")  # applied already: nobody needs it from here
    assert bodies.get(2) is None
    bodies.release_through(2)  # never backwards
    assert bodies.released == 3
    bodies.release_through(10**9)  # far ahead: by what is kept, not index by index
    assert len(bodies) == 0 and bodies.bytes == 0 and not bodies.crowded


def _unsealed_args(**changes: object) -> list[object]:
    fields: dict[str, object] = {
        "pos": 5,
        "size": 0,
        "queue_id": 3,
        "flag": -1,
        "queue_offset": 0,
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
        "properties": b"TAGS\x01a\x02KEYS\x01k\x02",
    }
    fields.update(changes)
    if "size" not in changes:
        sys_flag = fields["sys_flag"]
        assert isinstance(sys_flag, int)
        header = 88 + (12 if sys_flag & 0x10 else 0) + (12 if sys_flag & 0x20 else 0)
        parts: list[Any] = [fields[name] for name in ("body", "topic", "properties")]
        fields["size"] = header + sum(len(each) for each in parts) + 1 + 2
    return list(fields.values())


def _unsealed(function: object, args: list[object]) -> bytes | type[BaseException]:
    buf = bytearray(b"\xee" * 1200)
    try:
        function(memoryview(buf), *args)  # type: ignore[operator]
    except (ValueError, struct.error, TypeError) as exc:
        return type(exc)
    return bytes(buf)


@needs_native
@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"properties": b""},  # none at all: an unsealed record may have no properties
        {"sys_flag": 0x10 | 0x4, "born_host": bytes(range(16))},
        {"sys_flag": 0x30, "born_host": bytes(16), "store_host": bytes(16)},
        {"body": b"", "pos": 0},
        {"topic": b"T" * 127, "body": b"x"},
        {"properties": b"P\x01" + b"v" * 900 + b"\x02"},
    ],
)
def test_unsealed_records_are_written_as_the_reference_writes_them(
    changes: dict[str, object],
) -> None:
    args = _unsealed_args(**changes)
    written = _unsealed(lowlevel.native_write_record_unsealed, args)
    assert written == _unsealed(lowlevel.write_record_unsealed_py, args)
    assert isinstance(written, bytes)
    pos, size = args[0], args[1]
    assert isinstance(pos, int) and isinstance(size, int)
    record = decode_record(written[pos : pos + size])
    assert record.body == args[15] and record.properties_raw == args[17]
    assert CRC32_PROPERTY not in record.properties  # no seal
    assert written[:pos] == b"\xee" * pos and set(written[pos + size :]) == {0xEE}


@needs_native
@pytest.mark.parametrize(
    "changes",
    [
        {"size": 1},  # not the record's size
        {"pos": 1100},  # past the end of the buffer
        {"pos": -1},
        {"born_host": bytes(16)},  # the host does not match sys_flag
        {"sys_flag": 0x20},
        {"topic": b""},
        {"topic": b"T" * 128},
        {"properties": b"p" * 32768},
        {"queue_id": 2**31},  # out of a field's range
        {"queue_offset": 2**63},
        {"store_port": 2**32},
        {"reconsume_times": "1"},
        {"body": "text"},
    ],
)
def test_unsealed_records_are_refused_as_the_reference_refuses_them(
    changes: dict[str, object],
) -> None:
    args = _unsealed_args(**changes)
    expected = _unsealed(lowlevel.write_record_unsealed_py, args)
    assert expected in (ValueError, struct.error, TypeError)
    assert _unsealed(lowlevel.native_write_record_unsealed, args) == expected


@pytest.mark.parametrize("writer", sorted(_WRITERS))
def test_a_message_that_cannot_be_packed_is_refused_whichever_packs_it(writer: str) -> None:
    if _WRITERS[writer] is None and writer == "native":
        pytest.skip("hanet.store._speedups is not built")
    bad = [
        Message(topic="T", body=b"x", properties={"K": "\ud800"}),  # not UTF-8
        Message(topic="T", body=b"x", queue_id=2**31),  # out of its field
        Message(topic="T", body=b"x", born_host=b"\1\2\3"),
    ]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("hanet.dledger._records._NATIVE", _WRITERS[writer])
        for message in bad:
            with pytest.raises((ValueError, struct.error)):
                put_records([message], 0, _place, (b"\1\2\3\4", 1), lambda: 1)
        # a property named as the whole-record CRC is kept, as the reference keeps it
        kept = Message(topic="T", body=b"x", properties={CRC32_PROPERTY: "1", "A": "b"})
        (raw,) = put_records([kept], 0, _place, (b"\1\2\3\4", 1), lambda: 1)
        assert decode_record(raw).properties_raw == b"__CRC32#\x011\x02A\x01b\x02"


def _fields_or_error(function: object, raw: bytes) -> object:
    try:
        return tuple(function(raw))  # type: ignore[operator]
    except ValueError:
        return ValueError


@needs_native
@settings(max_examples=300, deadline=None)
@given(
    messages,
    hosts,
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=3),
    st.integers(-8, 8),
)
def test_the_native_record_place_reads_what_the_reference_reads(
    message: Message, store: bytes, flips: list[tuple[int, int]], resize: int
) -> None:
    """The store extension's ``record_place`` against :func:`record_place`, on records as the
    leader packs them (v1 and v2 topics, IPv4 and IPv6 hosts) and on damaged ones (bytes
    changed, cut short, run long): the same fields, or ValueError from both."""
    (raw,) = put_records([message], 0, _place, (store, 4321), lambda: 1_700_000_000_123)
    native = lowlevel.native_record_place
    assert native is not None
    assert native(raw) == tuple(record_place(raw))
    body = bytearray(raw)
    for at, value in flips:
        body[at % len(body)] = value
    body = body[: len(body) + resize] if resize < 0 else body + bytes(resize)
    assert _fields_or_error(native, bytes(body)) == _fields_or_error(record_place, bytes(body))


@needs_native
def test_the_native_record_place_refuses_what_the_reference_refuses() -> None:
    (raw,) = put_records([Message(topic="T", body=b"x")], 0, _place, (b"\1\2\3\4", 1), lambda: 1)
    native = lowlevel.native_record_place
    assert native is not None
    bad_topic = bytearray(raw)
    bad_topic[-3] = 0xFF  # the 1-byte topic "T" (before 2 bytes of properties length): not UTF-8
    long_topic = bytearray(raw)
    long_topic[-4] = 0xFF  # its length runs past the end
    negative_body = bytearray(raw)
    negative_body[84:88] = (-1).to_bytes(4, "big", signed=True)
    for bad in (raw[:-1], raw + b"\0", b"", raw[:39], raw[:40], b"\0" * 4 + raw[4:]):
        assert _fields_or_error(native, bad) is ValueError
        assert _fields_or_error(record_place, bad) is ValueError
    for bad in (bytes(bad_topic), bytes(long_topic), bytes(negative_body)):
        assert _fields_or_error(native, bad) is ValueError
        assert _fields_or_error(record_place, bad) is ValueError
    assert native(memoryview(raw)) == native(bytearray(raw)) == tuple(record_place(raw))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        native("not bytes")  # type: ignore[arg-type]


@pytest.mark.parametrize("writer", sorted(_WRITERS))
def test_properties_of_any_mapping_are_packed_as_a_dicts(writer: str) -> None:
    from types import MappingProxyType

    as_dict = Message(topic="T", body=b"x", properties={"A": "1", "B": "2"})
    as_proxy = Message(topic="T", body=b"x", properties=MappingProxyType({"A": "1", "B": "2"}))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("hanet.dledger._records._NATIVE", _WRITERS[writer])
        packed = put_records([as_dict, as_proxy], 0, _place, (b"\1\2\3\4", 1), lambda: 1)
    assert decode_record(packed[0]).properties_raw == b"A\x011\x02B\x012\x02"
    assert decode_record(packed[1]).properties_raw == b"A\x011\x02B\x012\x02"


needs_native_entries = pytest.mark.skipif(
    lowlevel.native_append_entries is None, reason="hanet.store._speedups is not built"
)


def _entries_frame(bodies: list[bytes], prev_index: int, noops: int) -> bytes:
    """An APPEND frame: ``noops`` no-ops, then a client entry per body, terms 2 then 3."""
    entries = [LogEntry(prev_index + 1 + k, 2, b"", True) for k in range(noops)]
    entries += [LogEntry(prev_index + 1 + len(entries) + k, 3, b) for k, b in enumerate(bodies)]
    request = AppendRequest(3, "a", prev_index, 2 if prev_index else 0, tuple(entries), 0)
    return bytes(encode_envelope(Envelope("a", "b", request)))


def _python_loop_unused(*args: object) -> None:
    raise AssertionError("the native decoder refused what the Python loop takes")


def _entries_outcome(native: bool, frame: bytes, *, native_only: bool = False) -> object:
    with pytest.MonkeyPatch.context() as patch:
        chosen = lowlevel.native_append_entries if native else None  # HANET_NO_EXTENSIONS too
        patch.setattr("hanet.dledger._codec._NATIVE_ENTRIES", chosen)
        if native_only:
            patch.setattr("hanet.dledger._codec.append_entries_py", _python_loop_unused)
        try:
            return decode_envelope(frame)
        except CorruptedFrameError as exc:
            return str(exc)


@needs_native_entries
@settings(max_examples=300, deadline=None)
@given(
    st.lists(messages, max_size=4),
    st.integers(0, 2**62),
    st.integers(0, 2),
    st.lists(st.tuples(st.integers(0, 100_000), st.integers(0, 255)), max_size=3),
    st.integers(-30, 8),
)
def test_appended_entries_decode_the_same_natively_and_in_python(
    batch: list[Message],
    prev_index: int,
    noops: int,
    flips: list[tuple[int, int]],
    resize: int,
) -> None:
    """The store extension's APPEND entries decoder takes what the Python loop takes, with the
    same entries, and refuses what it refuses (then the Python loop names the reason): good
    frames, and frames with bytes changed anywhere (entry heads, lengths, flags, records) or
    cut or padded."""
    bodies = put_records(batch, 0, _place, (b"\1\2\3\4", 1), lambda: 1) if batch else []
    frame = bytearray(_entries_frame(bodies, prev_index, noops))
    for at, value in flips:
        frame[at % len(frame)] = value
    frame = frame[: len(frame) + resize] if resize < 0 else frame + bytes(resize)
    python = _entries_outcome(False, bytes(frame))
    native = _entries_outcome(True, bytes(frame))
    assert native == python
    if isinstance(python, Envelope):  # taken: the native decoder alone takes it
        assert _entries_outcome(True, bytes(frame), native_only=True) == python
    if not flips and not resize:
        assert isinstance(python, Envelope)


@needs_native_entries
def test_the_native_entries_decoder_refuses_what_the_python_loop_refuses() -> None:
    """Each refusal of the Python loop is a None of the native decoder (which never reads
    past the frame), and a good frame gives the same entries and end."""
    native = lowlevel.native_append_entries
    assert native is not None
    (raw,) = put_records([Message(topic="T", body=b"x")], 0, _place, (b"\1\2\3\4", 1), lambda: 1)
    good = struct.pack(">qqBI", 5, 3, 0, len(raw)) + raw + struct.pack(">qqBI", 6, 3, 1, 0)
    want = (LogEntry(5, 3, raw), LogEntry(6, 3, b"", True))
    assert native(memoryview(good), 0, 2, 4, 2, 3, LogEntry) == (want, len(good))
    assert append_entries_py(memoryview(good), 0, 2, 4, 2, 3) == (want, len(good))
    tail = good[21 + len(raw) :]
    body = 21 + raw.index(b"\0\0\0\1x") + 4  # the message body's byte
    bad = {
        "truncated head": (good[:10], 4, 2, 3, 1),
        "truncated body": (good[: 21 + len(raw) - 1], 4, 2, 3, 1),
        "count past the frame": (good, 4, 2, 3, 3),
        "index out of order": (good, 3, 2, 3, 2),
        "term above the append's": (good, 4, 2, 2, 2),
        "term below the previous": (good, 4, 4, 5, 2),
        "flag 2": (good[:16] + b"\2" + good[17:], 4, 2, 3, 2),
        "no-op with a body": (good[:16] + b"\1" + good[17:], 4, 2, 3, 2),
        "client entry without a body": (tail[:16] + b"\0" + tail[17:], 5, 2, 3, 1),
        "body not a record": (good[:30] + b"\xff" + good[31:], 4, 2, 3, 2),
        "record CRC": (good[:body] + b"y" + good[body + 1 :], 4, 2, 3, 2),
        "index overflow": (good, 2**63 - 2, 2, 3, 2),
    }
    for name, (frame, prev_index, prev_term, term, count) in bad.items():
        view = memoryview(frame)
        assert native(view, 0, count, prev_index, prev_term, term, LogEntry) is None, name
        with pytest.raises(CorruptedFrameError):
            append_entries_py(view, 0, count, prev_index, prev_term, term)
        assert native(view, len(frame) + 1, 1, 4, 2, 3, LogEntry) is None  # pos past the end


needs_native_view = pytest.mark.skipif(
    lowlevel.native_view_records is None, reason="hanet.store._speedups is not built"
)


def _view_outcome(function: Any, bodies: list[bytes], offset: int, size: int, want: bool) -> Any:
    queues: dict[tuple[str, int], int] = {("T", 1): 7}
    starts: list[tuple[str, int]] = []

    def queue_start(topic: str, queue_id: int) -> int:
        starts.append((topic, queue_id))
        return 100 * queue_id

    try:
        got = function(bodies, offset, size, queues, queue_start, want)
    except NotARecordError as exc:
        return ("refused", exc.at)
    except ValueError:  # a file's end with less room than a blank record: no store leaves it
        return ("refused", "blank")
    if got is None:
        return None
    buf, end, placed = got
    return bytes(buf), end, placed, queues, starts


@needs_native_view
@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.one_of(messages, st.just(None)), max_size=6),
    st.integers(0, 2**40),
    st.integers(600, 5000),
    st.booleans(),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=2),
)
def test_committed_records_are_placed_the_same_natively_and_in_python(
    batch: list[Message | None],
    offset: int,
    file_size: int,
    want: bool,
    flips: list[tuple[int, int]],
) -> None:
    """The store extension's view_records makes the view's bytes as the Python loop does (the
    reference): blanks at file ends, queue offsets per (topic, queue id) from the queues met
    and the queue starts, both offsets stamped, the same places; it refuses (None) exactly the
    batches with a body that is not a record, which the reference names."""
    bodies = [
        b"" if m is None else put_records([m], 0, _place, (b"\1\2\3\4", 9), lambda: 5)[0]
        for m in batch
    ]
    for at, value in flips:
        if bodies and bodies[at % len(bodies)]:
            body = bytearray(bodies[at % len(bodies)])
            body[at % min(len(body), 120)] = value
            bodies[at % len(bodies)] = bytes(body)
    native = lowlevel.native_view_records
    assert native is not None
    python = _view_outcome(view_records_py, bodies, offset, file_size, want)
    got = _view_outcome(native, bodies, offset, file_size, want)
    if python[0] == "refused":
        assert got is None
    else:
        assert got == python
    if not flips and file_size - offset % file_size >= 8:
        assert python[0] != "refused"  # whole records are placed (natively: got == python)


@needs_native_view
def test_a_committed_body_that_is_not_a_record_is_refused_natively_and_named_in_python() -> None:
    native = lowlevel.native_view_records
    assert native is not None
    (raw,) = put_records([Message(topic="T", body=b"x")], 0, _place, (b"\1\2\3\4", 1), lambda: 1)
    topic_at = raw.index(b"\x01T") + 1  # the 1-byte topic "T" after its length
    bad = {
        "short": raw[:39],
        "size": raw + b"\0",
        "magic": raw[:4] + b"\0\0\0\0" + raw[8:],
        "topic length": raw[: topic_at - 1] + b"\xff" + raw[topic_at:],
        "topic UTF-8": raw[:topic_at] + b"\xff" + raw[topic_at + 1 :],
    }
    for name, body in bad.items():
        bodies = [raw, b"", body]
        assert _view_outcome(native, bodies, 0, 4096, True) is None, name
        assert _view_outcome(view_records_py, bodies, 0, 4096, True) == ("refused", 2), name
    # a file's end with less room than a blank record's 8 bytes: no store leaves one
    assert _view_outcome(native, [raw], 4096 - 5, 4096, False) is None
    assert _view_outcome(view_records_py, [raw], 4096 - 5, 4096, False) == ("refused", "blank")
