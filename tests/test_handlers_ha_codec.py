"""The HA transfer frame encoder: header then body, a read-only body passed on uncopied."""

from __future__ import annotations

import struct

from hanet.channel import ReadOnlyBuffer
from hanet.handlers.ha import TransferFrame, TransferFrameEncoder
from hanet.testing import EmbeddedChannel

HEADER = struct.Struct(">qi")


def test_a_read_only_body_is_passed_on_as_it_is() -> None:
    body = ReadOnlyBuffer(memoryview(b"record bytes"))
    frame = TransferFrame(4096, body)
    assert (len(frame.body), frame.end_offset, bytes(frame.data)) == (12, 4108, b"record bytes")
    ch = EmbeddedChannel(TransferFrameEncoder())
    ch.write_outbound(frame)
    assert ch.read_outbound() == HEADER.pack(4096, 12)
    assert ch.read_outbound() is body.view  # queued as its view: not copied
    assert ch.read_outbound() is None


def test_bytes_bodies_and_heartbeats() -> None:
    ch = EmbeddedChannel(TransferFrameEncoder())
    ch.write_outbound(TransferFrame(7, b"abc"), TransferFrame(10))
    assert [bytes(m) for m in ch.outbound_messages] == [
        HEADER.pack(7, 3),
        b"abc",
        HEADER.pack(10, 0),
    ]
    assert TransferFrame(10).is_heartbeat and TransferFrame(10).data == b""
