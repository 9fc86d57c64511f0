"""``decode_records``: a whole buffer of records (a pull answer's body) decoded at once, native
when built, exactly as ``decode_record`` one record at a time: the same tuples for every
layout (IPv4/IPv6 hosts, V1/V2 magic, the whole-record CRC property, empty bodies and
properties, non-ASCII topics), and the same error at the same offset for a flipped byte, a cut
buffer or garbage (hypothesis)."""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hanet.store import (
    CorruptRecordError,
    MessageRecord,
    decode_record,
    decode_records,
    encode_record,
)
from hanet.store.lowlevel import NATIVE_DECODE, native_decode_records

pytestmark = pytest.mark.skipif(native_decode_records is None, reason="the extension is not built")

V6 = b"\x20\x01" + bytes(13) + b"\x01"


def _record(i: int, topic: str = "T", **changes: Any) -> bytes:
    fields: dict[str, Any] = {
        "topic": topic,
        "body": bytes([i % 251]) * (i * 37 % 1500),
        "queue_id": i % 4,
        "queue_offset": i,
        "physical_offset": i * 1000,
        "flag": i - 3,
        "born_timestamp": 1_700_000_000_000 + i,
        "store_timestamp": 1_700_000_000_100 + i,
        "born_port": 40000 + i,
        "reconsume_times": i % 3,
        "prepared_transaction_offset": -i,
        "properties": {"TAGS": f"t{i % 3}", "KEYS": f"k{i}"} if i % 4 else {},
    }
    fields.update(changes)
    crc32 = bool(fields.pop("crc32", i % 2))
    return encode_record(MessageRecord.create(**fields, crc32=crc32), seal=crc32)


def _buffer() -> bytes:
    parts = [_record(i) for i in range(12)]
    parts.append(_record(12, born_host=V6))
    parts.append(_record(13, store_host=V6, born_host=V6))
    parts.append(_record(14, topic="T" * 200))  # V2 magic
    parts.append(_record(15, topic="Tópico-é", body=b""))
    parts.append(_record(16, properties={"TAGS": "é"}))
    return b"".join(parts)


def _reference(buf: bytes) -> list[MessageRecord] | tuple[str, int, str]:
    records = []
    pos = 0
    try:
        while pos < len(buf):
            record = decode_record(buf, pos)
            records.append(record)
            pos += record.size
    except CorruptRecordError as exc:
        return ("refused", exc.offset, str(exc))
    return records


def _outcome(buf: bytes | memoryview, native: bool) -> list[MessageRecord] | tuple[str, int, str]:
    try:
        return decode_records(buf, native=native)
    except CorruptRecordError as exc:
        return ("refused", exc.offset, str(exc))


def _agree(buf: bytes) -> list[MessageRecord] | tuple[str, int, str]:
    native = _outcome(buf, True)
    assert native == _outcome(buf, False) == _reference(buf)
    if isinstance(native, list):
        assert all(type(r) is MessageRecord for r in native)
    return native


def test_the_native_decoder_is_used_when_built() -> None:
    assert (not os.environ.get("HANET_NO_EXTENSIONS")) == NATIVE_DECODE


def test_every_layout_decodes_the_same() -> None:
    buf = _buffer()
    records = _agree(buf)
    assert isinstance(records, list) and len(records) == 17
    assert records[15].topic == "Tópico-é" and records[13].store_host == V6
    assert records[5].properties == decode_record(_record(5)).properties
    assert decode_records(memoryview(buf)[: len(_record(0))]) == records[:1]
    assert decode_records(b"") == []


@settings(max_examples=300, deadline=None)
@given(position=st.integers(0, 1 << 20), xor=st.integers(1, 255))
def test_a_flipped_byte_is_refused_alike(position: int, xor: int) -> None:
    buf = bytearray(_buffer())
    position %= len(buf)
    buf[position] ^= xor
    _agree(bytes(buf))


@settings(max_examples=200, deadline=None)
@given(cut=st.integers(0, 1 << 20), tail=st.binary(max_size=120))
def test_a_cut_buffer_or_garbage_after_it_is_refused_alike(cut: int, tail: bytes) -> None:
    buf = _buffer()
    _agree(buf[: cut % len(buf)] + tail)


@settings(max_examples=200, deadline=None)
@given(garbage=st.binary(max_size=400))
def test_garbage_is_refused_alike(garbage: bytes) -> None:
    _agree(garbage)


def test_the_native_call_checks_its_arguments() -> None:
    assert native_decode_records is not None
    with pytest.raises(TypeError):
        native_decode_records(b"", 0, dict)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="negative"):
        native_decode_records(b"", -1, MessageRecord)
    assert native_decode_records(b"abc", 10, MessageRecord) == ([], 10)
