"""examples/chat_server.py: its pipeline on EmbeddedChannels (one per client, sharing one
ChannelGroup, on a manual clock), then once over loopback TCP."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import trio

from hanet import ChannelGroup, serve
from hanet.testing import EmbeddedChannel

ROOT = Path(__file__).resolve().parents[1]


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "chat_server", ROOT / "examples" / "chat_server.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


chat_server: Any = load_example()


class Room:
    """A group and a chat handler, and a way to connect embedded clients to them."""

    def __init__(self, idle: float = 60.0, max_line: int = 1024) -> None:
        self.group = ChannelGroup("test")
        self.idle = idle
        self.max_line = max_line
        self.chat = chat_server.ChatHandler(self.group, idle, max_line)

    def join(self) -> EmbeddedChannel:
        return EmbeddedChannel(*chat_server.pipeline_handlers(self.chat, self.idle, self.max_line))


def said(ch: EmbeddedChannel) -> str:
    """Everything sent to this client since the last call."""
    out = b"".join(ch.outbound_messages)
    ch.outbound_messages.clear()
    return out.decode()


def test_join_broadcast_and_echo() -> None:
    room = Room()
    alice = room.join()
    assert said(alice) == f"Welcome, #{alice.id}! 0 other(s) here.\n"
    bob = room.join()
    assert said(bob) == f"Welcome, #{bob.id}! 1 other(s) here.\n"
    assert said(alice) == f"[#{bob.id}] joined\n"
    assert len(room.group) == 2

    alice.write_inbound("héllo everyone\r\nsecond line\n".encode())
    assert said(alice) == "[you] héllo everyone\n[you] second line\n"
    assert said(bob) == f"[#{alice.id}] héllo everyone\n[#{alice.id}] second line\n"


def test_bye_delivers_the_goodbye_then_closes() -> None:
    room = Room()
    alice, bob = room.join(), room.join()
    said(alice), said(bob)
    bob.write_inbound(b"bye\n")
    assert said(bob) == "Bye!\n"
    assert not bob.is_active
    assert said(alice) == f"[#{bob.id}] left\n"
    assert list(room.group) == [alice]


def test_idle_clients_are_kicked() -> None:
    room = Room(idle=30.0)
    alice, bob = room.join(), room.join()
    said(alice), said(bob)
    alice.advance_time(20.0)
    bob.advance_time(20.0)
    alice.write_inbound(b"still here\n")
    said(alice), said(bob)
    alice.advance_time(20.0)  # 20 s since alice spoke
    bob.advance_time(20.0)  # 40 s of silence from bob
    assert said(bob) == "Silent for 30 s: bye.\n"
    assert not bob.is_active and alice.is_active
    assert said(alice) == f"[#{bob.id}] left\n"
    alice.advance_time(10.0)
    assert not alice.is_active


def test_a_too_long_line_is_dropped_and_the_client_stays() -> None:
    room = Room(max_line=8)
    alice, bob = room.join(), room.join()
    said(alice), said(bob)
    alice.write_inbound(b"far too long a line\nshort\n")
    assert said(alice) == "Line too long (more than 8 bytes): dropped.\n[you] short\n"
    assert said(bob) == f"[#{alice.id}] short\n"
    assert alice.is_active


async def test_chat_over_loopback() -> None:
    group = ChannelGroup("chat")

    async def read_line(stream: trio.SocketStream, buffer: bytearray) -> str:
        with trio.fail_after(10):
            while b"\n" not in buffer:
                chunk = await stream.receive_some(4096)
                assert chunk, "closed early"
                buffer += chunk
        line, _, rest = bytes(buffer).partition(b"\n")
        buffer[:] = rest
        return line.decode()

    async with trio.open_nursery() as nursery:
        server = await nursery.start(
            functools.partial(serve, chat_server.initializer(group), 0, host="127.0.0.1")
        )
        alice = await trio.open_tcp_stream("127.0.0.1", server.port)
        a_buf = bytearray()
        assert (await read_line(alice, a_buf)).endswith("0 other(s) here.")
        bob = await trio.open_tcp_stream("127.0.0.1", server.port)
        b_buf = bytearray()
        assert (await read_line(bob, b_buf)).endswith("1 other(s) here.")
        bob_nick = (await read_line(alice, a_buf)).removesuffix(" joined")

        await alice.send_all(b"hi bob\r\n")
        assert await read_line(alice, a_buf) == "[you] hi bob"
        assert (await read_line(bob, b_buf)).endswith("] hi bob")

        await bob.send_all(b"bye\n")
        assert await read_line(bob, b_buf) == "Bye!"
        with trio.fail_after(10):
            assert await bob.receive_some(100) == b""  # the server closed bob after the goodbye
        assert await read_line(alice, a_buf) == f"{bob_nick} left"
        assert len(group) == 1

        await group.close()
        with trio.fail_after(10):
            assert await alice.receive_some(100) == b""
        await alice.aclose()
        await bob.aclose()
        nursery.cancel_scope.cancel()
