"""The lone request's read path: a socket read decoded in place, frames decoded into commands
in the frame decoder, and the same behaviour as the general path on the same inputs.

A read that reaches a zero-copy decoder as a read-only memoryview with nothing cumulated
(what a TCP channel hands it) is decoded without the cumulation's bookkeeping; any other
read (bytes, a bytearray, a read after a partial frame) takes the general path. Both must
give the same messages, errors and events in the same order, on good and bad input.
``remoting_pipeline``'s frame decoder turns frames into commands itself (one handler for
the two of the old pipeline): the same commands as ``LengthFieldBasedFrameDecoder`` followed
by ``RemotingCodec``, the same errors, and at the broker port the same answers byte for byte.
"""

from __future__ import annotations

import logging
import socket
import struct
from pathlib import Path
from typing import Any, cast

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from hanet.broker import Broker
from hanet.channel import ChannelInboundHandler, HandlerContext
from hanet.ha import BrokerConfig
from hanet.handlers import ByteToMessageDecoder, LengthFieldBasedFrameDecoder
from hanet.protocol import (
    RemotingCodec,
    RemotingCommand,
    RemotingFrameDecoder,
    encode_command,
    remoting_pipeline,
)
from hanet.testing import EmbeddedChannel

FIXTURES = Path(__file__).parent / "fixtures" / "remoting" / "clients"


class Recorder(ChannelInboundHandler):
    """Records every message (commands as their encoded bytes) and every error, in order."""

    def __init__(self) -> None:
        self.seen: list[Any] = []

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        if isinstance(msg, RemotingCommand):
            self.seen.append(("command", encode_command(msg)))
        else:
            self.seen.append(("message", bytes(msg)))

    def channel_read_complete(self, ctx: HandlerContext) -> None:
        self.seen.append("complete")

    def exception_caught(self, ctx: HandlerContext, exc: BaseException) -> None:
        self.seen.append(("error", type(exc).__name__, str(exc)))


def _in_place(piece: bytes) -> memoryview:
    return memoryview(piece).toreadonly()  # what a TCP channel hands on: the in-place path


def _general(piece: bytes) -> bytearray:
    return bytearray(piece)  # never decoded in place: the general path


def _feed(channel: EmbeddedChannel, pieces: list[bytes], kind: Any) -> None:
    for piece in pieces:
        if not channel.is_open:
            break
        channel.write_inbound(kind(piece))
    channel.finish()


def _split(stream: bytes, data: st.DataObject) -> list[bytes]:
    cuts = sorted(data.draw(st.sets(st.integers(0, len(stream)), max_size=10)))
    return [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]


@settings(max_examples=300, deadline=None)
@given(
    frames=st.lists(st.binary(max_size=30), min_size=1, max_size=8),
    fail_fast=st.booleans(),
    data=st.data(),
)
def test_reads_in_place_give_what_the_general_path_gives(
    frames: list[bytes], fail_fast: bool, data: st.DataObject
) -> None:
    """Frames, too long frames (discarded across reads) and their errors, in the same order."""
    stream = b"".join(len(f).to_bytes(1, "big") + f for f in frames)
    pieces = _split(stream, data)
    runs = []
    for kind in (_in_place, _general):
        recorder = Recorder()
        decoder = LengthFieldBasedFrameDecoder(21, 0, 1, 0, 1, fail_fast=fail_fast)
        _feed(EmbeddedChannel(decoder, recorder), pieces, kind)
        runs.append(recorder.seen)
    assert runs[0] == runs[1]


def test_a_read_of_whole_frames_skips_the_cumulation(monkeypatch: pytest.MonkeyPatch) -> None:
    fed: list[int] = []
    general = ByteToMessageDecoder._feed

    def counting(self: ByteToMessageDecoder, ctx: HandlerContext, msg: Any, out: Any) -> None:
        fed.append(len(msg))
        general(self, ctx, msg, out)

    monkeypatch.setattr(ByteToMessageDecoder, "_feed", counting)
    recorder = Recorder()
    channel = EmbeddedChannel(LengthFieldBasedFrameDecoder(64, 0, 1, 0, 1), recorder)
    channel.write_inbound(_in_place(b"\x02ab\x01c"))  # whole frames: in place
    assert fed == []
    channel.write_inbound(_in_place(b"\x03de"))  # a partial frame: cumulated
    assert channel.write_inbound(_in_place(b"f\x01g")) is False
    assert fed == [3]  # the read after a partial frame takes the general path
    channel.write_inbound(b"\x01h")  # bytes: the general path
    assert fed == [3, 2]
    messages = [entry[1] for entry in recorder.seen if entry != "complete"]
    assert messages == [b"ab", b"c", b"def", b"g", b"h"]


def _fixture_frames() -> list[bytes]:
    frames = []
    for name in ("cpp.hex", "cpp2.hex", "alions.hex"):
        for line in (FIXTURES / name).read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                frames.append(bytes.fromhex(line.strip()))
    return frames


def _two_stage(max_frame_length: int) -> list[Any]:
    return [LengthFieldBasedFrameDecoder(max_frame_length, 0, 4, 0, 4), RemotingCodec()]


def _fused(max_frame_length: int) -> list[Any]:
    return [handler for _, handler in remoting_pipeline(max_frame_length)]


FRAMES = _fixture_frames()


