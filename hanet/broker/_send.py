"""The broker port's sends: SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE
(320), checked before anything is stored, stored by the broker mode's backend and answered
with the offset message id, the queue id and the queue offset (see :mod:`hanet.broker._port`
for the rules)."""

from __future__ import annotations

import functools
import logging
import operator
import struct
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import trio

from hanet.channel import HandlerContext
from hanet.errors import HanetError
from hanet.protocol import (
    FLAG_ONEWAY,
    PERM_WRITE,
    MessageProperty,
    RemotingCommand,
    RemotingHeaderError,
    RequestCode,
    ResponseCode,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
    SerializeType,
    decode_batch,
    encode_header,
    string_to_properties,
)
from hanet.store import Message, PutResult, PutStatus, StoreError
from hanet.store.lowlevel import (
    MAX_PROPERTIES_SIZE,
    encode_properties,
    new_message,
    topic_problem,
)

from ._connection import BrokerConnection, WaitingSend, connection_of
from ._retry import DLQ_QUEUE_NUMS, redirect_retry_send
from ._topics import TopicNotExist, TopicTableFull

if TYPE_CHECKING:
    from ._port import BrokerPort

__all__ = ["NOT_ALLOWED_SEND_TOPICS", "Sends", "send_answer", "stored_answer"]

log = logging.getLogger("hanet.broker")

NOT_ALLOWED_SEND_TOPICS = frozenset({"SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_OP_HALF_TOPIC"})
"""System topics no producer may send to (RocketMQ's ``NOT_ALLOWED_SEND_TOPIC_SET``)."""

_MAX_LEGAL_TOPICS = 10_000
_CLUSTER_PAIR = len(MessageProperty.CLUSTER) + 2  # name, \x01, value, \x02
_SIZE_UNKNOWN = MAX_PROPERTIES_SIZE + 1
_HOST_FLAGS = 0x10 | 0x20  # SYSFLAG bits the store sets from the addresses
RETRY_TOPIC_PREFIX = "%RETRY%"

_STATUS_CODES = {
    PutStatus.PUT_OK: ResponseCode.SUCCESS,
    PutStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    PutStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
    PutStatus.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
    PutStatus.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
}
_STORED = frozenset(
    {
        PutStatus.PUT_OK,
        PutStatus.FLUSH_DISK_TIMEOUT,
        PutStatus.FLUSH_SLAVE_TIMEOUT,
        PutStatus.SLAVE_NOT_AVAILABLE,
    }
)
BUSY_REMARK = "[PC_SYNCHRONIZED]broker busy, start flow control for a while"
"""RocketMQ 4.9.8's remark for OS_PAGECACHE_BUSY (a SYSTEM_ERROR its clients retry)."""
_REMARKS = {
    PutStatus.CREATE_MAPPED_FILE_FAILED: "create mapped file failed, server is busy or broken",
    PutStatus.OS_PAGE_CACHE_BUSY: BUSY_REMARK,
    PutStatus.SERVICE_NOT_AVAILABLE: (
        "service not available now: the broker's disk may be full, the broker a slave or "
        "shutting down"
    ),
}


_MSG_ID, _QUEUE_ID, _QUEUE_OFFSET = SendMessageResponseHeader("", 0, 0).to_fields()


