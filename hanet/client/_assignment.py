"""Which queues of a topic a consumer holds among its group's members (rebalancing), sans-IO.

:class:`Assignment` keeps the queues held, a generation per queue (bumped when the queue is
released: messages pulled before are dropped) and when the next rebalance is due; the
consumer's driver asks it what to do and does the I/O (heartbeats, the member list, commits
of the queues lost). Times are passed in (trio's clock in the consumer, plain numbers in
tests), so every decision is deterministic.

The share is RocketMQ's ``AllocateMessageQueueAveragely`` over the topic's queues sorted by
broker name, then queue id, and the members' sorted client ids.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Sequence
from typing import TypeVar

import attrs

from hanet.protocol import TopicRoute

__all__ = [
    "MAX_ROUTE_QUEUES",
    "Assignment",
    "QueueKey",
    "Rebalance",
    "RebalanceOutcome",
    "allocate_averagely",
    "bounded_route",
    "queues_of",
]

log = logging.getLogger("hanet.client.consumer")

QueueKey = tuple[str, int]
"""A queue of the topic: ``(broker_name, queue_id)``."""

MAX_ROUTE_QUEUES = 1024
"""Most queues of a broker name the consumer takes from a route (the name server refuses
registrations with more: ``hanet.namesrv.MAX_QUEUES``); queue ids above are ignored, so a
route naming 2**31-1 queues does not make it hold that many."""

T = TypeVar("T")


def allocate_averagely(queues: Sequence[T], client_ids: Sequence[str], client_id: str) -> list[T]:
    """The queues ``client_id`` takes (RocketMQ's ``AllocateMessageQueueAveragely``).

    Both lists must be sorted the same way by every member. Each member takes a contiguous
    range; the first ``len(queues) % len(client_ids)`` members take one more. A member not in
    ``client_ids`` takes nothing; with more members than queues the last ones take nothing.
    """
    if client_id not in client_ids or not queues:
        return []
    index = client_ids.index(client_id)
    count, members = len(queues), len(client_ids)
    mod = count % members
    first = mod > 0 and index < mod  # one of the members taking one queue more
    size = 1 if count <= members else count // members + (1 if first else 0)
    start = index * size if first else index * size + mod
    return [queues[(start + i) % count] for i in range(min(size, count - start))]


def bounded_route(route: TopicRoute) -> TopicRoute:
    """``route`` with at most :data:`MAX_ROUTE_QUEUES` queues per broker name."""
    if all(broker.queues <= MAX_ROUTE_QUEUES for broker in route.brokers):
        return route
    for broker in route.brokers:
        if broker.queues > MAX_ROUTE_QUEUES:
            log.warning(
                "route of %s: %s has %d queues; taking the first %d",
                route.topic, broker.broker_name, broker.queues, MAX_ROUTE_QUEUES,
            )  # fmt: skip
    brokers = tuple(
        attrs.evolve(broker, queues=min(broker.queues, MAX_ROUTE_QUEUES))
        for broker in route.brokers
    )
    return attrs.evolve(route, brokers=brokers)


def queues_of(route: TopicRoute | None) -> list[QueueKey]:
    """Every queue of the route, sorted (how each member lists them to share them out); none
    without a route."""
    if route is None:
        return []
    return sorted((b.broker_name, q) for b in route.brokers for q in range(b.queues))


class RebalanceOutcome(enum.Enum):
    """What a rebalance decided."""

    NO_MEMBERS = "no broker answers the member list: the queues held are kept"
    NOT_LISTED = "the member list does not name this consumer yet: the queues held are kept"
    UNCHANGED = "the share is the queues held"
    CHANGED = "the share changed: release ``lost`` (commit first), then take ``gained``"


@attrs.frozen
class Rebalance:
    """A rebalance's decision.

    Attributes:
        outcome: what was decided.
        held: the queues held once it is carried out.
        lost: queues to release, sorted (committed first, then given up).
        gained: queues to take, sorted (each starts from the group's committed offset).
    """

    outcome: RebalanceOutcome
    held: frozenset[QueueKey]
    lost: tuple[QueueKey, ...] = ()
    gained: tuple[QueueKey, ...] = ()


class Assignment:
    """The queues one member holds and when it shares them out again.

    A rebalance is due at the start, every ``interval`` seconds, at once on :meth:`request`
    (a broker said the members changed, or the route's queues changed) and when
    :meth:`members_seen` sees the list change (that list is used as it is, for
    ``fresh_for`` seconds: the rebalance it starts asks no broker again). While the member
    list does not name this consumer yet, it is asked again within ``min(1, listed_retry)``
    seconds.
    """

    def __init__(
        self, client_id: str, interval: float, listed_retry: float, fresh_for: float = 1.0
    ) -> None:
        self.client_id = client_id
        self.interval = interval
        self.listed_retry = listed_retry
        self.fresh_for = fresh_for
        self.held: frozenset[QueueKey] = frozenset()
        self.members: tuple[str, ...] = ()
        """The members at the last rebalance that got a list (sorted client ids)."""
        self.due = -1.0
        self._generations: dict[QueueKey, int] = {}
        self._fresh: tuple[tuple[str, ...], float] | None = None  # (list, when)

    def generation(self, key: QueueKey) -> int:
        """How many times ``key`` was released: a message pulled under an older generation
        is not handed out (its queue's new holder delivers it)."""
        return self._generations.get(key, 0)

    def is_due(self, now: float) -> bool:
        """Whether a rebalance should run now."""
        return now >= self.due

    def request(self, now: float) -> None:
        """Rebalance at once, with a member list asked anew."""
        self.due = now
        self._fresh = None

    def route_changed(self, before: TopicRoute | None, after: TopicRoute, now: float) -> None:
        """A new route: rebalance at once when its queues differ."""
        if queues_of(after) != queues_of(before):
            self.due = now

    def members_seen(self, members: tuple[str, ...], now: float) -> bool:
        """A member list the heartbeat loop fetched: when it differs from the last one, a
        rebalance is due at once and takes this list. True when it differs."""
        if members == self.members:
            return False
        self.due = now
        self._fresh = (members, now)
        return True

    def start(self, now: float) -> tuple[str, ...] | None:
        """A rebalance starts: the next one is due ``interval`` from now. The member list to
        use when the heartbeat loop fetched one just now, else None (ask the brokers)."""
        self.due = now + self.interval
        fresh, self._fresh = self._fresh, None
        if fresh is not None and now - fresh[1] <= self.fresh_for:
            return fresh[0]
        return None

    def decide(
        self, queues: Sequence[QueueKey], members: tuple[str, ...] | None, now: float
    ) -> Rebalance:
        """This member's share of ``queues`` (sorted) among ``members`` (None: no broker
        answered). The decision is not carried out: :meth:`release` each lost queue, then
        :meth:`take` the decision."""
        if members is None:
            return Rebalance(RebalanceOutcome.NO_MEMBERS, self.held)
        self.members = members
        if self.client_id not in members:
            self.due = now + min(1.0, self.listed_retry)
            return Rebalance(RebalanceOutcome.NOT_LISTED, self.held)
        mine = frozenset(allocate_averagely(queues, members, self.client_id))
        if mine == self.held:
            return Rebalance(RebalanceOutcome.UNCHANGED, mine)
        return Rebalance(
            RebalanceOutcome.CHANGED,
            mine,
            lost=tuple(sorted(self.held - mine)),
            gained=tuple(sorted(mine - self.held)),
        )

    def release(self, key: QueueKey) -> None:
        """Give ``key`` up: it is no longer held and what was pulled of it is dropped."""
        self.held = self.held - {key}
        self._generations[key] = self.generation(key) + 1

    def take(self, decision: Rebalance) -> None:
        """Hold what ``decision`` decided (its lost queues released already)."""
        self.held = decision.held
