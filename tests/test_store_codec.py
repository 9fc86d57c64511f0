"""Tests of the record codec: docs/protocol.md vector A, the real RocketMQ fixture, round-trips."""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hanet.store import (
    CorruptRecordError,
    MessageRecord,
    StopReason,
    decode_record,
    encode_record,
    offset_msg_id,
    scan_records,
)
from hanet.store.lowlevel import (
    BLANK_MAGIC,
    MAGIC_V1,
    MAGIC_V2,
    body_crc,
    decode_properties,
    encode_blank,
    encode_properties,
    format_host,
    java_string_hash,
    parse_host,
    record_size,
)

FIXTURE = Path(__file__).parent / "fixtures" / "rocketmq-store-8k" / "commitlog" / ("0" * 20)

VECTOR_A = bytes.fromhex(
    """
    00 00 00 94 da a3 20 a7 69 c8 65 ed 00 00 00 03
    00 00 00 00 00 00 00 00 00 00 00 07 00 00 00 00
    40 00 10 00 00 00 00 00 00 00 01 8b cf e5 68 00
    c0 a8 01 0a 00 00 cf db 00 00 01 8b cf e5 68 7b
    c0 a8 01 14 00 00 2a 9f 00 00 00 00 00 00 00 00
    00 00 00 00 00 00 00 0e 48 65 6c 6c 6f 20 52 6f
    63 6b 65 74 4d 51 09 54 6f 70 69 63 54 65 73 74
    00 22 54 41 47 53 01 54 61 67 41 02 4b 45 59 53
    01 6f 72 64 65 72 2d 34 32 02 57 41 49 54 01 74
    72 75 65 02
    """
)


def vector_a_record() -> MessageRecord:
    born_host, born_port = parse_host("192.168.1.10:53211")
    store_host, store_port = parse_host("192.168.1.20:10911")
    return MessageRecord.create(
        topic="TopicTest",
        body=b"Hello RocketMQ",
        queue_id=3,
        queue_offset=7,
        physical_offset=0x40001000,
        born_timestamp=1700000000000,
        born_host=born_host,
        born_port=born_port,
        store_timestamp=1700000000123,
        store_host=store_host,
        store_port=store_port,
        properties={"TAGS": "TagA", "KEYS": "order-42", "WAIT": "true"},
    )


def test_vector_a_encodes_byte_for_byte() -> None:
    record = vector_a_record()
    assert record.size == 148
    assert record.body_crc == 0x69C865ED
    assert encode_record(record) == VECTOR_A


def test_vector_a_decodes() -> None:
    record = decode_record(VECTOR_A)
    assert record == vector_a_record()
    assert record.magic == MAGIC_V1
    assert record.properties == {"TAGS": "TagA", "KEYS": "order-42", "WAIT": "true"}
    assert record.tags == "TagA"
    assert record.tags_hash == 2598919
    assert record.msg_id == "C0A8011400002A9F0000000040001000"
    assert record.born_address == "192.168.1.10:53211"
    assert record.store_address == "192.168.1.20:10911"
    assert record.crc_ok


def test_fixture_has_47_messages_then_a_blank_record() -> None:
    data = FIXTURE.read_bytes()
    assert len(data) == 8192
    scanner = scan_records(data)
    records = list(scanner)
    assert len(records) == 47
    for i, record in enumerate(records):
        assert record.physical_offset == 172 * i
        assert record.size == 172
        assert record.queue_offset == i
        assert record.topic == "abc"
        assert record.crc_ok
        assert record.store_address == "192.168.71.1:8123"
        assert record.born_address == "127.0.0.1:0"
        assert "KEYS" in record.properties
        assert encode_record(record) == data[172 * i : 172 * (i + 1)]
    assert scanner.stop is not None
    assert scanner.stop.reason is StopReason.BLANK
    assert scanner.stop.offset == 8084
    assert scanner.stop.blank_size == 108
    assert data[8084:8092] == encode_blank(108)


def test_scan_uses_base_offset_and_tracks_positions() -> None:
    data = FIXTURE.read_bytes()
    scanner = scan_records(memoryview(data), 172 * 3, base_offset=8192 * 5)
    offsets = []
    for record in scanner:
        offsets.append(scanner.record_offset)
        assert record.queue_offset >= 3
    assert offsets[0] == 8192 * 5 + 516
    assert scanner.stop is not None
    assert scanner.stop.offset == 8192 * 5 + 8084


@pytest.mark.parametrize("cut", [1, 7, 8, 50, 88, 171])
def test_scan_reports_incomplete_tail(cut: int) -> None:
    data = FIXTURE.read_bytes()
    scanner = scan_records(data, 0, 172 + cut)
    assert len(list(scanner)) == 1
    assert scanner.stop is not None
    assert scanner.stop.reason is StopReason.INCOMPLETE
    assert scanner.stop.offset == 172
    assert scanner.position == 172


def test_scan_stops_at_end_on_boundary() -> None:
    data = FIXTURE.read_bytes()
    scanner = scan_records(data, 0, 344)
    assert len(list(scanner)) == 2
    assert scanner.stop is not None
    assert scanner.stop.reason is StopReason.END


def test_scan_reports_unwritten_zeros() -> None:
    buf = VECTOR_A + bytes(100)
    scanner = scan_records(buf)
    assert len(list(scanner)) == 1
    assert scanner.stop is not None
    assert scanner.stop.reason is StopReason.UNWRITTEN
    assert scanner.stop.offset == 148


