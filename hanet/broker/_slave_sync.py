"""A slave copies its master's topic config and consumer offsets (RocketMQ's
``SlaveSynchronize.syncAll``)."""

from __future__ import annotations

import logging
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import trio

from hanet.channel import parse_address
from hanet.client import BrokerClient, BrokerError
from hanet.protocol import BrokerMetadata, MetadataSync

from ._config_files import read_config_file, write_config_file
from ._offsets import ConsumerOffsets

__all__ = ["TOPICS_FILE", "SlaveSync", "load_topics"]

log = logging.getLogger("hanet.broker")

TOPICS_FILE = Path("config") / "topics.json"
"""Where a slave keeps the topic config copied from its master, under its store directory."""


def _topics(document: dict[str, Any]) -> dict[str, int]:
    table = document.get("topicConfigTable", {})
    return dict(BrokerMetadata.from_json({"topicConfigTable": table}).topics)


def load_topics(path: Path) -> dict[str, int]:
    """The topic config in ``path`` (RocketMQ's ``topics.json`` shape), empty when missing.

    Raises:
        ConfigFileError: the file and its ``.bak`` are unusable.
    """
    return read_config_file(path, _topics) or {}


class SlaveSync:
    """Every ``interval`` seconds, and at once when :meth:`trigger` is called (the slave just
    connected to its master, or learned a new master address), fetch SYNC_METADATA from the
    master's broker port and persist it: the topics to ``topics_path`` (RocketMQ's
    ``topics.json``: ``{"topicConfigTable": {name: {"topicName", "readQueueNums",
    "writeQueueNums"}}}``), the consumer offsets into ``offsets`` (each ``topic@group`` of the
    master replaces the slave's, others are kept) and its file at once.

    A failed sync (master unreachable, an error answer, a file that cannot be written) is
    logged at WARNING and tried again next round. Nothing is fetched while
    :attr:`master_address` is None.

    Args:
        offsets: the slave's consumer offsets.
        topics_path: the topics file (None: not persisted).
        master_address: the master's broker port ``host:port`` (None: unknown yet).
        interval: seconds between syncs (60).
        tls: the context to connect with (None: plain TCP).
        timeout: seconds for connecting and for the answer.
    """

    def __init__(
        self,
        offsets: ConsumerOffsets,
        topics_path: Path | None,
        *,
        master_address: str | None = None,
        interval: float = 60.0,
        tls: ssl.SSLContext | None = None,
        timeout: float = 10.0,
    ) -> None:
        self.offsets = offsets
        self.topics_path = topics_path
        self.master_address = master_address
        self.interval = interval
        self.tls = tls
        self.timeout = timeout
        self.topics: dict[str, int] = {}
        """The topic config last copied (or loaded at start)."""
        self.syncs = 0
        """How many syncs succeeded."""
        self.failures = 0
        """How many syncs failed (:meth:`sync_logged`)."""
        self.last_synced: float | None = None
        """When (trio time) the last sync succeeded (None: none yet)."""
        self.offset_entries = 0
        """``topic@group`` offset entries in the master's last metadata."""
        self.last_error: str | None = None
        """Why the last sync failed (None after a success)."""
        self._wake = trio.Event()

    def trigger(self) -> None:
        """Sync now (at the next chance), not at the end of the interval."""
        self._wake.set()

    def set_master_address(self, address: str) -> None:
        """Sync from the master at ``address`` from now on (a sync follows at once when it
        changed)."""
        if address != self.master_address:
            log.info("metadata sync: master broker %s -> %s", self.master_address, address)
            self.master_address = address
            self.trigger()

    def status(self) -> MetadataSync:
        """The STATUS document's ``metadata_sync`` section (call within trio)."""
        last = self.last_synced
        return MetadataSync(
            master_address=self.master_address,
            syncs=self.syncs,
            failures=self.failures,
            last_synced_ago=None if last is None else round(trio.current_time() - last, 3),
            last_error=self.last_error,
            topics=len(self.topics),
            offset_entries=self.offset_entries,
        )

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Sync on each :meth:`trigger` (the slave connected to its master) and every
        interval (when the master's broker address is known), until cancelled."""
        task_status.started()
        while True:
            with trio.move_on_after(self.interval):
                await self._wake.wait()
            self._wake = trio.Event()
            if self.master_address is not None:
                await self.sync_logged()

    async def sync_logged(self) -> bool:
        """:meth:`sync`, a failure logged at WARNING (and kept in :attr:`last_error`)."""
        try:
            await self.sync()
        except (BrokerError, OSError, ValueError) as exc:
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
        """Fetch the master's metadata once and persist it.

        Raises:
            BrokerError: the master could not be reached or answered an error.
            OSError: a file could not be written.
            ValueError: no master address, or not ``host:port``.
        """
        if self.master_address is None:
            raise ValueError("the master's broker address is not known")
        host, port = parse_address(self.master_address)
        async with BrokerClient.connect(
            host, port, connect_timeout=self.timeout, request_timeout=self.timeout, tls=self.tls
        ) as client:
            metadata = await client.metadata()
        await self.apply(metadata.topics, metadata.offsets)
        self.syncs += 1
        self.last_synced = trio.current_time()
        self.offset_entries = len(metadata.offsets)
        log.debug(
            "metadata synced from %s: %d topics, %d topic@group offsets",
            self.master_address,
            len(metadata.topics),
            len(metadata.offsets),
        )

    async def apply(
        self, topics: Mapping[str, int], offsets: Mapping[tuple[str, str], Mapping[int, int]]
    ) -> None:
        """Take the master's topics and offsets and persist them (the files are written in a
        worker thread).

        Raises:
            OSError: a file could not be written.
        """
        if dict(topics) != self.topics or (
            self.topics_path is not None and not self.topics_path.exists()
        ):
            self.topics = dict(topics)
            if self.topics_path is not None:
                table = BrokerMetadata(self.topics).to_json()["topicConfigTable"]
                document = {"topicConfigTable": table}
                await trio.to_thread.run_sync(write_config_file, self.topics_path, document)
        self.offsets.update(offsets)
        await self.offsets.persist_async()
