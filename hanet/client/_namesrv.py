"""Clients of the name server: one connection, and the client of a list of name servers."""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import attrs
import trio

from hanet.protocol import (
    MASTER_ID,
    BrokerRegistration,
    ClusterInfo,
    ClusterRequest,
    ClusterResponse,
    ErrorCode,
    RegisterBrokerRequest,
    RegisterBrokerResponse,
    RouteRequest,
    RouteResponse,
    TopicRoute,
    UnregisterBrokerRequest,
    UnregisterBrokerResponse,
)

from ._broker import (
    BrokerConnectionError,
    BrokerError,
    BrokerRequestError,
    BrokerTimeoutError,
    RequestConnection,
)
from ._failover import parse_broker_address

__all__ = ["NameServerClient", "NameServerConnection"]

log = logging.getLogger("hanet.client")

T = TypeVar("T")


class NameServerConnection(RequestConnection):
    """A connection to one name server (``hanet namesrv``). Open it with :meth:`connect`."""

    async def register_broker(self, registration: BrokerRegistration) -> RegisterBrokerResponse:
        """Register (or renew) a broker; a slave's answer names its master when known."""
        response = await self._call(lambda rid: RegisterBrokerRequest(rid, registration))
        answer: RegisterBrokerResponse = self._expect(response, RegisterBrokerResponse)
        return answer

    async def unregister_broker(self, registration: BrokerRegistration) -> None:
        """Remove a broker at once (a clean shutdown)."""
        r = registration
        response = await self._call(
            lambda rid: UnregisterBrokerRequest(
                rid, r.cluster, r.broker_name, r.broker_id, r.broker_address
            )
        )
        self._expect(response, UnregisterBrokerResponse)

    async def route(self, topic: str) -> TopicRoute:
        """The brokers holding ``topic``.

        Raises:
            BrokerRequestError: TOPIC_NOT_EXIST when no live broker holds it.
        """
        response = await self._call(lambda rid: RouteRequest(rid, topic))
        answer: RouteResponse = self._expect(response, RouteResponse)
        return answer.route

    async def cluster(self) -> ClusterInfo:
        """Every live broker, with its last registration."""
        response = await self._call(ClusterRequest)
        answer: ClusterResponse = self._expect(response, ClusterResponse)
        return answer.cluster


