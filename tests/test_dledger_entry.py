"""DLedger's entry and index entry formats: layout, round trips, typed errors."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hanet.dledger import (
    BLANK_MAGIC,
    ENTRY_HEADER_SIZE,
    INDEX_ENTRY_SIZE,
    BodyCrcError,
    DLedgerEntry,
    DLedgerError,
    EntryFormatError,
    IndexEntry,
    TruncatedEntryError,
    decode_entry,
    decode_index_entry,
    encode_blank,
    encode_entry,
    encode_index_entry,
    index_entry_offset,
    pack_entry,
)
from hanet.errors import HanetError

I64 = st.integers(0, 2**63 - 1)
I32 = st.integers(-(2**31), 2**31 - 1)


def test_the_layout_is_dledgers() -> None:
    entry = DLedgerEntry(index=7, term=3, body=b"hello", pos=4096, chain_crc=-5)
    raw = encode_entry(entry)
    assert ENTRY_HEADER_SIZE == 48 and INDEX_ENTRY_SIZE == 32
    assert len(raw) == 48 + 5 == entry.size
    fields = struct.unpack(">iiqqqiiii", raw[:48])
    assert fields == (1, 53, 7, 3, 4096, 0, -5, zlib.crc32(b"hello") & 0x7FFFFFFF, 5)
    assert raw[48:] == b"hello"


@given(
    index=I64,
    term=I64,
    pos=I64,
    body=st.binary(max_size=300),
    channel=I32,
    chain_crc=I32,
    prefix=st.binary(max_size=20),
)
def test_entries_round_trip(
    index: int, term: int, pos: int, body: bytes, channel: int, chain_crc: int, prefix: bytes
) -> None:
    entry = DLedgerEntry(index, term, body, pos=pos, channel=channel, chain_crc=chain_crc)
    raw = prefix + encode_entry(entry) + b"trailing"
    decoded = decode_entry(raw, len(prefix))
    assert decoded == DLedgerEntry(
        index,
        term,
        body,
        pos=pos,
        channel=channel,
        chain_crc=chain_crc,
        body_crc=zlib.crc32(body) & 0x7FFFFFFF,
    )
    assert encode_entry(decoded) == encode_entry(entry)


@given(pos=I64, size=st.integers(48, 2**31 - 1), index=I64, term=I64)
def test_index_entries_round_trip(pos: int, size: int, index: int, term: int) -> None:
    entry = IndexEntry(pos=pos, size=size, index=index, term=term)
    raw = encode_index_entry(entry)
    assert len(raw) == 32
    assert decode_index_entry(b"\0" * 32 + raw, 32) == entry


def test_index_entries_live_at_index_times_32() -> None:
    assert index_entry_offset(0) == 0 and index_entry_offset(10) == 320
    with pytest.raises(EntryFormatError):
        index_entry_offset(-1)


def test_a_zero_body_crc_from_another_writer_is_accepted() -> None:
    raw = bytearray(encode_entry(DLedgerEntry(1, 1, b"body", body_crc=0)))
    assert decode_entry(raw).body_crc == 0


def test_a_wrong_body_crc_is_a_typed_error() -> None:
    raw = bytearray(encode_entry(DLedgerEntry(1, 1, b"body")))
    raw[-1] ^= 0xFF
    with pytest.raises(BodyCrcError) as caught:
        decode_entry(raw)
    assert isinstance(caught.value, DLedgerError) and isinstance(caught.value, HanetError)
    assert decode_entry(raw, check_crc=False).body == bytes(raw[48:])


@pytest.mark.parametrize("cut", [0, 4, 47, 48, 52])
def test_a_truncated_entry_says_how_many_bytes_it_needs(cut: int) -> None:
    raw = encode_entry(DLedgerEntry(1, 1, b"12345"))
    with pytest.raises(TruncatedEntryError) as caught:
        decode_entry(raw[:cut])
    assert caught.value.available == cut


def _patched(field: int, value: int) -> bytes:
    raw = encode_entry(DLedgerEntry(1, 1, b"abc"))
    fields = list(struct.unpack(">iiqqqiiii", raw[:48]))
    fields[field] = value
    return struct.pack(">iiqqqiiii", *fields) + raw[48:]


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        (0, 2, "magic 2"),
        (0, BLANK_MAGIC, "a blank"),
        (1, 40, "below the 48-byte header"),
        (8, 2, "body length 2"),
        (2, -1, "negative index"),
        (3, -1, "negative term"),
        (4, -1, "negative pos"),
    ],
)
def test_malformed_entries_are_refused(field: int, value: int, reason: str) -> None:
    with pytest.raises(EntryFormatError, match=reason):
        decode_entry(_patched(field, value))


def test_encoding_refuses_fields_that_do_not_fit() -> None:
    with pytest.raises(EntryFormatError, match="index"):
        encode_entry(DLedgerEntry(-1, 1, b""))
    with pytest.raises(EntryFormatError, match="term"):
        encode_entry(DLedgerEntry(1, 2**63, b""))
    with pytest.raises(EntryFormatError, match="channel"):
        encode_entry(DLedgerEntry(1, 1, b"", channel=2**31))
    with pytest.raises(EntryFormatError, match="magic"):
        encode_index_entry(IndexEntry(0, 48, 0, 0, magic=7))


def test_blanks() -> None:
    assert encode_blank(100) == struct.pack(">ii", -1, 100)
    with pytest.raises(EntryFormatError):
        encode_blank(4)


def test_malformed_index_entries_are_refused() -> None:
    good = encode_index_entry(IndexEntry(pos=0, size=60, index=0, term=1))
    with pytest.raises(TruncatedEntryError):
        decode_index_entry(good[:31])
    with pytest.raises(EntryFormatError, match="index magic"):
        decode_index_entry(struct.pack(">iqiqq", 3, 0, 60, 0, 1))
    with pytest.raises(EntryFormatError, match="below"):
        decode_index_entry(struct.pack(">iqiqq", 1, 0, 47, 0, 1))
    with pytest.raises(EntryFormatError, match="negative term"):
        decode_index_entry(struct.pack(">iqiqq", 1, 0, 60, 0, -1))


@given(
    st.integers(0, 2**63 - 1),
    st.integers(0, 2**63 - 1),
    st.integers(0, 2**63 - 1),
    st.binary(min_size=1, max_size=64),
)
def test_packing_an_entry_for_a_batch_is_its_encoding(
    index: int, term: int, pos: int, body: bytes
) -> None:
    data, index_data = bytearray(b"x"), bytearray(b"y")
    pack_entry(data, index_data, index, term, pos, body)
    assert bytes(data[1:]) == encode_entry(DLedgerEntry(index, term, body, pos=pos))
    size = ENTRY_HEADER_SIZE + len(body)
    assert bytes(index_data[1:]) == encode_index_entry(IndexEntry(pos, size, index, term))


@pytest.mark.parametrize("bad", [(-1, 0, 0), (0, -1, 0), (0, 0, -1), (0, 2**63, 0)])
def test_packing_an_entry_refuses_what_encoding_refuses(bad: tuple[int, int, int]) -> None:
    with pytest.raises(EntryFormatError):
        pack_entry(bytearray(), bytearray(), *bad, b"body")
