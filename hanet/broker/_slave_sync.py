"""A slave copies its master's metadata over the remoting protocol (RocketMQ's
``SlaveSynchronize.syncAll``).

Each sync asks the master's broker port for GET_ALL_TOPIC_CONFIG (21),
GET_ALL_CONSUMER_OFFSET (43), GET_ALL_DELAY_OFFSET (45) and GET_ALL_SUBSCRIPTIONGROUP_CONFIG
(201), and keeps them under the slave's ``config/`` with RocketMQ's file names:
``topics.json``, ``consumerOffset.json``, ``delayOffset.json`` and ``subscriptionGroup.json``.

The master's tables are bounded here as the slave's own are (topics, ``topic@group`` entries,
queue offsets and queue ids): a table past them is refused whole, logged, and tried again next
round.

Offsets are never lost across a failover: consumers commit to the slave while the master is
down, so per queue the slave keeps the larger of its offset and the master's (RocketMQ's
slave would overwrite its own), and tells the master each offset it holds that the master
lacks or has smaller (UPDATE_CONSUMER_OFFSET). The master then holds those commits too, and a
consumer restarted after the failover starts where it left off.
"""

from __future__ import annotations

import logging
import math
import ssl
from collections.abc import Callable
from pathlib import Path

import trio

from hanet.boot import Connector
from hanet.channel import parse_address
from hanet.client import RemotingConnection, RemotingError
from hanet.protocol import (
    ConsumerOffsetSerializeWrapper,
    MetadataSync,
    RemotingCommand,
    RequestCode,
    SubscriptionGroupWrapper,
    TopicConfigSerializeWrapper,
    UpdateConsumerOffsetRequestHeader,
)

from ._config_files import write_config_file
from ._offsets import ConsumerOffsets
from ._schedule import decode_offsets, offsets_document
from ._topics import TopicTable

__all__ = [
    "DELAY_OFFSETS_FILE",
    "SUBSCRIPTION_GROUPS_FILE",
    "SYNC_DELAY",
    "SYNC_INTERVAL",
    "SlaveSync",
]

log = logging.getLogger("hanet.broker")

DELAY_OFFSETS_FILE = Path("config") / "delayOffset.json"
"""The delay levels' progress, under the store directory (RocketMQ's name)."""

SUBSCRIPTION_GROUPS_FILE = Path("config") / "subscriptionGroup.json"
"""The consumer groups' settings, under the store directory (RocketMQ's name)."""


SYNC_DELAY = 3.0
"""Seconds from learning the master to the first sync (RocketMQ 4.9.8's BrokerController)."""

SYNC_INTERVAL = 10.0
"""Seconds between two syncs (RocketMQ 4.9.8's BrokerController)."""


