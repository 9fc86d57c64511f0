"""Floor responders for the C++ client: a name server and a broker in one process that store
nothing.

Run: ``.venv/bin/python bench/_floor.py trio|epoll|hanet`` (``bench/clients.py --floor`` starts
it).

The process listens on one port of 127.0.0.1, prints one JSON line (``address``, ``pid``), and
answers whatever connects there, a client's name server connection and its broker connection
alike: GET_ROUTEINFO_BY_TOPIC (105) with a route naming this same address as the master of
every topic's 8 queues, SEND_MESSAGE and SEND_MESSAGE_V2 (10, 310) with a stored send's answer
(``msgId``, ``queueId``, ``queueOffset``: hanet's broker's template, the offsets counted per
queue) though nothing is stored, and every other request (HEART_BEAT, UNREGISTER_CLIENT, ...)
with SUCCESS, the opaque echoed each time; a oneway request is not answered. When its stdin
closes it prints a second line (``answered_sends``, ``connections``) and exits.

What the bare two cost is the floor of any server for that client on this machine: the
wake-up, one read and one write a request. A send in a JSON header with the flag 0 is answered
from its code, opaque and queue id alone, found by their keys in the header's bytes (a regular
expression each, no decoding); anything else goes through hanet's codec (``decode_command``),
which also reads ``ROCKETMQ`` headers. Three servers, the same answers (one
:class:`Responder`):

- ``trio``: one task a connection, waiting with ``trio.lowlevel.wait_readable`` (trio's run
  loop and its one-shot ``epoll`` registration re-armed every wait), as a hanet service waits;
- ``epoll``: a plain ``select.epoll`` loop, each socket registered once (level-triggered), so
  one ``epoll_wait``, one ``recv_into`` and one ``send`` a request: what trio's pass costs set
  against ``trio``;
- ``hanet``: hanet's own framework, as the broker port is served: ``hanet.boot.serve_on``, a
  channel a connection whose pipeline is ``remoting_pipeline()`` (frame decoder and command
  decoder, encoder) and one :class:`FloorHandler` that writes each decoded request's answer and
  flushes when the read completes: what hanet's channel, pipeline and remoting codec cost a
  send, between ``trio`` and the broker.

A frame that does not decode closes its connection with the reason on stderr.
"""

from __future__ import annotations

import json
import os
import re
import select
import socket
import sys
from functools import partial
from typing import Any

import trio

from hanet.boot import serve_on
from hanet.broker import SERVER_CHANNEL_MAX_IDLE, stored_answer
from hanet.channel import ChannelInboundHandler, HandlerContext, StreamChannel
from hanet.handlers import DecoderError
from hanet.protocol import (
    MASTER_ID,
    MAX_FRAME_LENGTH,
    BrokerData,
    MessageId,
    QueueData,
    RemotingCommand,
    RemotingCommandError,
    RequestCode,
    ResponseCode,
    SendMessageResponseHeader,
    SerializeType,
    TopicRouteData,
    decode_command,
    encode_command,
    remoting_pipeline,
    route_standard_json,
)

RESPONDERS = ("trio", "epoll", "hanet")
QUEUES = 8
CLUSTER = "FloorCluster"
BROKER_NAME = "floor-broker"

_CODE = re.compile(rb'"code":(\d+)')
_FLAG = re.compile(rb'"flag":(\d+)')
_OPAQUE = re.compile(rb'"opaque":(-?\d+)')
_QUEUE_KEYS: dict[int, str] = {
    RequestCode.SEND_MESSAGE: "queueId",
    RequestCode.SEND_MESSAGE_V2: "e",
}
"""Where a send's queue id is: V2's ext fields are one letter each (``e`` the queue id)."""
_QUEUE_IDS = {
    int(code): re.compile(b'"' + key.encode() + rb'":"?(\d+)') for code, key in _QUEUE_KEYS.items()
}
_JSON = int(SerializeType.JSON)


class FloorError(Exception):
    """A frame the responder cannot read: its connection is closed."""