def _stored_template() -> bytes:
    """The JSON header of a stored send's answer (:func:`send_answer` of one PUT_OK result
    to a JSON request) as a ``bytes %`` template: ``m`` the message id, ``q`` the queue id,
    ``o`` the queue offset, ``p`` the opaque. Encoded once by the codec itself, with markers
    where the values go, so its bytes are the codec's."""
    markers = {"m": "\x11m", "q": "\x11q", "o": "\x11o"}
    request = RemotingCommand(RequestCode.SEND_MESSAGE_V2, opaque=0x7EADBEEF)
    fields = {
        _MSG_ID: markers["m"],
        _QUEUE_ID: markers["q"],
        _QUEUE_OFFSET: markers["o"],
        MessageProperty.MSG_REGION: "DefaultRegion",
        MessageProperty.TRACE_ON: "true",
    }
    head = encode_header(request.response(ResponseCode.SUCCESS, None, fields))
    header = head[8:].replace(b"%", b"%%")
    for key, marker in markers.items():
        escaped = marker.replace("\x11", "\\u0011").encode()
        if header.count(escaped) != 1:  # pragma: no cover - the codec escapes control characters
            raise RuntimeError(f"no template of the send answer from {header!r}")
        header = header.replace(escaped, b"%(" + key.encode() + b")s")
    opaque = b'"opaque":%d' % 0x7EADBEEF
    if header.count(opaque) != 1:  # pragma: no cover - the codec writes the opaque once
        raise RuntimeError(f"no template of the send answer from {header!r}")
    return header.replace(opaque, b'"opaque":%(p)d')


def _positional(template: bytes) -> tuple[bytes, Callable[[tuple[Any, ...]], tuple[Any, ...]]]:
    """``template`` with its named fields made positional (``bytes %`` with a tuple, the
    queue id, queue offset and opaque as ``%d``), and what orders ``(m, q, o, p)`` values
    for it."""
    names = []
    at = template.find(b"%(")
    while at >= 0:
        names.append(template[at + 2 : at + 3])
        at = template.find(b"%(", at + 1)
    for name in names:
        kind = b"s" if name == b"m" else b"d"
        template = template.replace(b"%(" + name + b")s", b"%" + kind, 1)
        template = template.replace(b"%(" + name + b")d", b"%" + kind, 1)
    return template, operator.itemgetter(*(b"mqop".index(name) for name in names))


_STORED_TEMPLATE, _STORED_ORDER = _positional(_stored_template())
_FRAME_PREFIX = struct.Struct(">II")


def stored_answer(opaque: int, msg_id: str, queue_id: int, queue_offset: int) -> bytes:
    """The frame head (length fields and JSON header; the answer has no body) of
    :func:`send_answer` for one message stored PUT_OK, to a JSON request: the same bytes as
    the codec's, without building the command."""
    header = _STORED_TEMPLATE % _STORED_ORDER((msg_id.encode(), queue_id, queue_offset, opaque))
    return _FRAME_PREFIX.pack(4 + len(header), len(header)) + header


_PUT_OK = PutStatus.PUT_OK
_PUT_OK_STATUSES = (PutStatus.PUT_OK,)  # a stored send's statuses (observe_put copies them)

_MAX_PENDING = 64
"""Sends of one read stored in one put at most (a flush before the 65th)."""


@attrs.define(slots=True)
class _Pending:
    """A send admitted and not stored yet (stored with the rest of its read)."""

    ctx: HandlerContext
    request: RemotingCommand
    messages: list[Message]
    queue_id: int
    wait: bool
    started: float
    answer: RemotingCommand | None = None
    """A refusal answered in its place among the read's sends (it stores nothing)."""


class _Refused(HanetError):
    """A send refused before anything was stored."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


def send_answer(
    request: RemotingCommand,
    results: Sequence[PutResult],
    queue_id: int,
    status: PutStatus | None = None,
) -> RemotingCommand:
    """The answer to a send to ``queue_id`` whose messages were stored with ``results`` (one
    per message of a batch); ``status`` overrides a stored put's PUT_OK (the outcome of a
    wait)."""
    first = results[0]
    if len(results) == 1:
        worst = first
    else:
        worst = next((r for r in results if r.status is not PutStatus.PUT_OK), first)
    final = worst.status if worst.status is not PutStatus.PUT_OK else (status or first.status)
    code = _STATUS_CODES.get(final, ResponseCode.SYSTEM_ERROR)
    if final in _STORED:
        msg_id = first.msg_id if len(results) == 1 else ",".join(r.msg_id for r in results)
        # SendMessageResponseHeader(msg_id, queue_id, queue_offset).to_fields(), written out
        # (the one answer every send gets), then the region and trace flag as 4.9.8.
        fields = {
            _MSG_ID: msg_id,
            _QUEUE_ID: str(queue_id),
            _QUEUE_OFFSET: str(first.queue_offset),
            MessageProperty.MSG_REGION: "DefaultRegion",
            MessageProperty.TRACE_ON: "true",
        }
        remark = None if final is PutStatus.PUT_OK else final.value
        return request.response(code, remark, fields)
    remark = worst.detail or _REMARKS.get(final, "")
    if code == ResponseCode.SYSTEM_ERROR:  # the status is not in the code: say it
        remark = f"{final.value}: {remark}" if remark else final.value
    return request.response(code, remark)


def _write_out(ctx: HandlerContext, out: list[bytes]) -> None:
    """Write the answers gathered in ``out`` as one buffer, and empty it."""
    if out:
        ctx.write(out[0] if len(out) == 1 else b"".join(out))
        out.clear()


def _refused_in_place(ctx: HandlerContext, send: _Pending, out: list[bytes]) -> None:
    """Write a refusal kept among a read's sends, after the answers gathered before it."""
    _write_out(ctx, out)
    if send.answer is not None and not send.request.flag & FLAG_ONEWAY:
        ctx.write(send.answer)


