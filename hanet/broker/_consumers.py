"""Consumer group membership: which clients of each group are alive (RocketMQ's
``ConsumerManager``), sans-IO.

A consumer heartbeats (CONSUMER_HEARTBEAT) its group and client id to the brokers; the members
of a group are the ids heard from within the last :data:`CONSUMER_EXPIRY` seconds (RocketMQ's
``channelExpiredTimeout``, 120 s) and not unregistered since (UNREGISTER_CONSUMER, a clean
shutdown). GET_CONSUMER_LIST answers :meth:`ConsumerRegistry.members`, from which each member
takes its share of a topic's queues. The registry lives in memory only: after a restart the
members are back within one heartbeat interval.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from hanet.protocol import ConsumerGroupInfo

__all__ = ["CONSUMER_EXPIRY", "ConsumerRegistry", "consumer_groups"]

CONSUMER_EXPIRY = 120.0
"""Seconds without a heartbeat after which a consumer leaves its group (RocketMQ's
``channelExpiredTimeout``)."""


class ConsumerRegistry:
    """The live members of each consumer group, with the time each was last heard from.

    Expired members are dropped whenever the registry is asked or told anything (no task of
    its own), so it runs the same under a real clock and a virtual one.

    Args:
        expiry: a member not heard from for more than this many seconds is dropped.
        clock: the time source in seconds (:func:`time.monotonic`; the broker passes
            :func:`trio.current_time`, which a test's virtual clock moves).
    """

    def __init__(
        self, expiry: float = CONSUMER_EXPIRY, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if expiry <= 0:
            raise ValueError(f"expiry must be positive, not {expiry}")
        self.expiry = expiry
        self.clock = clock
        self._groups: dict[str, dict[str, float]] = {}

    def heartbeat(self, group: str, client_id: str) -> bool:
        """``client_id`` of ``group`` is alive now; True when it was not a member."""
        now = self.clock()
        self._expire(now)
        members = self._groups.setdefault(group, {})
        joined = client_id not in members
        members[client_id] = now
        return joined

    def unregister(self, group: str, client_id: str) -> bool:
        """``client_id`` leaves ``group`` at once; True when it was a member."""
        self._expire(self.clock())
        members = self._groups.get(group)
        if members is None or client_id not in members:
            return False
        del members[client_id]
        if not members:
            del self._groups[group]
        return True

    def members(self, group: str) -> tuple[str, ...]:
        """The client ids of ``group``'s live members, sorted (empty for an unknown group)."""
        self._expire(self.clock())
        return tuple(sorted(self._groups.get(group, ())))

    def groups(self) -> dict[str, tuple[str, ...]]:
        """Every group with live members, and those members (sorted)."""
        self._expire(self.clock())
        return {group: tuple(sorted(ids)) for group, ids in sorted(self._groups.items())}

    def _expire(self, now: float) -> None:
        deadline = now - self.expiry
        for group in list(self._groups):
            members = self._groups[group]
            for client_id in [c for c, seen in members.items() if seen < deadline]:
                del members[client_id]
            if not members:
                del self._groups[group]


def consumer_groups(registry: ConsumerRegistry) -> tuple[ConsumerGroupInfo, ...]:
    """The STATUS document's ``consumer_groups``: each group with live members."""
    return tuple(ConsumerGroupInfo(group, ids) for group, ids in registry.groups().items())
