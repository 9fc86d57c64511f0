"""The leader's records and the view's re-stamping, packed and read at fixed places: the same
bytes and fields as the store's own record codec (the reference), for any message; the wire
check of an appended record, native scan or Python, refuses what the reference refuses."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hanet.dledger import (
    ENTRY_HEADER_SIZE,
    AppendRequest,
    Bodies,
    Envelope,
    LogEntry,
    decode_envelope,
    encode_envelope,
    put_record,
    put_records,
    record_place,
    stamp_into,
)
from hanet.handlers import CorruptedFrameError
from hanet.store import CorruptRecordError, Message, decode_record, encode_record, lowlevel
from hanet.store.lowlevel import SYS_FLAG_KNOWN_BITS, native_scan, scan_index_py

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


@settings(max_examples=200, deadline=None)
@given(st.lists(messages, min_size=1, max_size=4), hosts, st.integers(0, 2**40))
def test_put_records_are_the_reference_encoding(
    batch: list[Message], store: bytes, end: int
) -> None:
    clock = iter(range(1_700_000_000_000, 1_700_000_000_100))
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
