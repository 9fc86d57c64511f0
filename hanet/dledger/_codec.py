"""The peer wire format of DLedger nodes: the six Raft messages, sans-IO, and their pipeline
handler.

Each frame follows a u32 length prefix (``LengthFieldBasedFrameDecoder(max, 0, 4, 0, 4)`` and
``LengthFieldPrepender(4)``). Big-endian; ``str`` = u16 length + UTF-8, ``blob`` = u32 length
+ bytes::

    frame = u8 kind | str source | str target | payload
    1 PRE_VOTE      i64 term | str candidate | i64 last_log_index | i64 last_log_term
    2 PRE_VOTE_OK   i64 term | i64 for_term | u8 granted
    3 VOTE          i64 term | str candidate | i64 last_log_index | i64 last_log_term
    4 VOTE_OK       i64 term | u8 granted
    5 APPEND        i64 term | str leader | i64 prev_index | i64 prev_term | i64 commit_index
                    | u32 count | count x (i64 index | i64 term | u8 noop | blob body)
    6 APPEND_OK     i64 term | u8 success | i64 prev_index | i64 match_index
                    | i64 conflict_term (-1: none) | i64 conflict_index
    7 HELLO         str broker_address (the sender's broker port; first on a connection,
                    so followers can name the leader's broker port in NOT_LEADER answers)

A frame that does not decode raises :class:`hanet.handlers.CorruptedFrameError` (the connection
closes), and so does an APPEND no log can take: ``prev_index`` below 0, ``prev_term`` outside
``[0, term]``, entry indexes not following ``prev_index``, entry terms falling (below
``prev_term`` or the entry before) or above the append's term, a no-op with a body or a client
entry whose body is not exactly one RocketMQ record (as recovery checks; the body CRC is checked
where it is applied). Frames over the maximum length close it with
:class:`hanet.handlers.TooLongFrameError`. Appends are bounded by ``RaftConfig.max_batch`` entries
and ``RaftConfig.max_batch_bytes`` (at most half the frame limit: a node caps it there), each
entry by the broker's message limit; an append of one entry is sent whatever its size.

An APPEND's entries are decoded and checked in one call by the store extension's
``append_entries`` when it is built; :func:`append_entries_py` is its reference and names the
reason of every refusal (the native decoder only says no, and the Python loop runs again).
"""

from __future__ import annotations

import struct
from typing import Any

import attrs

from hanet.channel import ChannelDuplexHandler, ChannelHandler, HandlerContext, WriteFuture
from hanet.handlers import (
    CorruptedFrameError,
    EncoderError,
    LengthFieldBasedFrameDecoder,
    LengthFieldPrepender,
)
from hanet.store import CorruptRecordError, decode_record, lowlevel

from ._log import LogEntry
from ._messages import (
    AppendRequest,
    AppendResponse,
    Envelope,
    PreVoteRequest,
    PreVoteResponse,
    VoteRequest,
    VoteResponse,
)

__all__ = [
    "DEFAULT_MAX_PEER_FRAME",
    "Hello",
    "PeerCodec",
    "decode_envelope",
    "encode_envelope",
    "peer_frame_handlers",
]

DEFAULT_MAX_PEER_FRAME = 256 * 1024 * 1024
"""Largest peer frame accepted (twice the default ``RaftConfig.max_batch_bytes``)."""

_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_VOTE = struct.Struct(">qq")  # last_log_index, last_log_term
_Q = struct.Struct(">q")
_PRE_OK = struct.Struct(">qqB")
_VOTE_OK = struct.Struct(">qB")
_APPEND = struct.Struct(">qqq")  # prev_index, prev_term, commit_index
_ENTRY_HEAD = struct.Struct(">qqBI")  # index, term, noop, body length
_APPEND_OK = struct.Struct(">qBqqqq")
_NATIVE_ENTRIES = lowlevel.native_append_entries if lowlevel.NATIVE_SCANNER else None
"""The store extension's APPEND entries decoder when the extension is in use, else None
(:func:`append_entries_py` alone)."""


@attrs.frozen
class Hello:
    """The first frame on a peer connection: who is calling and where its broker port is."""

    source: str
    target: str
    broker_address: str


_KINDS: dict[type, int] = {
    PreVoteRequest: 1,
    PreVoteResponse: 2,
    VoteRequest: 3,
    VoteResponse: 4,
    AppendRequest: 5,
    AppendResponse: 6,
}