@attrs.define
class NameServerClient:
    """The client of a list of name servers (``--namesrv A,B``), one short connection a call.

    Registration goes to every name server (as RocketMQ's brokers do); a lookup asks them in
    order until one answers. A failure (no connection, a timeout, a malformed answer, an ERROR
    other than TOPIC_NOT_EXIST) is logged and the next is tried; when none answers, the last
    failure is raised.

    Attributes:
        addresses: ``(host, port)`` of each name server.
        tls: the TLS context to connect with (None: plain TCP).
        timeout: seconds for connecting and for each answer.
    """

    addresses: Sequence[tuple[str, int]]
    tls: ssl.SSLContext | None = None
    timeout: float = 3.0

    def __attrs_post_init__(self) -> None:
        if not self.addresses:
            raise ValueError("no name server address")

    async def _on(
        self, address: tuple[str, int], call: Callable[[NameServerConnection], Awaitable[T]]
    ) -> T:
        async with NameServerConnection.connect(
            address[0],
            address[1],
            connect_timeout=self.timeout,
            request_timeout=self.timeout,
            tls=self.tls,
        ) as connection:
            return await call(connection)

    async def _first(self, call: Callable[[NameServerConnection], Awaitable[T]]) -> T:
        last: BrokerError | None = None
        for address in self.addresses:
            try:
                return await self._on(address, call)
            except BrokerRequestError as exc:
                if exc.code is ErrorCode.TOPIC_NOT_EXIST:
                    raise  # an answer: the topic has no route
                log.warning("name server %s:%d: %s", address[0], address[1], exc)
                last = exc
            except (BrokerConnectionError, BrokerTimeoutError) as exc:
                log.debug("name server %s:%d: %s", address[0], address[1], exc)
                last = exc
            except BrokerError as exc:  # a malformed answer: not a name server?
                log.warning("name server %s:%d: %s", address[0], address[1], exc)
                last = exc
        assert last is not None
        raise last

    async def register_broker(self, registration: BrokerRegistration) -> RegisterBrokerResponse:
        """Register with every name server; the answer that names a master wins.

        Raises:
            BrokerRequestError: a name server refused the registration (its reason).
            BrokerConnectionError: no name server could be reached.
        """
        answers: list[RegisterBrokerResponse] = []
        errors: list[BrokerError] = []

        async def one(address: tuple[str, int]) -> None:
            try:
                answers.append(await self._on(address, lambda c: c.register_broker(registration)))
            except BrokerError as exc:  # unreachable, or the registration refused (ERROR)
                errors.append(exc)

        async with trio.open_nursery() as nursery:
            for address in self.addresses:
                nursery.start_soon(one, address)
        refused = [e for e in errors if isinstance(e, BrokerRequestError)]
        if refused:
            raise refused[0]
        if not answers:
            raise errors[-1]
        for answer in answers:
            if answer.master_ha_address is not None:
                return answer
        return answers[0]

    async def unregister_broker(self, registration: BrokerRegistration) -> None:
        """Unregister from every name server that can be reached, all at once (best effort:
        failures are logged)."""

        async def one(address: tuple[str, int]) -> None:
            try:
                await self._on(address, lambda c: c.unregister_broker(registration))
            except BrokerError as exc:
                log.debug("unregister at %s:%d: %s", address[0], address[1], exc)

        async with trio.open_nursery() as nursery:
            for address in self.addresses:
                nursery.start_soon(one, address)

    async def route(self, topic: str) -> TopicRoute:
        """The topic's route from the first name server that answers.

        Raises:
            BrokerRequestError: TOPIC_NOT_EXIST (no live broker holds it).
            BrokerConnectionError: no name server could be reached.
        """
        return await self._first(lambda c: c.route(topic))

    async def cluster(self) -> ClusterInfo:
        """The live brokers, from the first name server that answers."""
        return await self._first(lambda c: c.cluster())

    async def put_addresses(self, topic: str) -> list[tuple[str, int]]:
        """Where to put ``topic``: the broker port of each master holding it; for a topic no
        broker holds yet, every registered master (the first put creates it there, as
        RocketMQ's ``autoCreateTopicEnable``). Connect with
        ``FailoverClient.connect(await names.put_addresses(topic))``.

        Raises:
            BrokerConnectionError: no master is registered (or no name server answers).
        """
        try:
            route = await self.route(topic)
        except BrokerRequestError as exc:
            if exc.code is not ErrorCode.TOPIC_NOT_EXIST:
                raise
            cluster = await self.cluster()
            members = [
                b.registration.broker_address
                for b in sorted(cluster.brokers, key=lambda b: b.registration.broker_name)
                if b.registration.broker_id == MASTER_ID
            ]
            if not members:
                raise BrokerConnectionError("no master is registered with the name server") from exc
        else:
            members = [b.master_address for b in route.brokers if b.master_address is not None]
            if not members:
                raise BrokerConnectionError(f"no master of {topic} is registered")
        return _addresses(members)

    async def pull_addresses(
        self, topic: str, broker_name: str | None = None
    ) -> list[tuple[str, int]]:
        """Where to pull ``topic`` from: the members of ``broker_name`` (default: the route's
        first broker name), the master first, then its slaves (a slave answers while the master
        is down).

        Raises:
            BrokerRequestError: TOPIC_NOT_EXIST when no live broker holds it.
            BrokerConnectionError: no such broker name holds it (or no name server answers).
        """
        route = await self.route(topic)
        chosen = [b for b in route.brokers if broker_name in (None, b.broker_name)]
        if not chosen:
            seen = ", ".join(b.broker_name for b in route.brokers)
            raise BrokerConnectionError(
                f"no broker name {broker_name!r} holds {topic} (route: {seen})"
            )
        return _addresses([address for _, address in sorted(chosen[0].addresses)])


def _addresses(members: Sequence[str]) -> list[tuple[str, int]]:
    parsed = (parse_broker_address(a) for a in members)
    return [a for a in parsed if a is not None]
