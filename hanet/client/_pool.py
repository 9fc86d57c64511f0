"""The consumer's broker connections: one per broker address, opened on first use, held
open in a nursery, and skipped for a while after a failure.

What the consumer asks of a connection is :class:`BrokerLink` (with :class:`MembershipLink`
for consumer groups); :class:`BrokerConnector` opens one (:func:`broker_connector`:
:class:`BrokerClient`; tests pass fakes).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol, runtime_checkable

import trio

from ._broker import BrokerClient, BrokerConnectionError, BrokerError, PullResult
from ._failover import parse_broker_address
from ._remoting import ServerRequestHandler

__all__ = [
    "BrokerConnector",
    "BrokerLink",
    "ConnectionPool",
    "MembershipLink",
    "broker_connector",
]

log = logging.getLogger("hanet.client.consumer")


class BrokerLink(Protocol):
    """What the consumer asks of a broker connection (:class:`BrokerClient` has it)."""

    async def pull(
        self, topic: str, queue_id: int, offset: int = 0, max_messages: int = 32, *, group: str
    ) -> PullResult: ...

    async def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None: ...

    async def query_offset(self, group: str, topic: str, queue_id: int) -> int | None: ...


@runtime_checkable
class MembershipLink(Protocol):
    """A broker connection that serves consumer groups (:class:`BrokerClient` does); a link
    without these methods makes the consumer alone in its group."""

    async def consumer_heartbeat(
        self,
        group: str,
        client_id: str,
        topics: Sequence[str] = (),
        *,
        from_beginning: bool,
        sub_version: int | None = None,
    ) -> None: ...

    async def unregister_consumer(self, group: str, client_id: str) -> None: ...

    async def consumer_list(self, group: str) -> tuple[str, ...]: ...


@runtime_checkable
class _Closable(Protocol):
    """A link that tells whether its connection is still open (:class:`BrokerClient`)."""

    @property
    def is_connected(self) -> bool: ...


class BrokerConnector(Protocol):
    """Opens a connection to a broker port given as ``host:port`` whose requests from the
    broker (``NOTIFY_CONSUMER_IDS_CHANGED``) go to ``on_request``; raises
    :class:`BrokerConnectionError` when it cannot."""

    def __call__(
        self, address: str, *, on_request: ServerRequestHandler | None = None
    ) -> AbstractAsyncContextManager[BrokerLink]: ...


class ConnectionPool:
    """One connection per broker address, held open in a nursery; failed addresses are
    skipped for ``retry_interval`` seconds."""

    def __init__(
        self,
        nursery: trio.Nursery,
        connector: BrokerConnector,
        retry_interval: float,
        on_request: ServerRequestHandler | None = None,
    ) -> None:
        self._nursery = nursery
        self._connector = connector
        self._on_request = on_request
        self.retry_interval = retry_interval
        self._links: dict[str, BrokerLink] = {}
        self._stops: dict[str, trio.Event] = {}
        self._down_until: dict[str, float] = {}
        self._scopes: set[trio.CancelScope] = set()
        self._lock = trio.Lock()

    def has_failed(self, address: str) -> bool:
        """True when the last connection to ``address`` failed (it has not answered since)."""
        return address in self._down_until

    def is_down(self, address: str) -> bool:
        """True while a failed address is being skipped."""
        return self._down_until.get(address, -1.0) > trio.current_time()

    async def _hold(self, address: str, task_status: trio.TaskStatus[BrokerLink]) -> None:
        started = False
        stop = trio.Event()
        # Shielded: a cancellation of the consumer leaves the connections open for the last
        # commit; :meth:`close` ends them (connecting is bounded by the connect timeout).
        with trio.CancelScope(shield=True) as scope:
            self._scopes.add(scope)
            try:
                async with self._connector(address, on_request=self._on_request) as link:
                    self._stops[address] = stop
                    task_status.started(link)
                    started = True
                    await stop.wait()
            except BrokerError as exc:
                if not started:
                    raise
                log.debug("connection to %s ended: %s", address, exc)
            finally:
                self._scopes.discard(scope)
                if self._stops.get(address) is stop:
                    del self._stops[address]

    def close(self) -> None:
        """Close every connection."""
        self._links.clear()
        for scope in list(self._scopes):
            scope.cancel()

    async def get(self, address: str) -> BrokerLink:
        """The connection to ``address``, opened when there is none.

        Raises:
            BrokerConnectionError: the address is being skipped, or does not accept, or its
                connection closed since (a malformed answer closes it): then it is skipped
                for ``retry_interval`` seconds like any failed member.
        """
        link = self._links.get(address)
        if link is not None and isinstance(link, _Closable) and not link.is_connected:
            self.failed(address)
            raise BrokerConnectionError(f"connection to {address} closed")
        if link is not None:
            return link
        async with self._lock:
            link = self._links.get(address)
            if link is not None:
                return link
            if self.is_down(address):
                raise BrokerConnectionError(f"{address} failed recently; skipped for now")
            try:
                opened: BrokerLink = await self._nursery.start(self._hold, address)
            except BrokerError:
                self.failed(address)
                raise
            self._links[address] = opened
            if self._down_until.pop(address, None) is not None:
                log.info("%s answers again", address)
            return opened

    def failed(self, address: str) -> None:
        """Close the connection to ``address`` and skip it for ``retry_interval`` seconds."""
        self._links.pop(address, None)
        stop = self._stops.pop(address, None)
        if stop is not None:
            stop.set()
        self._down_until[address] = trio.current_time() + self.retry_interval


def broker_connector(*, tls: ssl.SSLContext | None = None, timeout: float = 5.0) -> BrokerConnector:
    """A :class:`BrokerConnector` opening :class:`BrokerClient` connections (``timeout``: seconds
    to connect and per request)."""

    def connect(
        address: str, *, on_request: ServerRequestHandler | None = None
    ) -> AbstractAsyncContextManager[BrokerLink]:
        parsed = parse_broker_address(address)
        if parsed is None:
            raise BrokerConnectionError(f"not a broker address: {address!r}")
        return BrokerClient.connect(
            parsed[0],
            parsed[1],
            connect_timeout=timeout,
            request_timeout=timeout,
            tls=tls,
            on_request=on_request,
        )

    return connect
