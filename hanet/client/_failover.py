"""A client of several broker ports that follows the leader (a DLedger group)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

from hanet.channel import parse_address
from hanet.errors import ConfigError
from hanet.protocol import BrokerStatus, MessageProperty, ResponseCode
from hanet.store import PutStatus

from ._broker import (
    BrokerClient,
    BrokerConnectionError,
    BrokerError,
    BrokerRequestError,
    PullResult,
    _unique_ids,
)
from ._messages import PutMessage, PutReply

__all__ = ["FailoverClient", "parse_broker_address"]

_UNIQ_KEY = MessageProperty.UNIQ_KEY.value


class FailoverClient:
    """A client of several broker ports (a DLedger group, or one broker): open it with
    :meth:`connect`; it has :class:`BrokerClient`'s ``put``, ``put_batch``, ``pull`` and
    ``status``.

    - It connects to the first address that accepts, in the order given.
    - With more than one address, a put refused with SERVICE_NOT_AVAILABLE (a DLedger
      follower or candidate, a slave: nothing was appended) is sent again to the leader: the
      one the answer's remark names, else the one the refusing node's status names (after a
      short pause when that node just redirected here, or when the leader it names did not
      accept a connection last time: a stale view after a leader died), or, while no leader
      is known (an election), to the next address after a short pause, until ``retry_for``
      seconds have passed. SYSTEM_BUSY (a leader with too many puts waiting) is retried the
      same way. With one address and no leader named, the refusal is returned as the put's
      status.
    - With more than one address, a lost or refused connection moves on to the next address and
      the request is sent again: a put whose connection was lost may then be stored twice (at
      least once), never silently lost. Every time a put is sent it carries the same
      ``UNIQ_KEY`` (the message id RocketMQ's consumers see), as a RocketMQ producer's retries
      do, so a consumer can tell the second copy. A put answered FLUSH_SLAVE_TIMEOUT (no quorum
      in time) is returned as it is: the outcome is unknown.

    Safe to share between tasks of one trio run.
    """

    def __init__(
        self,
        nursery: trio.Nursery,
        addresses: Sequence[tuple[str, int]],
        options: dict[str, Any],
        retry_for: float,
    ) -> None:
        if not addresses:
            raise ValueError("no broker address")
        self._nursery = nursery
        self.addresses = list(addresses)
        self._options = options
        self.retry_for = retry_for
        self._next = 0
        self._current: BrokerClient | None = None
        self._stops: dict[int, trio.Event] = {}
        self._lock = trio.Lock()
        self.redirects = 0
        """Refusals followed to another node (for tests and tools)."""
        self.resent = 0
        """Requests sent again after their connection failed (for tests and tools): a put may
        have reached the broker before that, and may then be stored twice."""

    @staticmethod
    @asynccontextmanager
    async def connect(
        addresses: Sequence[tuple[str, int]],
        *,
        retry_for: float = 30.0,
        **options: Any,
    ) -> AsyncIterator[FailoverClient]:
        """Connect to the first of ``addresses`` that accepts (``options``: those of
        :meth:`BrokerClient.connect`); everything closes when the block exits.

        Raises:
            BrokerConnectionError: no address accepts (the last failure's message).
        """
        error: BaseException | None = None
        async with trio.open_nursery() as nursery:
            client = FailoverClient(nursery, addresses, dict(options), retry_for)
            try:
                await client._client()
                yield client
            except BaseException as exc:
                error = exc
            finally:
                nursery.cancel_scope.cancel()
        if error is not None:
            raise error

    @property
    def address(self) -> tuple[str, int] | None:
        """The address connected to now, if any."""
        return self._current.address if self._current is not None else None

    async def _hold(
        self, address: tuple[str, int], task_status: trio.TaskStatus[BrokerClient]
    ) -> None:
        stop = trio.Event()
        async with BrokerClient.connect(address[0], address[1], **self._options) as client:
            self._stops[id(client)] = stop
            task_status.started(client)
            try:
                await stop.wait()
            finally:
                self._stops.pop(id(client), None)

    def _drop(self, client: BrokerClient) -> None:
        if self._current is client:
            self._current = None
        stop = self._stops.get(id(client))
        if stop is not None:
            stop.set()

    async def _client(self, prefer: tuple[str, int] | None = None) -> BrokerClient:
        """The current connection, or a new one (to ``prefer`` first, then in order)."""
        current = self._current
        if current is not None and current.is_connected and prefer in (None, current.address):
            return current  # no checkpoint: the request leaves as BrokerClient's would
        async with self._lock:
            current = self._current
            if current is not None and current.is_connected and prefer in (None, current.address):
                return current
            if current is not None:
                self._drop(current)
            order = [
                self.addresses[(self._next + i) % len(self.addresses)]
                for i in range(len(self.addresses))
            ]
            if prefer is not None:
                order = [prefer, *(a for a in order if a != prefer)]
            last: BrokerError | None = None
            for address in order:
                try:
                    client: BrokerClient = await self._nursery.start(self._hold, address)
                except BrokerError as exc:
                    last = exc
                    continue
                self._current = client
                if address in self.addresses:
                    self._next = self.addresses.index(address)
                return client
            assert last is not None
            raise last

    def _advance(self, client: BrokerClient) -> None:
        self._drop(client)
        if client.address in self.addresses:
            self._next = (self.addresses.index(client.address) + 1) % len(self.addresses)

    async def _retrying(self, call: Any) -> Any:
        deadline = trio.current_time() + self.retry_for
        prefer: tuple[str, int] | None = None
        redirected_from: tuple[str, int] | None = None  # where the last redirect came from
        down: tuple[str, int] | None = None  # the last leader named that did not accept
        while True:
            try:
                client = await self._client(prefer)
            except BrokerConnectionError:
                if len(self.addresses) == 1 or trio.current_time() >= deadline:
                    raise
                await trio.sleep(0.1)
                continue
            if prefer is not None and client.address != prefer:
                down = prefer
            prefer = None
            try:
                return await call(client)
            except BrokerRequestError as exc:
                if trio.current_time() >= deadline:
                    raise
                if exc.code == ResponseCode.SERVICE_NOT_AVAILABLE:
                    self.redirects += 1
                    leader = exc.leader_address or await _leader_of(client)
                    target = parse_broker_address(leader) if leader else None
                    if target is not None and target != client.address:
                        if target in (redirected_from, down):
                            # Two nodes naming each other, or a node naming a leader that is
                            # down (a stale view of the leader, e.g. before an election):
                            # pause rather than bounce at full speed.
                            await trio.sleep(0.05)
                        redirected_from = client.address
                        prefer = target
                        continue
                    self._advance(client)
                    await trio.sleep(0.1)
                    continue
                if exc.code == ResponseCode.SYSTEM_BUSY:
                    await trio.sleep(0.05)
                    continue
                raise
            except BrokerConnectionError:
                if len(self.addresses) == 1 or trio.current_time() >= deadline:
                    raise
                self.resent += 1
                self._advance(client)
                await trio.sleep(0.05)

    async def put(self, topic: str, body: bytes, **kwargs: Any) -> PutReply:
        """:meth:`BrokerClient.put` on the leader (see the class docstring), with one
        ``UNIQ_KEY`` however often it is sent (the caller's, when ``properties`` has one)."""
        kwargs["properties"] = _keyed(kwargs.get("properties"))
        replies: list[PutReply] = await self._retrying(
            lambda c: self._refused(c.put(topic, body, **kwargs))
        )
        return replies[0]

    async def put_batch(self, messages: Sequence[PutMessage]) -> list[PutReply]:
        """:meth:`BrokerClient.put_batch` on the leader (see the class docstring), each
        message with one ``UNIQ_KEY`` however often it is sent (its own, when its
        ``properties`` have one)."""
        messages = [
            attrs.evolve(m, properties=((_UNIQ_KEY, _unique_ids()), *m.properties))
            for m in messages
        ]
        replies: list[PutReply] = await self._retrying(
            lambda c: self._refused(c.put_batch(messages))
        )
        return replies

    async def _refused(self, call: Any) -> list[PutReply]:
        """The replies of ``call``; a refusal that another node may not make raised as
        :class:`BrokerRequestError` so that it is retried elsewhere: SERVICE_NOT_AVAILABLE
        naming a leader, or with several addresses; OS_PAGE_CACHE_BUSY with several."""
        result = await call
        replies: list[PutReply] = result if isinstance(result, list) else [result]
        several = len(self.addresses) > 1
        for reply in replies:
            leader = _named_leader(reply.detail)
            if reply.status is PutStatus.SERVICE_NOT_AVAILABLE and (several or leader):
                raise BrokerRequestError(ResponseCode.SERVICE_NOT_AVAILABLE, reply.detail, leader)
            if reply.status is PutStatus.OS_PAGE_CACHE_BUSY and several:
                raise BrokerRequestError(ResponseCode.SYSTEM_BUSY, reply.detail)
        return replies

    async def pull(
        self, topic: str, queue_id: int, offset: int = 0, max_messages: int = 32
    ) -> PullResult:
        """:meth:`BrokerClient.pull` on the current broker."""
        result: PullResult = await self._retrying(
            lambda c: c.pull(topic, queue_id, offset, max_messages)
        )
        return result

    async def status(self) -> BrokerStatus:
        """:meth:`BrokerClient.status` of the current broker."""
        status: BrokerStatus = await self._retrying(lambda c: c.status())
        return status


def _keyed(properties: Mapping[str, str] | None) -> dict[str, str]:
    """``properties`` with a new ``UNIQ_KEY`` unless they have one (the put's properties keep
    their order: the producer's ``UNIQ_KEY`` comes where it always does)."""
    keyed = {_UNIQ_KEY: _unique_ids()}
    if properties:
        keyed.update(properties)
    return keyed


_LEADER = re.compile(r"leader\b.*?(\[[0-9a-fA-F:]+\]:\d+|[\w.-]+:\d+)")


def _named_leader(remark: str) -> str | None:
    """The first ``host:port`` a refusal's remark names after the word "leader", if any
    ("... the leader is n1 at 10.0.0.2:10911")."""
    match = _LEADER.search(remark)
    return match.group(1) if match else None


async def _leader_of(client: BrokerClient) -> str | None:
    """The leader's broker port that ``client``'s node knows of (its DLedger status), or None
    (not a DLedger node, no leader yet, or it does not answer)."""
    try:
        status = await client.status()
    except BrokerError:
        return None
    dledger = status.dledger
    return dledger.leader_address if dledger is not None else None


def parse_broker_address(address: str) -> tuple[str, int] | None:
    """``host:port`` (``[v6]:port`` too) split, or None when it is not one: no host, or a
    port that is not a number from 1 to 65535 (the text may come from the network: a
    NOT_LEADER answer, a route)."""
    try:
        host, port = parse_address(address, default_host="")
    except ConfigError:
        return None
    if not host or port == 0:
        return None
    return host, port