def _str(out: bytearray, text: str) -> None:
    raw = text.encode("utf-8")
    if len(raw) > 0xFFFF:
        raise EncoderError(f"a string of {len(raw)} bytes")
    out += _U16.pack(len(raw))
    out += raw


def encode_envelope(envelope: Envelope | Hello) -> bytearray:
    """The frame (without its length prefix) of ``envelope``.

    Raises:
        EncoderError: a field does not fit.
    """
    try:
        return _encode(envelope)
    except struct.error as exc:
        raise EncoderError(f"a field does not fit: {exc}") from exc


def _encode(envelope: Envelope | Hello) -> bytearray:
    if isinstance(envelope, Hello):
        out = bytearray(_U8.pack(7))
        _str(out, envelope.source)
        _str(out, envelope.target)
        _str(out, envelope.broker_address)
        return out
    m = envelope.message
    out = bytearray(_U8.pack(_KINDS[type(m)]))
    _str(out, envelope.source)
    _str(out, envelope.target)
    if isinstance(m, PreVoteRequest | VoteRequest):
        out += _Q.pack(m.term)
        _str(out, m.candidate)
        out += _VOTE.pack(m.last_log_index, m.last_log_term)
    elif isinstance(m, PreVoteResponse):
        out += _PRE_OK.pack(m.term, m.for_term, m.granted)
    elif isinstance(m, VoteResponse):
        out += _VOTE_OK.pack(m.term, m.granted)
    elif isinstance(m, AppendRequest):
        out += _Q.pack(m.term)
        _str(out, m.leader)
        out += _APPEND.pack(m.prev_index, m.prev_term, m.commit_index)
        out += _U32.pack(len(m.entries))
        pack = _ENTRY_HEAD.pack
        for e in m.entries:
            out += pack(e.index, e.term, e.noop, len(e.body))
            out += e.body
    else:
        conflict = -1 if m.conflict_term is None else m.conflict_term
        out += _APPEND_OK.pack(
            m.term, m.success, m.prev_index, m.match_index, conflict, m.conflict_index
        )
    return out


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes | bytearray | memoryview) -> None:
        self.buf = memoryview(buf)
        self.pos = 0

    def unpack(self, fmt: struct.Struct) -> tuple[Any, ...]:
        end = self.pos + fmt.size
        if end > len(self.buf):
            raise CorruptedFrameError(f"peer frame of {len(self.buf)} bytes is truncated")
        values = fmt.unpack_from(self.buf, self.pos)
        self.pos = end
        return values

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.buf):
            raise CorruptedFrameError(f"peer frame of {len(self.buf)} bytes is truncated")
        data = self.buf[self.pos : end].tobytes()
        self.pos = end
        return data

    def str(self) -> str:
        (n,) = self.unpack(_U16)
        try:
            return self.take(n).decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptedFrameError("a peer frame string is not UTF-8") from None

    def flag(self, value: int) -> bool:
        if value not in (0, 1):
            raise CorruptedFrameError(f"a peer frame flag is {value}")
        return bool(value)


def _check_entry(entry: LogEntry, index: int, last_term: int, term: int) -> None:
    """Refuse an appended entry a log cannot take (it would fail the node, not the frame)."""
    if entry.index != index:
        raise CorruptedFrameError(f"an appended entry of index {entry.index}, expected {index}")
    if not last_term <= entry.term <= term:
        raise CorruptedFrameError(
            f"an appended entry of term {entry.term} after term {last_term} in term {term}"
        )
    if entry.noop == bool(entry.body):
        raise CorruptedFrameError("an appended no-op with a body or client entry without one")
    if entry.body:
        # what recovery would cut at the next start (it checks the record, body CRC included)
        # is refused now, at the wire: the store's scan (native when built) validates it
        # as decode_record does; only a refusal decodes it again, for the reason
        found = lowlevel.scan_index(entry.body)
        if found.records == 1 and found.position == len(entry.body):
            return
        try:
            record = decode_record(entry.body)
        except CorruptRecordError as exc:
            raise CorruptedFrameError(f"an appended entry is not a record: {exc}") from None
        if record.size != len(entry.body):
            raise CorruptedFrameError(
                f"an appended entry of {len(entry.body)} bytes holds a record of {record.size}"
            )


