"""StringDecoder and StringEncoder: bytes to ``str`` and back (Netty's semantics)."""

from __future__ import annotations

import codecs
from typing import Any

from hanet.channel import HandlerContext

from ._message_to_message import MessageToMessageDecoder, MessageToMessageEncoder

__all__ = ["StringDecoder", "StringEncoder"]

_BytesLike = bytes | bytearray | memoryview


class _Charset:
    """A sharable handler's ``encoding`` (its canonical name; :class:`LookupError` for an
    unknown one) and ``errors`` (what ``str.encode`` / ``bytes.decode`` take)."""

    sharable = True

    def __init__(self, encoding: str = "utf-8", errors: str = "replace") -> None:
        super().__init__()
        self.encoding = codecs.lookup(encoding).name
        self.errors = errors


class StringDecoder(_Charset, MessageToMessageDecoder[_BytesLike]):
    """Decode each bytes-like message into a ``str`` (Netty's ``StringDecoder``); anything else
    passes through. Sharable.

    Each message is decoded on its own, so put a frame decoder (such as
    :class:`LineBasedFrameDecoder`) before it: a multi-byte character split across two reads
    would not decode. Bad input: bytes invalid in ``encoding`` become U+FFFD, as in Netty
    (Java replaces malformed input; ``errors="replace"``); with ``errors="strict"`` they are a
    :class:`DecoderError` instead.

    Raises:
        LookupError: for an unknown encoding.
    """

    def decode(self, ctx: HandlerContext, msg: _BytesLike, out: list[Any]) -> None:
        out.append(str(msg, self.encoding, self.errors))


class StringEncoder(_Charset, MessageToMessageEncoder[str]):
    """Encode each ``str`` written into ``bytes`` (Netty's ``StringEncoder``); anything else
    passes through. Sharable.

    As in Netty, an empty string produces nothing, so its write fails with
    :class:`EncoderError` ``StringEncoder must produce at least one message.`` (Netty's
    ``MessageToMessageEncoder`` rule). A character ``encoding`` cannot represent becomes ``?``,
    as Java substitutes it (``errors="replace"``); with ``errors="strict"`` it fails the write
    with ``EncoderError``.

    Raises:
        LookupError: for an unknown encoding.
    """

    def encode(self, ctx: HandlerContext, msg: str, out: list[Any]) -> None:
        if msg:
            out.append(msg.encode(self.encoding, self.errors))
