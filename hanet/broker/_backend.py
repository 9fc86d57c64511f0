"""What the broker port needs of a broker mode: :class:`BrokerBackend`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from hanet.protocol import BrokerStatus, SubscriptionGroupWrapper
from hanet.store import CommitLogStore, Message, PutResult, PutStatus

from ._consumers import ConsumerRegistry
from ._offsets import ConsumerOffsets
from ._topics import TopicTable

__all__ = ["BrokerBackend"]


class BrokerBackend(Protocol):
    """What the broker port needs of a broker mode (a classic :class:`~hanet.broker.Broker`,
    a :class:`~hanet.broker.DLedgerBrokerService`)."""

    @property
    def store(self) -> CommitLogStore:
        """The open store (raises StoreError, say, while there is none)."""
        ...

    @property
    def offsets(self) -> ConsumerOffsets:
        """The consumer groups' committed offsets."""
        ...

    @property
    def consumers(self) -> ConsumerRegistry:
        """The live members of each consumer group."""
        ...

    @property
    def topic_table(self) -> TopicTable:
        """The topics served."""
        ...

    @property
    def is_slave(self) -> bool:
        """A member that takes no sends (a slave, a DLedger follower): pulls beyond its data
        answer PULL_RETRY_IMMEDIATELY, not PULL_OFFSET_MOVED, as a RocketMQ slave does."""
        ...

    @property
    def cluster_name(self) -> str:
        """The cluster name stored with each message (its ``CLUSTER`` property)."""
        ...

    @property
    def max_in_flight(self) -> int:
        """Per connection, puts awaiting their answer before reads pause."""
        ...

    def send_refusal(self) -> str | None:
        """Why this member refuses sends now (answered SERVICE_NOT_AVAILABLE), None when it
        takes them."""
        ...

    def put_now(self, messages: Sequence[Message]) -> list[PutResult] | None:
        """Store ``messages`` now (synchronous), or None when they must go through
        :meth:`put` (a Raft append)."""
        ...

    async def put(self, messages: Sequence[Message]) -> list[PutResult]:
        """Store ``messages`` and wait until they count as stored."""
        ...

    def put_later(
        self, messages: Sequence[Message], done: Callable[[list[PutResult]], None]
    ) -> None:
        """Store ``messages`` when :meth:`put_now` answers None (a Raft append), no task
        waiting: ``done`` gets one result per message once they count as stored."""
        ...

    def must_wait(self) -> bool:
        """Whether stored puts wait for :meth:`settle` (SYNC_FLUSH, SYNC_MASTER)."""
        ...

    async def settle(self, end_offset: int, stored_at: float | None = None) -> PutStatus:
        """Wait until data before ``end_offset`` counts as put (flushed, replicated)."""
        ...

    def settled_offset(self) -> int:
        """Data before this offset needs no wait to count as put."""
        ...

    def suggest(self, behind: int) -> int:
        """The member to pull from next for a consumer ``behind`` bytes behind."""
        ...

    def in_memory_limit(self) -> int:
        """Commit log bytes behind its end that count as still in memory."""
        ...

    def delay_offsets(self) -> bytes:
        """GET_ALL_DELAY_OFFSET's body (``delayOffset.json``)."""
        ...

    def subscription_groups(self) -> SubscriptionGroupWrapper:
        """GET_ALL_SUBSCRIPTIONGROUP_CONFIG's body."""
        ...

    def status(self) -> BrokerStatus:
        """HANET_STATUS's body."""
        ...

    def observe_put(self, statuses: Sequence[PutStatus], seconds: float) -> None:
        """A send was answered with these statuses after ``seconds`` (metrics)."""
        ...

    def connection_event(self, event: str) -> None:
        """A connection opened or closed (metrics)."""
        ...