@settings(max_examples=60, deadline=None)
@given(
    picks=st.lists(st.integers(0, len(FRAMES) - 1), min_size=1, max_size=6),
    bad=st.sampled_from(
        [
            None,
            b"\x00\x00\x00\x06\x09\x00\x00\x02{}",  # an unknown serialize type
            b"\x00\x00\x00\x06\x00\x00\x00\x09{}",  # a header past the frame
            b"\x00\x00\x00\x05\x00\x00\x00\x01[",  # a JSON header that is not an object
            b"\x00\x01\x00\x00" + b"\x00" * 8,  # over the frame limit
        ]
    ),
    where=st.integers(0, 6),
    data=st.data(),
)
def test_the_fused_frame_decoder_is_the_two_stage_pipeline(
    picks: list[int], bad: bytes | None, where: int, data: st.DataObject
) -> None:
    """Captured frames of the real clients (and a malformed one among them), any split, as
    socket reads through the fused decoder and as bytes through the old two handlers: the
    same commands, the same error, nothing after the error."""
    frames = [FRAMES[i] for i in picks]
    if bad is not None:
        frames.insert(min(where, len(frames)), bad)
    pieces = _split(b"".join(frames), data)
    limit = 60_000
    runs = []
    for handlers, kind in ((_fused(limit), _in_place), (_two_stage(limit), bytes)):
        recorder = Recorder()
        _feed(EmbeddedChannel(*handlers, recorder), pieces, kind)
        seen = recorder.seen
        errors = [i for i, entry in enumerate(seen) if entry[0] == "error"]
        # the error ends what counts: the old pipeline went on handing the frames after a
        # bad command to a connection that was closing; the fused decoder drops them
        runs.append(seen[: errors[0] + 1] if errors else seen)
    commands = [entry for entry in runs[0] if entry[0] == "command"]
    assert runs[0] == runs[1]
    if bad is None:
        assert len(commands) == len(frames)
        assert not any(entry[0] == "error" for entry in runs[0])
    else:
        assert [entry for entry in runs[0] if entry != "complete"][-1][0] == "error"


def test_a_malformed_frame_after_a_command_in_one_read() -> None:
    bad = b"\x00\x00\x00\x06\x09\x00\x00\x02{}"
    for kind in (_in_place, _general):
        recorder = Recorder()
        channel = EmbeddedChannel(*_fused(1 << 20), recorder)
        channel.write_inbound(kind(FRAMES[1] + bad + FRAMES[2]))
        kinds = [entry[0] for entry in recorder.seen if entry != "complete"]
        assert kinds == ["command", "error"]
        assert recorder.seen[-2][1].startswith("RemotingCommandError")
        assert "unknown serialize type 9" in recorder.seen[-2][2]


def _cpp_send(opaque: int) -> bytes:
    """The C++ client's SEND_MESSAGE (cpp.hex's) with its own opaque, 1 KiB body."""
    for frame in FRAMES:
        header = frame[8 : 8 + int.from_bytes(frame[4:8], "big")]
        if b'"code":10,' in header:
            before, _, rest = header.partition(b'"opaque":')
            _, _, after = rest.partition(b",")
            header = before + b'"opaque":' + str(opaque).encode() + b"," + after
            body = b"m" * 1024
            return struct.pack(">II", 4 + len(header) + len(body), len(header)) + header + body
    raise AssertionError("no SEND_MESSAGE in the fixtures")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def _answers(root: Path, port: int, reads: list[bytes], kind: Any) -> tuple[bytes, bool]:
    config = BrokerConfig(
        store_path_root_dir=root,
        listen_host="127.0.0.1",
        listen_port=port,
        ha_listen_port=0,
        mapped_file_size_commit_log=1 << 20,  # reserved whole on the disk
    )
    async with trio.open_nursery() as nursery:
        broker = Broker(config)
        await nursery.start(broker.run)
        channel = EmbeddedChannel()
        broker.port.initialize(cast(Any, channel))
        out = b""
        for read in reads:
            if not channel.is_open:
                break
            channel.write_inbound(kind(read))
            while (chunk := channel.read_outbound()) is not None:
                out += bytes(chunk)
        open_after = channel.is_open
        nursery.cancel_scope.cancel()
    return out, open_after


async def test_lone_sends_are_answered_byte_for_byte_as_by_the_general_path(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The C++ client's lone sends (one frame a read), then a read of three and a malformed
    frame: the same answers, byte for byte, both ways; the bad frame closes the connection
    with its reason logged."""
    reads = [_cpp_send(n) for n in range(1, 6)]
    reads.append(_cpp_send(6) + _cpp_send(7) + _cpp_send(8)[:100])
    reads.append(_cpp_send(8)[100:])
    reads.append(_cpp_send(9) + b"\x00\x00\x00\x06\x09\x00\x00\x02{}")
    reads.append(_cpp_send(10))
    port = _free_port()
    caplog.set_level(logging.WARNING, logger="hanet")
    in_place, in_place_open = await _answers(tmp_path / "a", port, reads, _in_place)
    logged = [r.getMessage() for r in caplog.records if "unknown serialize type" in r.getMessage()]
    assert logged and "closing" in logged[0]
    general, general_open = await _answers(tmp_path / "b", port, reads, _general)
    assert in_place == general
    assert not in_place_open and not general_open
    opaques = []
    data = in_place
    while data:
        length = int.from_bytes(data[:4], "big")
        header = data[8 : 8 + int.from_bytes(data[5:8], "big")]
        assert b'"code":0' in header
        opaques.append(int(header.split(b'"opaque":')[1].split(b",")[0].rstrip(b"}")))
        data = data[4 + length :]
    assert opaques == list(range(1, 10))


def test_the_remoting_pipeline_is_the_fused_decoder_and_the_encoder() -> None:
    names = [name for name, _ in remoting_pipeline()]
    assert names == ["frame-decoder", "codec"]
    decoder = remoting_pipeline(4096)[0][1]
    assert isinstance(decoder, RemotingFrameDecoder)
    assert decoder.max_frame_length == 4096
