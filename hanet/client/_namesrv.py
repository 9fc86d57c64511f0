"""Clients of the name server over RocketMQ's remoting protocol: one connection
(:class:`NameServerConnection`), and the client of a list of name servers
(:class:`NameServerClient`). Both work against ``hanet namesrv`` and RocketMQ's own name server.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import TypeVar

import attrs
import trio

from hanet.boot import Connector
from hanet.protocol import (
    PERM_WRITE,
    BrokerRegistration,
    ClusterInfo,
    DataVersion,
    GetKVConfigRequestHeader,
    GetKVConfigResponseHeader,
    GetRouteInfoRequestHeader,
    GetTopicsByClusterRequestHeader,
    PutKVConfigRequestHeader,
    RegisterBrokerResponse,
    RemotingCommand,
    RemotingHeaderError,
    RequestCode,
    ResponseCode,
    TopicList,
    TopicRoute,
    TopicRouteData,
)

from ._failover import parse_broker_address
from ._remoting import (
    RemotingConnection,
    RemotingConnectionError,
    RemotingError,
    RemotingProtocolError,
    RemotingResponseError,
    RemotingTimeoutError,
)

__all__ = ["NameServerClient", "NameServerConnection"]

log = logging.getLogger("hanet.client")

T = TypeVar("T")


def _decoded(what: str, decode: Callable[[], T]) -> T:
    try:
        return decode()
    except RemotingHeaderError as exc:
        raise RemotingProtocolError(f"malformed {what} answer: {exc}") from exc


class NameServerConnection(RemotingConnection):
    """A connection to one name server. Open it with :meth:`connect`.

    A broker registered over a connection stays registered while it is open (and renewed
    within 120 s): the name server drops it when the connection closes.

    Every method raises :class:`~hanet.client.RemotingConnectionError`,
    :class:`~hanet.client.RemotingTimeoutError`, :class:`~hanet.client.RemotingProtocolError`
    (a malformed answer) or :class:`~hanet.client.RemotingResponseError` (an answer other than
    SUCCESS, with its code and the server's reason).
    """

    async def register_broker(
        self, registration: BrokerRegistration, data_version: DataVersion | None = None
    ) -> RegisterBrokerResponse:
        """Register (or renew) a broker (REGISTER_BROKER with its topic config body and
        ``bodyCrc32``); a slave's answer names its master when known."""
        request = registration.request(data_version)
        response = await self.invoke_checked(request, what="REGISTER_BROKER")
        return _decoded("REGISTER_BROKER", lambda: RegisterBrokerResponse.from_command(response))

    async def register_broker_oneway(
        self, registration: BrokerRegistration, data_version: DataVersion | None = None
    ) -> None:
        """REGISTER_BROKER marked oneway (no answer awaited): what RocketMQ's broker sends at
        once when a topic is created on it."""
        await self.invoke_oneway(registration.request(data_version))

    async def unregister_broker(self, registration: BrokerRegistration) -> None:
        """Remove a broker at once (a clean shutdown)."""
        await self.invoke_checked(registration.unregister_request(), what="UNREGISTER_BROKER")

    async def route_data(self, topic: str) -> TopicRouteData:
        """GET_ROUTEINFO_BY_TOPIC's answer as RocketMQ sends it.

        Raises:
            RemotingResponseError: TOPIC_NOT_EXIST when no live broker holds it.
        """
        request = RemotingCommand.request(
            RequestCode.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader(topic).to_fields()
        )
        response = await self.invoke_checked(request, what=f"route of {topic}")
        return _decoded("route", lambda: TopicRouteData.decode(response.body))

    async def route(self, topic: str) -> TopicRoute:
        """The brokers holding ``topic`` (see :meth:`route_data`)."""
        return TopicRoute.from_route_data(topic, await self.route_data(topic))

    async def cluster(self) -> ClusterInfo:
        """GET_BROKER_CLUSTER_INFO: every broker name's members, each cluster's names."""
        request = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO)
        response = await self.invoke_checked(request, what="cluster info")
        return _decoded("cluster info", lambda: ClusterInfo.decode(response.body))

    async def topics(self, cluster: str | None = None) -> TopicList:
        """Every topic (GET_ALL_TOPIC_LIST_FROM_NAMESERVER), or a cluster's
        (GET_TOPICS_BY_CLUSTER)."""
        if cluster is None:
            request = RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        else:
            fields = GetTopicsByClusterRequestHeader(cluster).to_fields()
            request = RemotingCommand.request(RequestCode.GET_TOPICS_BY_CLUSTER, fields)
        response = await self.invoke_checked(request, what="topic list")
        return _decoded("topic list", lambda: TopicList.decode(response.body))

    async def put_kv_config(self, namespace: str, key: str, value: str) -> None:
        """PUT_KV_CONFIG."""
        fields = PutKVConfigRequestHeader(namespace, key, value).to_fields()
        await self.invoke_checked(RemotingCommand.request(RequestCode.PUT_KV_CONFIG, fields))

    async def get_kv_config(self, namespace: str, key: str) -> str | None:
        """GET_KV_CONFIG: the value, or None when the name server has none."""
        fields = GetKVConfigRequestHeader(namespace, key).to_fields()
        response = await self.invoke(RemotingCommand.request(RequestCode.GET_KV_CONFIG, fields))
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        if response.code != ResponseCode.SUCCESS:
            raise RemotingResponseError(response, "GET_KV_CONFIG")
        return GetKVConfigResponseHeader.from_fields(response.fields).value


