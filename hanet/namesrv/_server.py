"""The name server: a :class:`Registry` served over RocketMQ's remoting protocol.

Each connection's pipeline::

    frame-decoder  LengthFieldBasedFrameDecoder(max_frame, 0, 4, 0, 4)
    codec          RemotingCodec
    idle           IdleStateHandler(all_idle=idle_timeout)
    connection     the connection's watcher (a broker leaves when it closes; an idle
                   connection is closed; back-pressure)
    dispatch       RemotingDispatcher: the request code's processor

Served, as RocketMQ 4.9.8's ``DefaultRequestProcessor``: PUT_KV_CONFIG (100), GET_KV_CONFIG
(101), DELETE_KV_CONFIG (102), REGISTER_BROKER (103), UNREGISTER_BROKER (104),
GET_ROUTEINFO_BY_TOPIC (105), GET_BROKER_CLUSTER_INFO (106),
GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206), GET_KVLIST_BY_NAMESPACE (219),
GET_TOPICS_BY_CLUSTER (224), QUERY_DATA_VERSION (322), and the admin requests
DELETE_TOPIC_IN_NAMESRV (216: the topic leaves the routes until a broker registers it
again), WIPE_WRITE_PERM_OF_BROKER (205) and ADD_WRITE_PERM_OF_BROKER (327: a broker name's
topics routed read-only, until its topics change or write is added back; the answer counts the
topics). Any other code is answered
REQUEST_CODE_NOT_SUPPORTED; a missing or malformed header field or body SYSTEM_ERROR with the
reason (nothing registered); a registration whose body does not match its ``bodyCrc32``
SYSTEM_ERROR ``crc32 not match``; a refused takeover of a live registration NO_PERMISSION
(logged at WARNING). The connection stays open in all these cases. A frame that does not
decode (or is over ``max_frame_length``) closes its connection, with the reason logged; other
connections go on. A client that does not read its answers is not read either until it does
(the answers waiting stay bounded).

A broker leaves every route when the connection it registered over closes (RocketMQ's
``onChannelDestroy``), and every ``scan_interval`` seconds (10) the registrations not renewed
for ``expire_after`` seconds (120) are dropped. A connection silent both ways for
``idle_timeout`` seconds (120, RocketMQ's ``serverChannelMaxIdleTimeSeconds``) is closed, as
RocketMQ's name server closes it; a broker renews every 30 s, so only forgotten clients go.
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Callable, Hashable
from functools import partial
from pathlib import Path
from typing import Any

import trio

from hanet.boot import AllowList, serve_on
from hanet.channel import ChannelInboundHandler, HandlerContext, StreamChannel, format_address
from hanet.handlers import IdleStateEvent, IdleStateHandler
from hanet.protocol import (
    MAX_FRAME_LENGTH,
    NAMESRV_ADMIN_CODES,
    AclGuard,
    DataVersion,
    DeleteKVConfigRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    GetKVConfigRequestHeader,
    GetKVConfigResponseHeader,
    GetKVListByNamespaceRequestHeader,
    GetRouteInfoRequestHeader,
    GetTopicsByClusterRequestHeader,
    PlainAclFile,
    PutKVConfigRequestHeader,
    QueryDataVersionRequestHeader,
    QueryDataVersionResponseHeader,
    RegisterBrokerBody,
    RegisterBrokerRequestHeader,
    RemotingCommand,
    RemotingDispatcher,
    RemotingHeaderError,
    RequestCode,
    RequestProcessor,
    ResponseCode,
    UnregisterBrokerRequestHeader,
    WritePermOfBrokerRequestHeader,
    WritePermOfBrokerResponseHeader,
    body_crc32,
    not_supported,
    remoting_pipeline,
    route_standard_json,
)

from ._kvconfig import NAMESPACE_ORDER_TOPIC_CONFIG, KVConfig, KVConfigFullError
from ._registry import (
    DEFAULT_EXPIRE_AFTER,
    MAX_BROKERS,
    MAX_PER_IDENTITY,
    RegistrationError,
    RegistrationRefused,
    Registry,
)
from ._trust import BrokerTrust

__all__ = ["DEFAULT_PORT", "IDLE_TIMEOUT", "SCAN_INTERVAL", "TOPIC_NOT_EXIST_HINT", "NameServer"]

log = logging.getLogger("hanet.namesrv")

DEFAULT_PORT = 9876
"""The name server's port (RocketMQ's)."""

SCAN_INTERVAL = 10.0
"""Seconds between two scans for expired registrations (RocketMQ's)."""

IDLE_TIMEOUT = 120.0
"""Seconds a connection may stay silent both ways before it is closed (RocketMQ's)."""

TOPIC_NOT_EXIST_HINT = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."
"""What RocketMQ appends to a TOPIC_NOT_EXIST remark (``FAQUrl.suggestTodo``)."""

_Processor = Callable[[Hashable | None, str, RemotingCommand], RemotingCommand | None]


class NameServer:
    """A name server: brokers register with it, clients look routes up (run it with
    :meth:`run`).

    Args:
        listen: ``(host, port)`` to serve (port 0: any free one).
        expire_after: seconds a registration lives without renewal.
        scan_interval: seconds between two scans for expired registrations.
        max_frame_length: largest request frame accepted.
        tls: serve TLS with this context (None: plain TCP).
        allow: accept connections from these networks only (None: everyone).
        clock: seconds since the epoch (default: the wall clock at :meth:`run`'s start moved
            on by trio's clock, so a test's virtual clock drives expiry).
        idle_timeout: close a connection silent both ways this long (0: never).
        max_partial_bytes: bytes all connections may hold in unfinished frames together
            (None: the framework's 64 MiB; 0: no cap; see ``hanet.boot.serve``).
        trust: who may register and whose a registration is (default: any connection; a
            registration belongs to its certificate name, or its remote IP on plain TCP).
        max_registrations: most registrations held in all.
        max_per_identity: most registrations one identity holds.
        acl_file: check every request against this RocketMQ ``plain_acl.yml`` (None: no
            ACL), reloaded within a second of a change; registrations and KV config
            changes need an admin account (:data:`~hanet.protocol.NAMESRV_ADMIN_CODES`).

    Raises:
        AclConfigError: ``acl_file`` is missing or does not load.
    """

    def __init__(
        self,
        listen: tuple[str, int] = ("127.0.0.1", DEFAULT_PORT),
        *,
        expire_after: float = DEFAULT_EXPIRE_AFTER,
        scan_interval: float = SCAN_INTERVAL,
        max_frame_length: int = MAX_FRAME_LENGTH,
        tls: ssl.SSLContext | None = None,
        allow: AllowList | None = None,
        clock: Callable[[], float] | None = None,
        idle_timeout: float = IDLE_TIMEOUT,
        max_partial_bytes: int | None = None,
        trust: BrokerTrust | None = None,
        max_registrations: int = MAX_BROKERS,
        max_per_identity: int = MAX_PER_IDENTITY,
        acl_file: Path | None = None,
    ) -> None:
        if scan_interval <= 0:
            raise ValueError(f"scan_interval must be > 0, got {scan_interval}")
        self.listen = listen
        self.registry = Registry(
            expire_after=expire_after,
            max_brokers=max_registrations,
            max_per_identity=max_per_identity,
        )
        """The live brokers (read it in-process; the server changes it)."""
        self.kv_config = KVConfig()
        """The key/value configuration (PUT/GET/DELETE_KV_CONFIG)."""
        self.scan_interval = scan_interval
        self.max_frame_length = max_frame_length
        self.idle_timeout = idle_timeout
        self.max_partial_bytes = max_partial_bytes
        self.trust = trust if trust is not None else BrokerTrust()
        self.tls = tls
        self.allow = allow
        self._clock = clock
        self._epoch: float | None = None
        self.address: tuple[str, int] | None = None
        """Where :meth:`run` listens, once it started."""
        table: dict[int, _Processor] = {
            RequestCode.PUT_KV_CONFIG: self._put_kv_config,
            RequestCode.GET_KV_CONFIG: self._get_kv_config,
            RequestCode.DELETE_KV_CONFIG: self._delete_kv_config,
            RequestCode.REGISTER_BROKER: self._register_broker,
            RequestCode.UNREGISTER_BROKER: self._unregister_broker,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self._route,
            RequestCode.GET_BROKER_CLUSTER_INFO: self._cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self._all_topics,
            RequestCode.GET_KVLIST_BY_NAMESPACE: self._kv_list,
            RequestCode.GET_TOPICS_BY_CLUSTER: self._topics_by_cluster,
            RequestCode.QUERY_DATA_VERSION: self._query_data_version,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self._delete_topic,
            RequestCode.WIPE_WRITE_PERM_OF_BROKER: self._write_perm,
            RequestCode.ADD_WRITE_PERM_OF_BROKER: self._write_perm,
        }
        self._table = table
        self.dispatcher = RemotingDispatcher(
            {code: self._processor(p) for code, p in table.items()}, port="the name server"
        )
        """The dispatch table every connection shares."""
        self.acl: PlainAclFile | None = None
        """The ACL file in force (None: no ACL)."""
        if acl_file is not None:
            acl = self.acl = PlainAclFile(acl_file)
            self.dispatcher.guard = AclGuard(
                lambda: acl.config, port="the name server", admin_codes=NAMESRV_ADMIN_CODES
            )

    def now(self) -> float:
        """The time registrations are stamped with (seconds since the epoch)."""
        if self._clock is not None:
            return self._clock()
        if self._epoch is None:
            return time.time()
        return self._epoch + trio.current_time()

    async def run(
        self, *, task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve until cancelled; reports the bound ``(host, port)``.

        Raises:
            OSError: the port cannot be bound.
        """
        host, port = self.listen
        listeners = await trio.open_tcp_listeners(port, host=host)
        self._epoch = time.time() - trio.current_time()
        name = listeners[0].socket.getsockname()
        self.address = (name[0], name[1])
        async with trio.open_nursery() as nursery:
            await nursery.start(
                partial(
                    serve_on,
                    self.initialize,
                    listeners,
                    tls=self.tls,
                    allow=self.allow,
                    name="name server",
                    max_partial_bytes=self.max_partial_bytes,
                )
            )
            nursery.start_soon(self._scan)
            if self.acl is not None:
                nursery.start_soon(self._watch_acl, self.acl)
            log.info(
                "name server on %s (registrations expire after %g s)",
                format_address(self.address),
                self.registry.expire_after,
            )
            task_status.started(self.address)

    @staticmethod
    async def _watch_acl(acl: PlainAclFile) -> None:
        while True:
            await trio.sleep(1.0)
            acl.poll()

    async def _scan(self) -> None:
        while True:
            await trio.sleep(self.scan_interval)
            self.registry.expire(self.now())

    def initialize(self, channel: Any) -> None:
        """Set up one connection's pipeline (a :class:`StreamChannel`, or an
        ``EmbeddedChannel`` in tests)."""
        pipeline = channel.pipeline
        for name, handler in remoting_pipeline(self.max_frame_length):
            pipeline.add_last(handler, name)
        if self.idle_timeout > 0:
            pipeline.add_last(IdleStateHandler(all_idle=self.idle_timeout), "idle")
        pipeline.add_last(_ConnectionWatcher(self), "connection")
        pipeline.add_last(self.dispatcher, "dispatch")

    def handle(
        self, request: RemotingCommand, connection: Hashable | None = None
    ) -> RemotingCommand | None:
        """The answer to one request, as a connection would get it (usable in-process;
        ``connection``: what a registration is bound to). None for a oneway request."""
        processor = self._table.get(request.code)
        if processor is None:
            answer: RemotingCommand | None = not_supported(request)
        else:
            try:
                answer = processor(connection, "in-process", request)
            except RemotingHeaderError as exc:
                answer = request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        return None if request.is_oneway else answer

    @staticmethod
    def _processor(processor: _Processor) -> RequestProcessor:
        def serve(ctx: HandlerContext, request: RemotingCommand) -> RemotingCommand | None:
            return processor(ctx.channel, _peer(ctx.channel), request)

        return serve

    # -- the KV configuration --------------------------------------------------------------

    def _put_kv_config(
        self, connection: Hashable | None, peer: str, request: RemotingCommand
    ) -> RemotingCommand:
        header = PutKVConfigRequestHeader.from_fields(request.fields)
        try:
            self.kv_config.put(header.namespace, header.key, header.value)
        except KVConfigFullError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        return request.response()

    def _get_kv_config(
        self, connection: Hashable | None, peer: str, request: RemotingCommand
    ) -> RemotingCommand:
        header = GetKVConfigRequestHeader.from_fields(request.fields)
        value = self.kv_config.get(header.namespace, header.key)
        if value is None:
            return request.response(
                ResponseCode.QUERY_NOT_FOUND,
                f"No config item, Namespace: {header.namespace} Key: {header.key}",
                fields={},
            )
        return request.response(fields=GetKVConfigResponseHeader(value).to_fields())

    def _delete_kv_config(
        self, connection: Hashable | None, peer: str, request: RemotingCommand
    ) -> RemotingCommand:
        header = DeleteKVConfigRequestHeader.from_fields(request.fields)
        self.kv_config.delete(header.namespace, header.key)
        return request.response()

    def _kv_list(
        self, connection: Hashable | None, peer: str, request: RemotingCommand
    ) -> RemotingCommand:
        header = GetKVListByNamespaceRequestHeader.from_fields(request.fields)
        table = self.kv_config.namespace(header.namespace)
        if table is None:
            return request.response(
                ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {header.namespace}"
            )
        return request.response(body=table.encode())

    # -- brokers ---------------------------------------------------------------------------

    def _register_broker(
        self, connection: Hashable | None, peer: str, request: RemotingCommand
    ) -> RemotingCommand:
        header = RegisterBrokerRequestHeader.from_fields(request.fields)
        if header.body_crc32 != 0 and header.body_crc32 != body_crc32(request.body):
            log.warning("registration of %s/%s/%d from %s: crc32 not match", *_key(header), peer)
            return request.response(ResponseCode.SYSTEM_ERROR, "crc32 not match")
        identity, refusal = self.trust.identity(connection)
        if refusal is not None:
            log.warning(
                "registration of %s/%s/%d from %s refused: %s", *_key(header), peer, refusal
            )
            return request.response(ResponseCode.NO_PERMISSION, f"registration refused: {refusal}")
        if len(request.body):
            body = RegisterBrokerBody.decode_body(request.body, header.compressed)
        else:
            body = RegisterBrokerBody()
        try:
            answer = self.registry.register(header, body, self.now(), connection, identity)
        except RegistrationError as exc:
            refused = isinstance(exc, RegistrationRefused)
            log.warning(
                "registration of %s/%s/%d at %r from %s refused: %s",
                *_key(header),
                header.broker_addr,
                peer,
                exc,
            )
            code = ResponseCode.NO_PERMISSION if refused else ResponseCode.SYSTEM_ERROR
            return request.response(code, f"registration refused: {exc}")
        table = self.kv_config.namespace(NAMESPACE_ORDER_TOPIC_CONFIG)
        return request.response(
            fields=answer.header().to_fields(), body=table.encode() if table else b""
        )

    def _unregister_broker(
        self, connection: Hashable | None, peer: str, request: RemotingCommand
    ) -> RemotingCommand:
        h = UnregisterBrokerRequestHeader.from_fields(request.fields)
        identity, refusal = self.trust.identity(connection)
        if refusal is not None:
            log.warning(
                "unregistration of %s/%s/%d from %s refused: %s",
                h.cluster_name,
                h.broker_name,
                h.broker_id,
                peer,
                refusal,
            )
            return request.response(
                ResponseCode.NO_PERMISSION, f"unregistration refused: {refusal}"
            )
        self.registry.unregister(
            h.cluster_name, h.broker_name, h.broker_id, h.broker_addr, identity
        )
        return request.response()

    def _query_data_version(
        self, connection: Hashable | None, peer: str, request: RemotingCommand
    ) -> RemotingCommand:
        h = QueryDataVersionRequestHeader.from_fields(request.fields)
        version = DataVersion.decode(request.body)
        identity, _ = self.trust.identity(connection)
        changed, held = self.registry.query_data_version(
            (h.cluster_name, h.broker_name, h.broker_id),
            h.broker_addr,
            version,
            self.now(),
            identity,
        )
        return request.response(
            fields=QueryDataVersionResponseHeader(changed).to_fields(),
            body=held.encode() if held is not None else b"",
        )

    # -- routes ----------------------------------------------------------------------------

    def _route(
        self, connection: Hashable | None, peer: str, request: RemotingCommand
    ) -> RemotingCommand:
        header = GetRouteInfoRequestHeader.from_fields(request.fields)
        data = self.registry.route(header.topic)
        if data is None:
            return request.response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {header.topic}"
                + TOPIC_NOT_EXIST_HINT,
            )
        standard = route_standard_json(request.version, header.accept_standard_json_only)
        return request.response(body=data.encode_for(standard))

    def _cluster_info(
        self, connection: Hashable | None, peer: str, request: RemotingCommand
    ) -> RemotingCommand:
        return request.response(body=self.registry.cluster_info().encode())

    def _all_topics(
        self, connection: Hashable | None, peer: str, request: RemotingCommand
    ) -> RemotingCommand:
        return request.response(body=self.registry.topics().encode())

    def _topics_by_cluster(
        self, connection: Hashable | None, peer: str, request: RemotingCommand
    ) -> RemotingCommand:
        header = GetTopicsByClusterRequestHeader.from_fields(request.fields)
        return request.response(body=self.registry.topics(header.cluster).encode())

    # -- admin ---------------------------------------------------------------------------

    def _delete_topic(
        self, connection: Hashable | None, peer: str, request: RemotingCommand
    ) -> RemotingCommand:
        header = DeleteTopicFromNamesrvRequestHeader.from_fields(request.fields)
        count = self.registry.delete_topic(header.topic, header.cluster_name or None)
        log.info("topic %s deleted from %d brokers by %s", header.topic, count, peer)
        return request.response()

    def _write_perm(
        self, connection: Hashable | None, peer: str, request: RemotingCommand
    ) -> RemotingCommand:
        header = WritePermOfBrokerRequestHeader.from_fields(request.fields)
        add = request.code == RequestCode.ADD_WRITE_PERM_OF_BROKER
        count = self.registry.set_write_perm(header.broker_name, add)
        log.info(
            "write permission of broker %s %s by %s: %d topics",
            header.broker_name,
            "added" if add else "wiped",
            peer,
            count,
        )
        if add:
            return request.response(fields={"addTopicCount": str(count)})
        return request.response(fields=WritePermOfBrokerResponseHeader(count).to_fields())


def _key(header: RegisterBrokerRequestHeader) -> tuple[str, str, int]:
    return (header.cluster_name, header.broker_name, header.broker_id)


def _peer(channel: Any) -> str:
    address = getattr(channel, "remote_address", None)
    return format_address(address) if address else str(channel)


class _ConnectionWatcher(ChannelInboundHandler):
    """A connection's life: the brokers it registered leave when it closes; while the client
    does not read its answers, its requests are not read either."""

    def __init__(self, server: NameServer) -> None:
        self.server = server

    def channel_active(self, ctx: HandlerContext) -> None:
        log.debug("client %s connected", _peer(ctx.channel))
        ctx.fire_channel_active()

    def channel_inactive(self, ctx: HandlerContext) -> None:
        channel = ctx.channel
        log.debug("client %s closed (%s)", _peer(channel), channel.close_reason or "closed")
        self.server.registry.connection_closed(channel)
        ctx.fire_channel_inactive()

    def user_event_triggered(self, ctx: HandlerContext, event: object) -> None:
        if isinstance(event, IdleStateEvent):
            log.info(
                "client %s: closing: idle for %g s", _peer(ctx.channel), self.server.idle_timeout
            )
            ctx.close("idle")
            return
        ctx.fire_user_event_triggered(event)

    def channel_writability_changed(self, ctx: HandlerContext) -> None:
        channel = ctx.channel
        if isinstance(channel, StreamChannel) and channel.is_open:
            channel.auto_read = channel.is_writable
        ctx.fire_channel_writability_changed()