def append_entries_py(
    buf: memoryview, pos: int, count: int, prev_index: int, prev_term: int, term: int
) -> tuple[tuple[LogEntry, ...], int]:
    """The ``count`` entries of an APPEND frame from ``buf[pos:]`` (after ``prev_index`` of
    ``prev_term``, in ``term``) and where they end: the reference of the store extension's
    ``append_entries``, which takes the same frames and refuses the same (returning None: this
    then names the reason).

    Raises:
        CorruptedFrameError: the entries do not decode or no log can take them.
    """
    entries = []
    last_term = prev_term
    size = len(buf)
    head, unpack = _ENTRY_HEAD.size, _ENTRY_HEAD.unpack_from
    for k in range(count):
        if pos + head > size:
            raise CorruptedFrameError(f"peer frame of {size} bytes is truncated")
        index, entry_term, noop, length = unpack(buf, pos)
        pos += head
        if pos + length > size:
            raise CorruptedFrameError(f"peer frame of {size} bytes is truncated")
        if noop not in (0, 1):  # r.flag(noop), inlined: once per entry
            raise CorruptedFrameError(f"a peer frame flag is {noop}")
        entry = LogEntry(index, entry_term, buf[pos : pos + length].tobytes(), noop == 1)
        pos += length
        _check_entry(entry, prev_index + 1 + k, last_term, term)
        last_term = entry_term
        entries.append(entry)
    return tuple(entries), pos


def decode_envelope(frame: bytes | bytearray | memoryview) -> Envelope | Hello:
    """Decode a frame (after the length prefix).

    Raises:
        CorruptedFrameError: it is not a well-formed peer frame.
    """
    r = _Reader(frame)
    (kind,) = r.unpack(_U8)
    source = r.str()
    target = r.str()
    message: Any
    if kind in (1, 3):
        (term,) = r.unpack(_Q)
        candidate = r.str()
        last_index, last_term = r.unpack(_VOTE)
        cls = PreVoteRequest if kind == 1 else VoteRequest
        message = cls(term, candidate, last_index, last_term)
    elif kind == 2:
        term, for_term, granted = r.unpack(_PRE_OK)
        message = PreVoteResponse(term, for_term, r.flag(granted))
    elif kind == 4:
        term, granted = r.unpack(_VOTE_OK)
        message = VoteResponse(term, r.flag(granted))
    elif kind == 5:
        (term,) = r.unpack(_Q)
        leader = r.str()
        prev_index, prev_term, commit = r.unpack(_APPEND)
        (count,) = r.unpack(_U32)
        if prev_index < 0 or not 0 <= prev_term <= term:
            raise CorruptedFrameError(
                f"an append after index {prev_index} of term {prev_term} in term {term}"
            )
        got = None
        if _NATIVE_ENTRIES is not None:
            got = _NATIVE_ENTRIES(r.buf, r.pos, count, prev_index, prev_term, term, LogEntry)
        if got is None:  # refused natively (the reference names why) or no extension
            got = append_entries_py(r.buf, r.pos, count, prev_index, prev_term, term)
        entries, r.pos = got
        message = AppendRequest(term, leader, prev_index, prev_term, entries, commit)
    elif kind == 6:
        term, success, prev_index, match, conflict, conflict_index = r.unpack(_APPEND_OK)
        message = AppendResponse(
            term,
            r.flag(success),
            prev_index,
            match,
            None if conflict < 0 else conflict,
            conflict_index,
        )
    elif kind == 7:
        message = r.str()
    else:
        raise CorruptedFrameError(f"unknown peer frame kind {kind}")
    if r.pos != len(r.buf):
        raise CorruptedFrameError(f"{len(r.buf) - r.pos} trailing bytes in a peer frame")
    if kind == 7:
        return Hello(source, target, message)
    return Envelope(source, target, message)


class PeerCodec(ChannelDuplexHandler):
    """Frames in -> :class:`~hanet.dledger.Envelope` (or :class:`Hello`); out the other way.
    Sharable."""

    sharable = True

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        if isinstance(msg, bytes | bytearray | memoryview):
            ctx.fire_channel_read(decode_envelope(msg))
        else:
            ctx.fire_channel_read(msg)

    def write(self, ctx: HandlerContext, msg: Any, future: WriteFuture) -> None:
        if isinstance(msg, Envelope | Hello):
            ctx.write(encode_envelope(msg), future)
        else:
            ctx.write(msg, future)


def peer_frame_handlers(
    max_frame_length: int = DEFAULT_MAX_PEER_FRAME,
) -> list[tuple[str, ChannelHandler]]:
    """The named handlers of a peer connection's pipeline, in order."""
    return [
        ("frame-decoder", LengthFieldBasedFrameDecoder(max_frame_length, 0, 4, 0, 4)),
        ("frame-encoder", LengthFieldPrepender(4)),
        ("codec", PeerCodec()),
    ]