class SlaveSync:
    """Copy the master's metadata (see the module docstring) ``first_delay`` seconds (3) after
    the master's broker address is known (given, or learned from a name server's answer:
    :meth:`set_master_address`) and every ``interval`` seconds (10) after, as RocketMQ 4.9.8's
    slave does; at once when :meth:`trigger` is called. A new master address is synced
    from ``first_delay`` seconds after it is learned.

    A failed sync (master unreachable, an error answer, a body that does not decode, a file
    that cannot be written) is logged at WARNING and tried again next round. Nothing is
    fetched while :attr:`master_address` is None.

    Args:
        offsets: the slave's consumer offsets.
        topics: the slave's topic table (its file is written at each change).
        store_dir: the store directory, under whose ``config/`` ``delayOffset.json`` and
            ``subscriptionGroup.json`` are written (None: not written).
        master_address: the master's broker port ``host:port`` (None: unknown yet).
        interval: seconds between syncs (10).
        first_delay: seconds from learning the master to the first sync (3).
        tls: the context to connect with (None: plain TCP).
        timeout: seconds for connecting and for each answer.
        connector: opens the stream to the master given its ``(host, port)``, instead of TCP
            (a test's memory streams).
    """

    def __init__(
        self,
        offsets: ConsumerOffsets,
        topics: TopicTable,
        store_dir: Path | None = None,
        *,
        master_address: str | None = None,
        interval: float = SYNC_INTERVAL,
        first_delay: float = SYNC_DELAY,
        tls: ssl.SSLContext | None = None,
        timeout: float = 10.0,
        connector: Callable[[tuple[str, int]], Connector] | None = None,
    ) -> None:
        self.offsets = offsets
        self.topic_table = topics
        self.store_dir = store_dir
        self.master_address = master_address
        self.interval = interval
        self.first_delay = first_delay
        self.tls = tls
        self.timeout = timeout
        self.connector = connector
        self.subscription_groups = SubscriptionGroupWrapper()
        """The master's consumer group settings, as last copied."""
        self.syncs = 0
        """How many syncs succeeded."""
        self.failures = 0
        """How many syncs failed (:meth:`sync_logged`)."""
        self.pushed = 0
        """Offsets the master took from this slave (larger than its own)."""
        self.last_synced: float | None = None
        """When (trio time) the last sync succeeded (None: none yet)."""
        self.offset_entries = 0
        """``topic@group`` offset entries in the master's last table."""
        self.last_error: str | None = None
        """Why the last sync failed (None after a success)."""
        self._wake = trio.Event()
        self._next: float | None = None  # when the next sync is due (None: no master yet)
        self._running = False

    @property
    def topics(self) -> dict[str, int]:
        """The topics known (each with its queue count)."""
        return self.topic_table.queue_counts()

    def trigger(self) -> None:
        """Sync now (at the next chance), not at the end of the interval."""
        if self._running:
            self._next = trio.current_time()
        self._wake.set()

    def set_master_address(self, address: str) -> None:
        """Sync from the master at ``address`` from now on: ``first_delay`` seconds after it
        changed, then every interval."""
        if address != self.master_address:
            log.info("metadata sync: master broker %s -> %s", self.master_address, address)
            self.master_address = address
            if self._running:
                self._next = trio.current_time() + self.first_delay
                self._wake.set()

    def status(self) -> MetadataSync:
        """The STATUS document's ``metadata_sync`` section (call within trio)."""
        last = self.last_synced
        return MetadataSync(
            master_address=self.master_address,
            syncs=self.syncs,
            failures=self.failures,
            last_synced_ago=None if last is None else round(trio.current_time() - last, 3),
            last_error=self.last_error,
            topics=len(self.topic_table),
            offset_entries=self.offset_entries,
        )

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Sync ``first_delay`` seconds after the master is known and every interval after
        (and on each :meth:`trigger`), until cancelled."""
        self._running = True
        if self.master_address is not None:
            self._next = trio.current_time() + self.first_delay
        task_status.started()
        try:
            while True:
                self._wake = trio.Event()
                due = self._next if self.master_address is not None else None
                if due is not None and due <= trio.current_time():
                    await self.sync_logged()
                    self._next = trio.current_time() + self.interval
                    continue
                with trio.move_on_at(math.inf if due is None else due):
                    await self._wake.wait()
        finally:
            self._running = False
            self._next = None

    async def sync_logged(self) -> bool:
        """:meth:`sync`, a failure logged at WARNING (and kept in :attr:`last_error`)."""
        try:
            await self.sync()
        except (RemotingError, OSError, ValueError) as exc:
            self.last_error = f"{type(exc).__name__}: {exc}"
            self.failures += 1
            log.warning(
                "metadata sync from master %s failed (retrying in %.0f s): %s",
                self.master_address,
                self.interval,
                exc,
            )
            return False
        self.last_error = None
        return True

    async def sync(self) -> None:
        """Copy the master's metadata once, and give it the newer offsets this slave holds.

        Raises:
            RemotingError: the master could not be reached or answered an error.
            RemotingHeaderError: (a ValueError) an answer's body does not decode.
            OSError: a file could not be written.
            ValueError: no master address, or not ``host:port``.
        """
        if self.master_address is None:
            raise ValueError("the master's broker address is not known")
        host, port = parse_address(self.master_address)
        connector = None if self.connector is None else self.connector((host, port))
        async with RemotingConnection.connect(
            host,
            port,
            connect_timeout=self.timeout,
            request_timeout=self.timeout,
            tls=self.tls,
            connector=connector,
        ) as conn:

            async def fetch(code: RequestCode) -> bytes:
                answer = await conn.invoke_checked(RemotingCommand.request(code))
                return bytes(answer.body)

            topics = TopicConfigSerializeWrapper.decode(
                await fetch(RequestCode.GET_ALL_TOPIC_CONFIG)
            )
            offsets = ConsumerOffsetSerializeWrapper.from_json(
                await fetch(RequestCode.GET_ALL_CONSUMER_OFFSET)
            ).offset_table
            delay = decode_offsets(await fetch(RequestCode.GET_ALL_DELAY_OFFSET))
            groups = SubscriptionGroupWrapper.from_json(
                await fetch(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
            )
            # Both tables are checked against this broker's bounds before either changes.
            self.offsets.check_merge(offsets)
            changed = self.topic_table.replace(topics.topic_config_table, topics.data_version)
            newer = self.offsets.merge(offsets)
            pushed = 0
            for (topic, group), queues in sorted(newer.items()):
                for queue_id, offset in sorted(queues.items()):
                    header = UpdateConsumerOffsetRequestHeader(group, topic, queue_id, offset)
                    request = RemotingCommand.request(
                        RequestCode.UPDATE_CONSUMER_OFFSET, header.to_fields()
                    )
                    await conn.invoke_checked(request)
                    pushed += 1
        if pushed:
            log.info(
                "metadata sync: the master %s took %d newer offsets from this slave",
                self.master_address,
                pushed,
            )
        self.pushed += pushed
        await self._persist(changed, delay, groups)
        self.syncs += 1
        self.last_synced = trio.current_time()
        self.offset_entries = len(offsets)
        log.debug(
            "metadata synced from %s: %d topics, %d topic@group offsets",
            self.master_address,
            len(topics.topic_config_table),
            len(offsets),
        )

    async def _persist(
        self,
        topics_changed: bool,
        delay: dict[int, int],
        groups: SubscriptionGroupWrapper,
    ) -> None:
        table = self.topic_table
        changed = topics_changed
        if table.path is not None and (changed or not table.path.exists()):
            table.mark_dirty()
            await trio.to_thread.run_sync(table.persist)
        await self.offsets.persist_async()
        self.subscription_groups = groups
        root = self.store_dir
        if root is not None:
            # Both bodies were decoded (checked) before anything is written.
            await trio.to_thread.run_sync(
                write_config_file, root / DELAY_OFFSETS_FILE, offsets_document(delay)
            )
            await trio.to_thread.run_sync(
                write_config_file, root / SUBSCRIPTION_GROUPS_FILE, groups.document()
            )