@pytest.mark.parametrize(
    ("position", "reason"),
    [
        (4, "unknown magic"),
        (0, "beyond the end of the file"),
        (100, "body CRC mismatch"),
        (0x57, "body length"),
        (0x66, "topic length"),
        (0x71, "does not match its fields"),
    ],
)
def test_flipped_bytes_are_invalid(position: int, reason: str) -> None:
    buf = bytearray(VECTOR_A * 2)
    buf[148 + position] ^= 0x40
    scanner = scan_records(buf, base_offset=1000)
    assert len(list(scanner)) == 1
    assert scanner.stop is not None
    assert scanner.stop.reason is StopReason.INVALID
    assert scanner.stop.offset == 1148
    assert reason in scanner.stop.detail
    with pytest.raises(CorruptRecordError) as info:
        decode_record(buf, 148, base_offset=1000)
    assert info.value.offset == 1148


def test_crc_check_can_be_skipped() -> None:
    buf = bytearray(VECTOR_A)
    buf[100] ^= 1
    record = decode_record(buf, check_crc=False)
    assert not record.crc_ok


def test_decode_rejects_a_blank_record() -> None:
    with pytest.raises(CorruptRecordError, match="blank"):
        decode_record(encode_blank(8) + bytes(0))
    scanner = scan_records(encode_blank(9))
    assert list(scanner) == []
    assert scanner.stop is not None
    assert scanner.stop.reason is StopReason.INVALID  # 9 bytes claimed, 8 exist


def test_blank_record_layout() -> None:
    assert body_crc(b"") == 0
    assert encode_blank(0x400) == bytes.fromhex("00000400cbd43194")
    assert BLANK_MAGIC == 0xCBD43194


def test_java_string_hash() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("TagA") == 2598919
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert java_string_hash("\U0001f600") == 31 * 0xD83D + 0xDE00


def test_properties_and_hosts() -> None:
    assert encode_properties({"A": "1", "B": ""}) == b"A\x011\x02B\x01\x02"
    assert decode_properties(b"A\x011\x02junk\x02B\x01\x02") == {"A": "1", "B": ""}
    assert parse_host("[::1]:10911") == (bytes(15) + b"\x01", 10911)
    assert format_host(bytes(15) + b"\x01", 10911) == "[::1]:10911"
    with pytest.raises(ValueError):
        parse_host("nohost")
    assert offset_msg_id(bytes(16), 1, 2) == "00" * 16 + "00000001" + "0000000000000002"


def test_v2_record_for_a_long_topic() -> None:
    record = MessageRecord.create(topic="t" * 200, body=b"x")
    assert record.magic == MAGIC_V2
    assert record.size == record_size(0, 1, 200, 0) == 88 + 1 + 200 + 2 + 2
    assert decode_record(encode_record(record)) == record


def test_encode_rejects_inconsistent_records() -> None:
    record = vector_a_record()
    with pytest.raises(ValueError, match="size"):
        encode_record(record._replace(size=1))
    with pytest.raises(ValueError, match="SYSFLAG"):
        encode_record(record._replace(sys_flag=0x10, size=record.size + 12))
    with pytest.raises(ValueError, match="magic"):
        encode_record(record._replace(magic=1))


addresses = st.one_of(st.binary(min_size=4, max_size=4), st.binary(min_size=16, max_size=16))
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
prop_text = st.text(
    alphabet=st.characters(exclude_characters="\x01\x02", exclude_categories=["Cs"]),
    max_size=20,
)


@st.composite
def records(draw: st.DrawFn) -> MessageRecord:
    """Any record: V1 or V2 topic, IPv4 or IPv6 hosts, empty or not body and properties."""
    return MessageRecord.create(
        topic=draw(st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=150)),
        body=draw(st.binary(max_size=300)),
        queue_id=draw(st.integers(0, 2**31 - 1)),
        flag=draw(i32),
        queue_offset=draw(st.integers(0, 2**63 - 1)),
        physical_offset=draw(i64),
        sys_flag=draw(st.integers(0, 0x3FF)),
        born_timestamp=draw(i64),
        born_host=draw(addresses),
        born_port=draw(i32),
        store_timestamp=draw(i64),
        store_host=draw(addresses),
        store_port=draw(i32),
        reconsume_times=draw(i32),
        prepared_transaction_offset=draw(i64),
        properties=draw(st.dictionaries(prop_text, prop_text, max_size=5)),
    )


@given(record=records())
def test_round_trip(record: MessageRecord) -> None:
    assert record.body_crc == zlib.crc32(record.body) & 0x7FFFFFFF
    assert record.magic == (MAGIC_V2 if len(record.topic.encode()) > 127 else MAGIC_V1)
    assert bool(record.sys_flag & 0x10) == (len(record.born_host) == 16)
    assert bool(record.sys_flag & 0x20) == (len(record.store_host) == 16)
    data = encode_record(record)
    assert len(data) == record.size
    decoded = decode_record(data + bytes(8))
    assert decoded == record
    assert encode_properties(decoded.properties) == decoded.properties_raw
    assert encode_record(decoded) == data
    scanner = scan_records(data * 3)
    assert list(scanner) == [record] * 3
    assert scanner.stop is not None
    assert scanner.stop.reason is StopReason.END


@given(data=st.binary(max_size=600), start=st.integers(0, 50), check=st.booleans())
def test_scanning_garbage_never_raises(data: bytes, start: int, check: bool) -> None:
    scanner = scan_records(VECTOR_A + data, start, check_crc=check, check_physical_offset=check)
    records = list(scanner)
    assert scanner.stop is not None
    assert scanner.position <= len(VECTOR_A) + len(data)
    if start == 0 and not check:
        assert records[0] == decode_record(VECTOR_A)
