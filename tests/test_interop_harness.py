"""The interop harness without a hanet server: both real clients install, start as processes,
and send RocketMQ remoting frames; a refused name server gives a clear error."""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import Any

import pytest
import trio
from interop_support import (
    alions_command,
    cpp_command,
    parse_lines,
    run_driver,
    start_driver,
)

Command = Callable[..., list[str]]
CLIENTS = {"alions": alions_command, "cpp": cpp_command}
GET_ROUTEINFO_BY_TOPIC = 105
TOPIC_NOT_EXIST = 17


@pytest.fixture(params=sorted(CLIENTS))
def command(request: pytest.FixtureRequest) -> Command:
    """Builds a driver command line for one client (the test skips when it cannot run)."""
    build = CLIENTS[request.param]
    build("produce", "127.0.0.1:1", "T")  # skips here, before the test body, if unavailable
    return build


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


class FrameRecorder:
    """A name server that knows no topic: it keeps every remoting frame it receives and
    answers each request TOPIC_NOT_EXIST (17), as RocketMQ's name server does for a topic
    without a route, so the clients fail fast instead of waiting for their timeouts."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.port = 0

    async def handle(self, stream: trio.SocketStream) -> None:
        async with stream:
            try:
                await self._serve(stream)
            except trio.BrokenResourceError:
                pass  # a client that resets its connection at close (ali-ons may)

    async def _serve(self, stream: trio.SocketStream) -> None:
        data = b""
        while chunk := await stream.receive_some():
            data += chunk
            while len(data) >= 4 and len(data) >= 4 + struct.unpack(">I", data[:4])[0]:
                end = 4 + struct.unpack(">I", data[:4])[0]
                frame, data = data[:end], data[end:]
                self.frames.append(frame)
                request = decode(frame)
                if request.get("flag", 0) & 2:  # oneway: no answer
                    continue
                await stream.send_all(answer(request, TOPIC_NOT_EXIST))


def answer(request: dict[str, Any], code: int) -> bytes:
    """A JSON-header response frame to ``request``."""
    header = json.dumps(
        {
            "code": code,
            "flag": 1,
            "language": "JAVA",
            "opaque": request.get("opaque", 0),
            "remark": "No topic route info in name server for the topic",
            "serializeTypeCurrentRPC": "JSON",
            "version": 409,
        }
    ).encode()
    return struct.pack(">II", 4 + len(header), len(header)) + header


@pytest.fixture
async def recorder() -> AsyncIterator[FrameRecorder]:
    rec = FrameRecorder()
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, rec.handle, 0, host="127.0.0.1"))
        rec.port = listeners[0].socket.getsockname()[1]
        yield rec
        nursery.cancel_scope.cancel()


def decode(frame: bytes) -> dict[str, Any]:
    """A JSON-header remoting frame: u32 length, u8 serialize type + u24 header length, header."""
    total, mark = struct.unpack(">II", frame[:8])
    assert total == len(frame) - 4
    assert mark >> 24 == 0, "serialize type 0 (JSON)"
    header_length = mark & 0xFFFFFF
    assert 8 + header_length <= len(frame)
    header: dict[str, Any] = json.loads(frame[8 : 8 + header_length])
    return header


async def test_a_refused_name_server_is_a_clear_send_error(command: Command) -> None:
    port = closed_port()
    out = await run_driver(command("produce", f"127.0.0.1:{port}", "T", count=1), timeout=15)
    assert out.returncode == 1, out.stderr
    [error] = out.events("send_error")
    assert error["body"] == "msg-0"
    # ali-ons names the refused connection; the C++ client only says it found no route
    assert "ECONNREFUSED" in error["error"] or "No route info of this topic: T" in error["error"]
    assert out.summary["sent"] == 0
    assert out.summary["failed"] == 1
    assert out.summary["closed"] is True


async def test_the_first_frame_asks_the_name_server_for_the_route(
    command: Command, recorder: FrameRecorder
) -> None:
    cmd = command("produce", f"127.0.0.1:{recorder.port}", "InteropT", count=1, timeout=5)
    out = await run_driver(cmd, timeout=15)
    assert out.summary["failed"] == 1, out
    assert recorder.frames, out.stderr
    header = decode(recorder.frames[0])
    assert header["code"] == GET_ROUTEINFO_BY_TOPIC
    assert header["extFields"]["topic"] == "InteropT"
    assert header["flag"] == 0  # a request, not oneway
    assert header["language"] in {"JAVA", "CPP"}  # ali-ons claims to be Java


async def test_a_consumer_starts_and_stops_cleanly_on_sigterm(
    command: Command, recorder: FrameRecorder
) -> None:
    cmd = command("consume", f"127.0.0.1:{recorder.port}", "InteropT", group="g", timeout=60)
    with trio.fail_after(15):
        async with start_driver(cmd) as driver:
            [started] = await driver.wait_for("started", seconds=12)
            assert started["group"] == "g"
            out = await driver.stop()
    assert out.returncode == 0, out.stderr
    assert out.summary["stoppedBy"] == "SIGTERM"
    assert out.summary["deliveries"] == 0
    assert out.summary["closed"] is True
    topics = {decode(frame)["extFields"].get("topic") for frame in recorder.frames}
    assert topics & {"InteropT", "%RETRY%g"}, recorder.frames


async def test_a_bad_command_line_exits_3(command: Command) -> None:
    cmd = command("produce", "127.0.0.1:1", "T", count=-1)
    out = await run_driver(cmd, timeout=15)
    assert out.returncode == 3
    assert not out
    assert "count" in out.stderr


def test_parse_lines_keeps_only_json_objects() -> None:
    text = '{"event": "sent", "i": 0}\nnoise\n{"event": "summ'
    assert parse_lines(text) == [{"event": "sent", "i": 0}]