def _which(index: int, parts: Sequence[object]) -> str:
    return f"message {index} of the batch" if len(parts) > 1 else "the message"


class Sends:
    """The send processors of a :class:`~hanet.broker.BrokerPort`."""

    def __init__(self, port: BrokerPort) -> None:
        self.port = port
        self._counters: dict[str, int] = {}
        # Topics whose names passed topic_problem (a name never becomes illegal; bounded).
        self._legal_topics: set[str] = set()

    def send_message(self, ctx: HandlerContext, request: RemotingCommand) -> RemotingCommand | None:
        """SEND_MESSAGE, SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE.

        A send that passes its checks is stored with the other sends of the same read, in
        one put (:meth:`flush_pending`: at the end of the read, before any other request of
        the connection is served and before any answer is written; a DLedger leader appends
        them as one proposal batch), and answered in order; a send refused after some were
        admitted is answered in its place among them."""
        connection = connection_of(ctx)
        try:
            answer = self._send(ctx, connection, request)
        except RemotingHeaderError as exc:
            if not connection.pending_sends:
                raise  # the dispatcher answers it
            log.info("client %s: %s: %s", connection.peer, request.describe(), exc)
            answer = request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        except BaseException:
            if connection.pending_sends:  # the dispatcher answers this one: the earlier first
                self.flush_pending(connection)
            raise
        pending = connection.pending_sends
        if answer is not None and pending:
            # a refusal keeps its place: answered after the sends before it, which are
            # stored with those after it (one put, one Raft round, for the read)
            pending.append(_Pending(ctx, request, [], 0, False, pending[0].started, answer))
            if len(pending) >= _MAX_PENDING:
                self.flush_pending(connection)
            return None
        return answer

    def _send(
        self, ctx: HandlerContext, connection: BrokerConnection, request: RemotingCommand
    ) -> RemotingCommand | None:
        backend = self.port.backend
        refusal = backend.send_refusal()
        if refusal is not None:
            return request.response(ResponseCode.SERVICE_NOT_AVAILABLE, refusal)
        header = SendMessageRequestHeader.decode(request.code, request.fields)
        pending = connection.pending_sends
        # the frames of one read arrived together: the first one's time is theirs
        if pending:
            started = pending[0].started
        else:  # trio.current_time(), from the run's clock (kept by the connection)
            clock = connection.clock
            if clock is None:
                clock = connection.clock = trio.lowlevel.current_clock()
            started = clock.current_time()
        try:
            messages, queue_id, wait = self._admit(request, header, connection.born)
        except _Refused as exc:
            log.info("client %s: send to %.80s refused: %s", connection.peer, header.topic, exc)
            if exc.code == ResponseCode.MESSAGE_ILLEGAL:
                backend.observe_put([PutStatus.MESSAGE_ILLEGAL], trio.current_time() - started)
            return request.response(exc.code, exc.remark)
        except StoreError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        pending.append(_Pending(ctx, request, messages, queue_id, wait, started))
        if self.port._dispatcher.guard is not None or len(pending) >= _MAX_PENDING:
            # (with an ACL guard the dispatcher may answer a later send before this one)
            self.flush_pending(connection)
        return None

    def flush_pending(self, connection: BrokerConnection) -> None:
        """Store the sends admitted on ``connection`` and not stored yet, in one put, and
        answer them (or queue their answers for the wait the broker's role asks), in order."""
        pending = connection.pending_sends
        if not pending:
            return
        connection.pending_sends = []
        backend = self.port.backend
        if len(pending) == 1:
            messages = pending[0].messages
        else:
            messages = [message for send in pending for message in send.messages]
        try:
            results = backend.put_now(messages)
        except Exception as exc:  # a bug of ours: answer each, log, keep the connection
            log.exception("client %s: %d sends failed", connection.peer, len(pending))
            for send in pending:
                if not send.request.flag & FLAG_ONEWAY:
                    send.ctx.write(
                        send.answer
                        or send.request.response(
                            ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}"
                        )
                    )
            return
        if results is None:  # stored through the backend's put (one Raft append round)
            connection.in_flight += len(pending)
            connection.update_reading()
            backend.put_later(messages, functools.partial(self._put_done, connection, pending))
            return
        must_wait = backend.must_wait()
        clock = connection.clock  # (set by the first send: trio.current_time() in one call)
        now = trio.current_time() if clock is None else clock.current_time()
        out: list[bytes] = []  # the stored answers, written together (one pass down)
        ctx = pending[0].ctx
        at = 0
        observe = backend.observe_put
        # The common answers of the same latency (the sends of a read share their start) are
        # counted together: one metrics call for the run, not one each.
        observe_ok = getattr(backend, "observe_puts_ok", None)
        counted = 0
        counted_started = pending[0].started
        template, order, prefix = _STORED_TEMPLATE, _STORED_ORDER, _FRAME_PREFIX.pack
        for send in pending:
            if send.ctx is not ctx:  # pragma: no cover - one connection, one dispatch context
                _write_out(ctx, out)
                ctx = send.ctx
            if send.answer is not None:
                _refused_in_place(ctx, send, out)
                continue
            count = len(send.messages)
            if count == 1 and (not send.wait or not must_wait):
                # the common send, answered at once: answer_send's stored answer written out
                first = results[at]
                request = send.request
                if (
                    first.status is _PUT_OK
                    and not request.flag & FLAG_ONEWAY
                    and request.serialize_type is SerializeType.JSON
                ):
                    at += 1
                    # stored_answer(), inlined (once a send)
                    header = template % order(
                        (first.msg_id.encode(), send.queue_id, first.queue_offset, request.opaque)
                    )
                    out.append(prefix(4 + len(header), len(header)) + header)
                    if observe_ok is None:
                        observe(_PUT_OK_STATUSES, now - send.started)
                    elif send.started == counted_started:
                        counted += 1
                    else:  # pragma: no cover - the sends of one read share their start
                        if counted:
                            observe_ok(counted, now - counted_started)
                        counted, counted_started = 1, send.started
                    continue
            mine = results if len(pending) == 1 else results[at : at + count]
            at += count
            self._stored(connection, send, mine, must_wait, now, out)
        if counted and observe_ok is not None:
            observe_ok(counted, now - counted_started)
        _write_out(ctx, out)

    def _stored(
        self,
        connection: BrokerConnection,
        send: _Pending,
        results: list[PutResult],
        must_wait: bool,
        now: float,
        out: list[bytes],
    ) -> None:
        stored = [r for r in results if r.status is PutStatus.PUT_OK]
        if not send.wait or not must_wait or len(stored) < len(results):  # answered now
            self.answer_send(
                send.ctx,
                send.request,
                results,
                send.queue_id,
                PutStatus.PUT_OK,
                send.started,
                now=now,
                out=out,
            )
            return
        end = max(r.wrote_offset + r.wrote_size for r in stored)
        connection.wait_for(
            send.ctx, WaitingSend(send.request, results, send.queue_id, end, send.started)
        )

    def _put_done(
        self, connection: BrokerConnection, pending: list[_Pending], results: list[PutResult]
    ) -> None:
        """Answer each of a read's sends stored through the backend's put (one call: a
        DLedger leader appends them in one round) in order, with its own results."""
        try:
            if not connection.channel.is_open:
                return
            now = trio.current_time()
            out: list[bytes] = []
            ctx = pending[0].ctx
            at = 0
            for send in pending:
                if send.ctx is not ctx:  # pragma: no cover - one connection, one context
                    _write_out(ctx, out)
                    ctx = send.ctx
                if send.answer is not None:
                    _refused_in_place(ctx, send, out)
                    continue
                count = len(send.messages)
                mine = results if len(pending) == 1 else results[at : at + count]
                at += count
                self.answer_send(
                    send.ctx,
                    send.request,
                    mine,
                    send.queue_id,
                    PutStatus.PUT_OK,
                    send.started,
                    now=now,
                    out=out,
                )
            _write_out(ctx, out)
            ctx.flush()
        finally:
            connection.in_flight -= len(pending)
            connection.update_reading()

    def answer_send(
        self,
        ctx: HandlerContext,
        request: RemotingCommand,
        results: Sequence[PutResult],
        queue_id: int,
        status: PutStatus,
        started: float,
        *,
        now: float | None = None,
        out: list[bytes] | None = None,
    ) -> None:
        """Write a send's answer (not for a oneway send) and count it (its latency up to
        ``now``, trio's time, by default the current). With ``out``, a stored answer's bytes
        are added to it instead (the caller writes them, after those before); any other
        answer writes what ``out`` holds first."""
        if len(results) == 1 and results[0].status is PutStatus.PUT_OK:
            if not request.flag & FLAG_ONEWAY:
                if status is PutStatus.PUT_OK and request.serialize_type is SerializeType.JSON:
                    first = results[0]
                    answer = stored_answer(
                        request.opaque, first.msg_id, queue_id, first.queue_offset
                    )
                    if out is None:
                        ctx.write(answer)
                    else:
                        out.append(answer)
                else:
                    if out:
                        _write_out(ctx, out)
                    ctx.write(send_answer(request, results, queue_id, status))
            statuses = [status]
        else:
            if not request.flag & FLAG_ONEWAY:
                if out:
                    _write_out(ctx, out)
                ctx.write(send_answer(request, results, queue_id, status))
            statuses = [status if r.status is PutStatus.PUT_OK else r.status for r in results]
        if now is None:
            now = trio.current_time()
        self.port.backend.observe_put(statuses, now - started)

    def _admit(
        self, request: RemotingCommand, header: SendMessageRequestHeader, born: tuple[bytes, int]
    ) -> tuple[list[Message], int, bool]:
        """The messages a send stores, their queue and whether the answer waits for the
        store (every check first: nothing is stored when one fails)."""
        topic = header.topic
        if topic not in self._legal_topics:
            problem = topic_problem(topic)
            if problem is not None:
                raise _Refused(
                    ResponseCode.SYSTEM_ERROR, f"the specified topic is illegal: {problem}"
                )
            if len(self._legal_topics) < _MAX_LEGAL_TOPICS:
                self._legal_topics.add(topic)
        if topic in NOT_ALLOWED_SEND_TOPICS:
            raise _Refused(ResponseCode.NO_PERMISSION, f"sending to topic {topic} is forbidden")
        table = self.port.backend.topic_table
        try:
            config = table.create_for_send(topic, header.default_topic_queue_nums)
        except TopicTableFull as exc:
            raise _Refused(ResponseCode.SYSTEM_ERROR, str(exc)) from None
        except TopicNotExist as exc:  # autoCreateTopicEnable=false
            raise _Refused(ResponseCode.TOPIC_NOT_EXIST, str(exc.args[0])) from None
        if not config.perm & PERM_WRITE:  # made read-only by an admin (UPDATE_AND_CREATE_TOPIC)
            raise _Refused(
                ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden"
            )
        queues = config.write_queue_nums
        queue_id = header.queue_id
        if queue_id >= queues:
            raise _Refused(
                ResponseCode.SYSTEM_ERROR,
                f"request queueId[{queue_id}] is illegal: topic {topic} has {queues} write queues",
            )
        if queue_id < 0:
            queue_id = self._round_robin(topic, queues)
        sys_flag = header.sys_flag & ~_HOST_FLAGS
        if request.code == RequestCode.SEND_BATCH_MESSAGE:
            try:
                batch = decode_batch(request.body)
            except RemotingHeaderError as exc:
                raise _Refused(ResponseCode.MESSAGE_ILLEGAL, str(exc)) from None
            if not batch:
                raise _Refused(ResponseCode.MESSAGE_ILLEGAL, "the batch holds no message")
            parts = [(m.body, dict(m.properties), m.flag) for m in batch]
            text = None
        else:
            text = header.properties or ""
            parts = [(bytes(request.body), string_to_properties(text), header.flag)]
        messages: list[Message] = []
        wait = False
        backend = self.port.backend
        cluster = backend.cluster_name
        max_body = backend.store.config.max_message_size
        # ASCII properties encode to at most the header's text they were parsed from (and a
        # closing separator) with the cluster pair: encoded (the store does it again) only
        # when that bound is over the limit or the text is not ASCII.
        size_bound = _SIZE_UNKNOWN
        if text is not None and text.isascii():
            size_bound = len(text) + 1 + (len(cluster) * 4 + _CLUSTER_PAIR if cluster else 0)
        born_host, born_port = born
        born_timestamp = header.born_timestamp
        reconsume_times = header.reconsume_times or 0
        retry = topic.startswith(RETRY_TOPIC_PREFIX)
        rewrite = self.port.rewrite
        for index, (body, properties, flag) in enumerate(parts):
            if len(body) > max_body:
                raise _Refused(
                    ResponseCode.MESSAGE_ILLEGAL,
                    f"{_which(index, parts)}: body of {len(body)} bytes is over the maximum "
                    f"{max_body}",
                )
            if cluster:
                properties[MessageProperty.CLUSTER] = cluster
            size = size_bound
            if size > MAX_PROPERTIES_SIZE:
                size = len(encode_properties(properties))
                if size > MAX_PROPERTIES_SIZE:
                    raise _Refused(
                        ResponseCode.MESSAGE_ILLEGAL,
                        f"{_which(index, parts)}: properties of {size} bytes are over "
                        f"{MAX_PROPERTIES_SIZE}",
                    )
            wait = wait or properties.get(MessageProperty.WAIT) != "false"
            # (Message's fields in order, topic to reconsume_times; native when built)
            message = new_message(
                topic,
                body,
                queue_id,
                flag,
                properties,
                sys_flag,
                born_timestamp,
                born_host,
                born_port,
                reconsume_times,
            )
            if retry:
                message = self._redirect_retry(message, header, request.version)
            if rewrite is not None:
                message = rewrite(message)
            messages.append(message)
        return messages, queue_id, wait

    def _redirect_retry(
        self, message: Message, header: SendMessageRequestHeader, version: int
    ) -> Message:
        """A consumer's send to its retry topic past its max reconsume times goes to the
        group's dead letter topic (RocketMQ's ``handleRetryAndDLQ``)."""
        redirected = redirect_retry_send(
            message, header_max=header.max_reconsume_times, version=version
        )
        if redirected.topic != message.topic:
            try:
                self.port.backend.topic_table.ensure(redirected.topic, DLQ_QUEUE_NUMS)
            except TopicTableFull as exc:
                raise _Refused(ResponseCode.SYSTEM_ERROR, str(exc)) from None
        return redirected

    def _round_robin(self, topic: str, queues: int) -> int:
        count = self._counters.get(topic, 0)
        if len(self._counters) < 100_000 or topic in self._counters:
            self._counters[topic] = count + 1
        return count % queues
