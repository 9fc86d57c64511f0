"""Consumer group membership: which clients of each group are alive (RocketMQ's
``ConsumerManager``), sans-IO.

A consumer heartbeats (HEART_BEAT) its groups and client id to the brokers; the members of a
group are the ids heard from within the last :data:`CONSUMER_EXPIRY` seconds (RocketMQ's
``channelExpiredTimeout``, 120 s), not unregistered since (UNREGISTER_CLIENT, a clean
shutdown) and whose connection is still open. GET_CONSUMER_LIST_BY_GROUP answers
:meth:`ConsumerRegistry.members`, from which each member takes its share of a topic's queues.
Each member's connection is kept, so that the broker can tell every member of a group that
changed (NOTIFY_CONSUMER_IDS_CHANGED). The registry lives in memory only: after a restart the
members are back within one heartbeat interval.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from hanet.errors import HanetError
from hanet.protocol import ConsumerGroupInfo

__all__ = [
    "CONSUMER_EXPIRY",
    "MAX_CONSUMER_GROUPS",
    "MAX_GROUP_MEMBERS",
    "ConsumerRegistry",
    "ConsumerRegistryFull",
    "consumer_groups",
]

CONSUMER_EXPIRY = 120.0
"""Seconds without a heartbeat after which a consumer leaves its group (RocketMQ's
``channelExpiredTimeout``)."""


MAX_GROUP_MEMBERS = 1024
"""Most live members of one group (a GET_CONSUMER_LIST answer holds at most 65,535 ids)."""

MAX_CONSUMER_GROUPS = 10_000
"""Most groups with live members one broker keeps."""


class ConsumerRegistryFull(HanetError, ValueError):
    """A heartbeat that would add a member or a group beyond the registry's bounds."""


class ConsumerRegistry:
    """The live members of each consumer group, with the time each was last heard from.

    Expired members are dropped whenever the registry is asked or told anything (no task of
    its own), so it runs the same under a real clock and a virtual one.

    Args:
        expiry: a member not heard from for more than this many seconds is dropped.
        clock: the time source in seconds (:func:`time.monotonic`; the broker passes
            :func:`trio.current_time`, which a test's virtual clock moves).
        max_members, max_groups: bounds on what heartbeats can make it keep.
    """

    def __init__(
        self,
        expiry: float = CONSUMER_EXPIRY,
        clock: Callable[[], float] = time.monotonic,
        *,
        max_members: int = MAX_GROUP_MEMBERS,
        max_groups: int = MAX_CONSUMER_GROUPS,
    ) -> None:
        if expiry <= 0:
            raise ValueError(f"expiry must be positive, not {expiry}")
        if not 1 <= max_members <= 0xFFFF or max_groups < 1:
            raise ValueError(f"bad bounds: {max_members} members, {max_groups} groups")
        self.expiry = expiry
        self.clock = clock
        self.max_members = max_members
        self.max_groups = max_groups
        self._groups: dict[str, dict[str, float]] = {}
        self._channels: dict[tuple[str, str], object] = {}
        self._expired_groups: set[str] = set()  # changed by expiry since expire() last said
        # Every member by when it was last heard from, oldest first (a heartbeat moves its
        # member to the end): expiry pops from the front, in time of what it drops.
        self._seen: OrderedDict[tuple[str, str], float] = OrderedDict()

    def heartbeat(self, group: str, client_id: str, channel: object = None) -> bool:
        """``client_id`` of ``group`` is alive now, heard on ``channel`` (its connection);
        True when it was not a member.

        Raises:
            ConsumerRegistryFull: it would be the group's member past ``max_members``
                (:data:`MAX_GROUP_MEMBERS`), or a group past ``max_groups``
                (:data:`MAX_CONSUMER_GROUPS`)
                (anyone who reaches the broker port can heartbeat; this bounds what is kept).
        """
        now = self.clock()
        self._expire(now)
        members = self._groups.get(group)
        if members is None:
            if len(self._groups) >= self.max_groups:
                raise ConsumerRegistryFull(
                    f"{self.max_groups} consumer groups already: {group!r} is not added"
                )
            members = self._groups[group] = {}
        joined = client_id not in members
        if joined and len(members) >= self.max_members:
            raise ConsumerRegistryFull(
                f"group {group!r} has {self.max_members} members already: "
                f"{client_id!r} is not added"
            )
        members[client_id] = now
        if channel is not None:
            self._channels[(group, client_id)] = channel
        self._seen[(group, client_id)] = now
        self._seen.move_to_end((group, client_id))
        return joined

    def unregister(self, group: str, client_id: str, channel: object = None) -> bool:
        """``client_id`` leaves ``group`` at once; True when it was a member.

        A member last heard on a connection leaves only by an unregistration over that same
        connection (as RocketMQ removes a member by its channel): another connection naming
        its client id changes nothing and gets False.
        """
        self._expire(self.clock())
        members = self._groups.get(group)
        if members is None or client_id not in members:
            return False
        held = self._channels.get((group, client_id))
        if held is not None and channel is not None and held is not channel:
            return False
        del members[client_id]
        del self._seen[(group, client_id)]
        self._channels.pop((group, client_id), None)
        if not members:
            del self._groups[group]
        return True

    def channels(self, group: str) -> list[object]:
        """The connections of ``group``'s live members (those heard on one)."""
        self._expire(self.clock())
        out = []
        for client_id in sorted(self._groups.get(group, ())):
            channel = self._channels.get((group, client_id))
            if channel is not None:
                out.append(channel)
        return out

    def drop_channel(self, channel: object) -> list[str]:
        """Every member heard on ``channel`` leaves its group (the connection closed:
        RocketMQ's ``doChannelCloseEvent``); returns the groups that changed."""
        gone = [key for key, c in self._channels.items() if c is channel]
        for group, client_id in gone:
            self.unregister(group, client_id)
        return sorted({group for group, _ in gone})

    def expire(self) -> list[str]:
        """Drop the members not heard from in time now; returns the groups that expiry
        changed since the last call (whichever call noticed it)."""
        self._expire(self.clock())
        changed = sorted(self._expired_groups)
        self._expired_groups.clear()
        return changed

    def members(self, group: str) -> tuple[str, ...]:
        """The client ids of ``group``'s live members, sorted (empty for an unknown group)."""
        self._expire(self.clock())
        return tuple(sorted(self._groups.get(group, ())))

    def groups(self) -> dict[str, tuple[str, ...]]:
        """Every group with live members, and those members (sorted)."""
        self._expire(self.clock())
        return {group: tuple(sorted(ids)) for group, ids in sorted(self._groups.items())}

    def _expire(self, now: float) -> list[str]:
        """Drop the members not heard from since ``now - expiry`` (the oldest first: the
        cost is that of what is dropped); returns the groups that changed."""
        deadline = now - self.expiry
        seen = self._seen
        changed: list[str] = []
        while seen:
            key = next(iter(seen))
            if seen[key] >= deadline:
                break
            del seen[key]
            self._channels.pop(key, None)
            group, client_id = key
            members = self._groups[group]
            del members[client_id]
            if not members:
                del self._groups[group]
            if group not in changed:
                changed.append(group)
        self._expired_groups.update(changed)
        return changed


def consumer_groups(registry: ConsumerRegistry) -> tuple[ConsumerGroupInfo, ...]:
    """The STATUS document's ``consumer_groups``: each group with live members."""
    return tuple(ConsumerGroupInfo(group, ids) for group, ids in registry.groups().items())