def _best_answer(answers: Sequence[RegisterBrokerResponse]) -> RegisterBrokerResponse:
    """Of several name servers' answers to one registration, the one that tells the most:
    a master with its HA address, else a master, else the first."""
    return max(
        answers, key=lambda a: (a.master_ha_address is not None, a.master_address is not None)
    )


@attrs.define
class NameServerClient:
    """The client of a list of name servers (``--namesrv A,B``), one short connection a call.

    Registration goes to every name server (as RocketMQ's brokers do); a lookup asks them in
    order until one answers. A failure (no connection, a timeout, a malformed answer, an
    answer other than SUCCESS and TOPIC_NOT_EXIST) is logged and the next is tried; when none
    answers, the last failure is raised. Errors are :class:`~hanet.client.RemotingError`\\ s.

    A registration lasts as long as the connection it was sent over: :meth:`register_broker`
    closes its connections when it returns, so the name servers drop it at once. A broker
    keeps its registration with :class:`hanet.broker.NameServerRegistrar` (one connection
    held per name server), or registers inside :meth:`connection`.

    Attributes:
        addresses: ``(host, port)`` of each name server.
        tls: the TLS context to connect with (None: plain TCP).
        timeout: seconds for connecting and for each answer.
        connector: opens the stream to a name server instead of TCP (``tls`` unused): given
            the address, a :data:`~hanet.boot.Connector` (a test's memory streams).
    """

    addresses: Sequence[tuple[str, int]]
    tls: ssl.SSLContext | None = None
    timeout: float = 3.0
    connector: Callable[[tuple[str, int]], Connector] | None = None

    def __attrs_post_init__(self) -> None:
        if not self.addresses:
            raise ValueError("no name server address")

    @asynccontextmanager
    async def connection(self, address: tuple[str, int]) -> AsyncIterator[NameServerConnection]:
        """A connection to the name server at ``address`` with this client's TLS and
        timeouts, closed when the block exits.

        Raises:
            RemotingConnectionError: it could not be made.
        """
        async with NameServerConnection.connect(
            address[0],
            address[1],
            connect_timeout=self.timeout,
            request_timeout=self.timeout,
            tls=self.tls,
            connector=None if self.connector is None else self.connector(address),
        ) as connection:
            yield connection

    async def _on(
        self, address: tuple[str, int], call: Callable[[NameServerConnection], Awaitable[T]]
    ) -> T:
        async with self.connection(address) as connection:
            return await call(connection)

    async def _first(self, call: Callable[[NameServerConnection], Awaitable[T]]) -> T:
        last: RemotingError | None = None
        for address in self.addresses:
            try:
                return await self._on(address, call)
            except RemotingResponseError as exc:
                if exc.code == ResponseCode.TOPIC_NOT_EXIST:
                    raise  # an answer: the topic has no route
                log.warning("name server %s:%d: %s", address[0], address[1], exc)
                last = exc
            except (RemotingConnectionError, RemotingTimeoutError) as exc:
                log.debug("name server %s:%d: %s", address[0], address[1], exc)
                last = exc
            except RemotingError as exc:  # a malformed answer: not a name server?
                log.warning("name server %s:%d: %s", address[0], address[1], exc)
                last = exc
        assert last is not None
        raise last

    async def register_broker(self, registration: BrokerRegistration) -> RegisterBrokerResponse:
        """Register with every name server (each drops it when this returns, see the class
        docstring); the answer that names a master wins (:func:`_best_answer`).

        Raises:
            RemotingResponseError: a name server refused the registration (its reason).
            RemotingConnectionError: no name server could be reached.
        """
        answers: list[RegisterBrokerResponse] = []
        errors: list[RemotingError] = []

        async def one(address: tuple[str, int]) -> None:
            try:
                answers.append(await self._on(address, lambda c: c.register_broker(registration)))
            except RemotingError as exc:  # unreachable, or the registration refused
                errors.append(exc)

        async with trio.open_nursery() as nursery:
            for address in self.addresses:
                nursery.start_soon(one, address)
        refused = [e for e in errors if isinstance(e, RemotingResponseError)]
        if refused:
            raise refused[0]
        if not answers:
            raise errors[-1]
        return _best_answer(answers)

    async def unregister_broker(self, registration: BrokerRegistration) -> None:
        """Unregister from every name server that can be reached, all at once (best effort:
        failures are logged)."""

        async def one(address: tuple[str, int]) -> None:
            try:
                await self._on(address, lambda c: c.unregister_broker(registration))
            except RemotingError as exc:
                log.debug("unregister at %s:%d: %s", address[0], address[1], exc)

        async with trio.open_nursery() as nursery:
            for address in self.addresses:
                nursery.start_soon(one, address)

    async def route(self, topic: str) -> TopicRoute:
        """The topic's route from the first name server that answers.

        Raises:
            RemotingResponseError: TOPIC_NOT_EXIST (no live broker holds it).
            RemotingConnectionError: no name server could be reached.
        """
        return await self._first(lambda c: c.route(topic))

    async def cluster(self) -> ClusterInfo:
        """The registered brokers (by broker name and cluster), from the first name server
        that answers."""
        return await self._first(lambda c: c.cluster())

    async def topics(self, cluster: str | None = None) -> TopicList:
        """Every topic (or a cluster's), from the first name server that answers."""
        return await self._first(lambda c: c.topics(cluster))

    async def put_addresses(self, topic: str) -> list[tuple[str, int]]:
        """Where to put ``topic``: the broker port of each master holding it writable; for a
        topic no broker holds yet, every registered master (the first put creates it there,
        as RocketMQ's ``autoCreateTopicEnable``). Connect with
        ``FailoverClient.connect(await names.put_addresses(topic))``.

        Raises:
            RemotingConnectionError: no master is registered (or no name server answers).
        """
        try:
            route = await self.route(topic)
        except RemotingResponseError as exc:
            if exc.code != ResponseCode.TOPIC_NOT_EXIST:
                raise
            members = (await self.cluster()).master_addresses()
            if not members:
                raise RemotingConnectionError(
                    "no master is registered with the name server"
                ) from exc
        else:
            members = [
                b.master_address
                for b in route.brokers
                if b.master_address is not None and b.perm & PERM_WRITE
            ]
            if not members:
                raise RemotingConnectionError(f"no master of {topic} is registered")
        return _addresses(members)

    async def pull_addresses(
        self, topic: str, broker_name: str | None = None
    ) -> list[tuple[str, int]]:
        """Where to pull ``topic`` from: the members of ``broker_name`` (default: the route's
        first broker name), the master first, then its slaves (a slave answers while the master
        is down).

        Raises:
            RemotingResponseError: TOPIC_NOT_EXIST when no live broker holds it.
            RemotingConnectionError: no such broker name holds it (or no name server answers).
        """
        route = await self.route(topic)
        chosen = [b for b in route.brokers if broker_name in (None, b.broker_name)]
        if not chosen:
            seen = ", ".join(b.broker_name for b in route.brokers)
            raise RemotingConnectionError(
                f"no broker name {broker_name!r} holds {topic} (route: {seen})"
            )
        return _addresses([address for _, address in sorted(chosen[0].addresses)])


def _addresses(members: Sequence[str]) -> list[tuple[str, int]]:
    parsed = (parse_broker_address(a) for a in members)
    return [a for a in parsed if a is not None]
