"""Asking the members of a broker name in turn: the one place that decides which member the
consumer asks next and what a failure means.

Members are asked in the order ``first`` (the member a pull answer suggested, or the master),
the master, then the slaves by id; a member whose connection failed is skipped for the
pool's retry interval. A member that cannot be reached (:class:`BrokerConnectionError`,
:class:`BrokerTimeoutError`) is skipped from then on and reported (the consumer looks the
route up again); one that answers an error is logged and the next one asked.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import Generic, TypeVar

import attrs

from hanet.protocol import MASTER_ID, RouteBroker

from ._broker import BrokerConnectionError, BrokerError, BrokerTimeoutError
from ._pool import BrokerLink, ConnectionPool

__all__ = ["LINK_ERRORS", "Answer", "MemberCaller"]

log = logging.getLogger("hanet.client.consumer")

T = TypeVar("T")

LINK_ERRORS = (BrokerConnectionError, BrokerTimeoutError)
"""Failures that say a member cannot be reached (it is skipped for a while)."""


@attrs.frozen
class Answer(Generic[T]):
    """What a member answered.

    Attributes:
        broker_id: the member (0: the master, 1 and up: a slave).
        value: its answer.
        tried: members asked, this one included (more than one: a failover).
    """

    broker_id: int
    value: T
    tried: int


class MemberCaller:
    """Calls the members of a broker name through ``pool``; ``on_unreachable`` is told of
    each member that cannot be reached (after it is marked failed in the pool)."""

    def __init__(self, pool: ConnectionPool, on_unreachable: Callable[[], None]) -> None:
        self.pool = pool
        self._on_unreachable = on_unreachable

    def order(self, broker: RouteBroker, first: int = MASTER_ID) -> Iterator[tuple[int, str]]:
        """The members to ask, in order: ``first``, the master, the slaves by id; those being
        skipped after a failure left out."""
        order = sorted(broker.addresses, key=lambda m: (m[0] != first, m[0] != MASTER_ID, m[0]))
        for broker_id, address in order:
            if not self.pool.is_down(address):
                yield broker_id, address

    async def first(
        self,
        broker: RouteBroker,
        call: Callable[[BrokerLink], Awaitable[T]],
        *,
        what: str,
        first: int = MASTER_ID,
        after_error: bool = True,
    ) -> Answer[T] | None:
        """Ask the members in turn with ``call`` until one answers: its answer, or None when
        none did. An error answer (:class:`BrokerError`) is logged as ``what`` and the next
        member asked, or (``after_error=False``) none."""
        tried = 0
        for broker_id, address in self.order(broker, first):
            tried += 1
            try:
                link = await self.pool.get(address)
                value = await call(link)
            except LINK_ERRORS as exc:
                self.unreachable(broker, broker_id, address, exc)
                continue
            except BrokerError as exc:
                log.warning("%s (%s): %s", what, address, exc)
                if not after_error:
                    return None
                continue
            return Answer(broker_id, value, tried)
        return None

    async def each(
        self,
        broker: RouteBroker,
        call: Callable[[BrokerLink], Awaitable[bool]],
        *,
        what: str,
    ) -> None:
        """Call every member that can be reached, master first; a call returning False (the
        link does not serve the request) ends the round for this broker name. Error answers
        are logged at DEBUG as ``what``."""
        for broker_id, address in self.order(broker):
            try:
                link = await self.pool.get(address)
                if not await call(link):
                    return
            except LINK_ERRORS as exc:
                self.unreachable(broker, broker_id, address, exc)
            except BrokerError as exc:
                log.debug("%s (%s): %s", what, address, exc)

    def unreachable(
        self, broker: RouteBroker, broker_id: int, address: str, exc: BaseException
    ) -> None:
        """``address`` cannot be reached: skip it for the retry interval, and say so."""
        role = "master" if broker_id == MASTER_ID else f"slave {broker_id}"
        # Said once; retried every retry interval until it answers again.
        level = logging.DEBUG if self.pool.has_failed(address) else logging.WARNING
        log.log(
            level, "%s %s (%s) failed: %s; using another member, retrying every %g s",
            broker.broker_name, role, address, exc, self.pool.retry_interval,
        )  # fmt: skip
        self.pool.failed(address)
        self._on_unreachable()