class Responder:
    """The answers of both servers, sans-IO: whole frames in, answers out."""

    def __init__(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        self._id_head = str(MessageId(socket.inet_aton(host), int(port), 0))[:16]
        route = TopicRouteData(
            queue_datas=(QueueData(BROKER_NAME, QUEUES, QUEUES),),
            broker_datas=(BrokerData(CLUSTER, BROKER_NAME, {MASTER_ID: address}),),
        )
        self._routes = {standard: route.encode_for(standard) for standard in (False, True)}
        self._queue_offsets: dict[int, int] = {}
        self._stored = 0
        self.sends = 0

    def answers(self, buffer: bytearray, have: int) -> tuple[list[bytes], int]:
        """The answers to the whole frames among the first ``have`` bytes of ``buffer``, and
        the bytes those frames took (a frame cut short waits for more).

        Raises:
            FloorError: a length field out of range, or a frame that does not decode.
        """
        at = 0
        out: list[bytes] = []
        while have - at >= 8:
            total = int.from_bytes(buffer[at : at + 4], "big")
            if not 4 <= total <= MAX_FRAME_LENGTH:
                raise FloorError(f"frame length {total} out of range (4..{MAX_FRAME_LENGTH})")
            if have - at - 4 < total:
                break
            kind_and_length = int.from_bytes(buffer[at + 4 : at + 8], "big")
            header_end = at + 8 + (kind_and_length & 0xFFFFFF)
            if header_end > at + 4 + total:
                raise FloorError(f"header length past its frame of {total} bytes")
            answer = None
            if kind_and_length >> 24 == _JSON:
                answer = self._send_answer(buffer, at + 8, header_end, total)
            if answer is None:
                answer = self._decoded_answer(bytes(buffer[at + 4 : at + 4 + total]))
            if answer:
                out.append(answer)
            at += 4 + total
        return out, at

    def _send_answer(self, buffer: bytearray, start: int, end: int, size: int) -> bytes | None:
        """A two-way send's answer read from its JSON header's bytes; None for any other
        request (or a header these keys are not found in)."""
        code = _CODE.search(buffer, start, end)
        if code is None or (queue_key := _QUEUE_IDS.get(int(code[1]))) is None:
            return None
        flags = _FLAG.findall(buffer, start, end)  # the ext fields' own "flag" comes first
        opaque = _OPAQUE.findall(buffer, start, end)
        queue_id = queue_key.search(buffer, start, end)
        if not flags or flags[-1] != b"0" or not opaque or queue_id is None:
            return None
        msg_id, queue_offset = self._store(int(queue_id[1]), size)
        return stored_answer(int(opaque[-1]), msg_id, int(queue_id[1]), queue_offset)

    def _store(self, queue_id: int, size: int) -> tuple[str, int]:
        """A stored send's message id and queue offset, with nothing stored."""
        self.sends += 1
        offset = self._queue_offsets.get(queue_id, 0)
        self._queue_offsets[queue_id] = offset + 1
        msg_id = f"{self._id_head}{self._stored:016X}"
        self._stored += size
        return msg_id, offset

    def _decoded_answer(self, frame: bytes) -> bytes | None:
        try:
            request = decode_command(frame)
        except RemotingCommandError as error:
            raise FloorError(str(error)) from None
        answer = self.answer(request, len(frame))
        return encode_command(answer) if isinstance(answer, RemotingCommand) else answer

    def answer(self, request: RemotingCommand, size: int) -> RemotingCommand | bytes | None:
        """The answer to a decoded request that took ``size`` bytes (a message id's offset
        moves by that much): a send's in a JSON header as :func:`~hanet.broker.stored_answer`'s
        frame, the broker's; any other as a command; None for a oneway request or an answer.

        Raises:
            FloorError: a send whose queue id is not a number.
        """
        if request.is_response or request.is_oneway:
            return None
        queue_key = _QUEUE_KEYS.get(request.code)
        if queue_key is not None:
            try:
                queue_id = int(request.fields.get(queue_key, "0"))
            except ValueError:
                raise FloorError(f"a send's queue id is {request.fields[queue_key]!r}") from None
            msg_id, queue_offset = self._store(queue_id, size)
            if request.serialize_type is SerializeType.JSON:
                return stored_answer(request.opaque, msg_id, queue_id, queue_offset)
            fields = SendMessageResponseHeader(msg_id, queue_id, queue_offset).to_fields()
            return request.response(ResponseCode.SUCCESS, None, fields)
        body = b""
        if request.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            body = self._routes[route_standard_json(request.version)]
        return request.response(ResponseCode.SUCCESS, None, None, body)


class Connection:
    """One accepted socket: reads whole frames, writes their answers."""

    def __init__(self, sock: socket.socket, responder: Responder) -> None:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = sock
        self._responder = responder
        self._buffer = bytearray(1 << 16)
        self._have = 0

    def readable(self) -> bool:
        """Reads what arrived and answers its whole frames; False once the connection is done
        (closed by the peer, or a frame that does not decode: the reason on stderr)."""
        try:
            return self._read()
        except (FloorError, OSError) as error:
            print(f"floor: connection closed: {error}", file=sys.stderr, flush=True)
            return False

    def _read(self) -> bool:
        if self._have == len(self._buffer):
            self._buffer.extend(bytes(len(self._buffer)))  # no view of it is held here
        try:
            n = self.sock.recv_into(memoryview(self._buffer)[self._have :])
        except BlockingIOError:
            return True
        if not n:
            return False
        self._have += n
        answers, used = self._responder.answers(self._buffer, self._have)
        if answers:
            self._send(answers[0] if len(answers) == 1 else b"".join(answers))
        if used:
            self._buffer[: self._have - used] = self._buffer[used : self._have]
            self._have -= used
        return True

    def _send(self, data: bytes) -> None:
        try:
            sent = self.sock.send(data)
        except BlockingIOError:
            sent = 0
        if sent < len(data):  # the socket's buffer is full: wait for the rest
            self.sock.setblocking(True)
            try:
                self.sock.sendall(data[sent:])
            finally:
                self.sock.setblocking(False)


def serve_epoll(listener: socket.socket, responder: Responder, stop_fd: int) -> int:
    """Serves until ``stop_fd`` reads end of file; the connections accepted."""
    poller = select.epoll()
    poller.register(listener.fileno(), select.EPOLLIN)
    poller.register(stop_fd, select.EPOLLIN)
    connections: dict[int, Connection] = {}
    accepted = 0
    with poller:
        while True:
            for fd, _ in poller.poll():
                if fd == stop_fd:
                    if not os.read(stop_fd, 4096):
                        for connection in connections.values():
                            connection.sock.close()
                        return accepted
                elif fd == listener.fileno():
                    try:
                        sock, _ = listener.accept()
                    except BlockingIOError:
                        continue
                    accepted += 1
                    connection = Connection(sock, responder)
                    connections[sock.fileno()] = connection
                    poller.register(sock.fileno(), select.EPOLLIN)
                elif not connections[fd].readable():
                    poller.unregister(fd)
                    connections.pop(fd).sock.close()


async def serve_trio(listener: socket.socket, responder: Responder, stop_fd: int) -> int:
    """:func:`serve_epoll` on trio: one task a connection."""
    accepted = 0

    async def serve(connection: Connection) -> None:
        with connection.sock:
            while True:
                await trio.lowlevel.wait_readable(connection.sock)
                if not connection.readable():
                    return

    async def accept(nursery: trio.Nursery) -> None:
        nonlocal accepted
        while True:
            await trio.lowlevel.wait_readable(listener)
            try:
                sock, _ = listener.accept()
            except BlockingIOError:
                continue
            accepted += 1
            nursery.start_soon(serve, Connection(sock, responder))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(accept, nursery)
        await _until_closed(stop_fd)
        nursery.cancel_scope.cancel()
    return accepted


async def _until_closed(stop_fd: int) -> None:
    """Wait until ``stop_fd`` reads end of file (what is read before it is dropped)."""
    while True:
        await trio.lowlevel.wait_readable(stop_fd)
        if not os.read(stop_fd, 4096):
            return


class FloorHandler(ChannelInboundHandler):
    """The ``hanet`` responder's one handler, after :func:`~hanet.protocol.remoting_pipeline`'s:
    each decoded request answered by the :class:`Responder` (written, not flushed; a message
    id's offset moves by a send's body size, the frame's not being known here), the answers of
    a read flushed when it completes. Sharable: one serves every connection."""

    sharable = True

    def __init__(self, responder: Responder) -> None:
        self._responder = responder
        self.connections = 0

    def channel_active(self, ctx: HandlerContext) -> None:
        self.connections += 1
        ctx.fire_channel_active()

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        answer = self._responder.answer(msg, len(msg.body))
        if answer is not None:
            ctx.write(answer)

    def channel_read_complete(self, ctx: HandlerContext) -> None:
        ctx.flush()

    def exception_caught(self, ctx: HandlerContext, exc: BaseException) -> None:
        if isinstance(exc, DecoderError | FloorError):
            print(f"floor: connection closed: {exc}", file=sys.stderr, flush=True)
            ctx.flush()  # the answers to the requests before it
            ctx.close(f"malformed frame: {exc}")
        else:
            ctx.fire_exception_caught(exc)


async def serve_hanet(listener: socket.socket, responder: Responder, stop_fd: int) -> int:
    """:func:`serve_epoll` on hanet's framework, as the broker port serves (its idle timeout
    too): :func:`~hanet.boot.serve_on`, a channel a connection whose pipeline is
    :func:`~hanet.protocol.remoting_pipeline` and a :class:`FloorHandler`."""
    handler = FloorHandler(responder)

    def initialize(channel: StreamChannel) -> None:
        for name, codec in remoting_pipeline():
            channel.pipeline.add_last(codec, name)
        channel.pipeline.add_last(handler, "floor")

    listeners = [trio.SocketListener(trio.socket.from_stdlib_socket(listener))]
    async with trio.open_nursery() as nursery:
        await nursery.start(
            partial(
                serve_on, initialize, listeners, name="floor", idle_timeout=SERVER_CHANNEL_MAX_IDLE
            )
        )
        await _until_closed(stop_fd)
        nursery.cancel_scope.cancel()
    return handler.connections


def main(kind: str) -> None:
    if kind not in RESPONDERS:
        sys.exit(f"unknown responder {kind!r}: want {' or '.join(RESPONDERS)}")
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    address = f"127.0.0.1:{listener.getsockname()[1]}"
    responder = Responder(address)
    print(json.dumps({"responder": kind, "address": address, "pid": os.getpid()}), flush=True)
    stop_fd = sys.stdin.fileno()
    with listener:
        if kind == "epoll":
            accepted = serve_epoll(listener, responder, stop_fd)
        else:
            serve = serve_hanet if kind == "hanet" else serve_trio
            accepted = trio.run(serve, listener, responder, stop_fd)
    print(json.dumps({"answered_sends": responder.sends, "connections": accepted}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "")
