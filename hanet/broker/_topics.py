"""The topics a broker serves (RocketMQ's ``TopicConfigManager`` and ``config/topics.json``).

A topic exists on a broker when it is in the table: loaded from ``config/topics.json`` at
start, found in the store's consume queues, created by a send to a topic not yet known
(RocketMQ's ``autoCreateTopicEnable``, with ``defaultTopicQueueNums`` queues or fewer when
the producer asks for fewer), created by a consumer's heartbeat for its retry topic
(``%RETRY%group``, one queue), or copied from the master by a slave's metadata sync.
The table is written to its file when it changed, atomically (see
:func:`~hanet.broker.write_config_file`), by :meth:`TopicTable.persist`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from hanet.errors import HanetError
from hanet.protocol import (
    DataVersion,
    RemotingHeaderError,
    TopicConfig,
    TopicConfigSerializeWrapper,
)

from ._config_files import read_config_file, write_config_file

__all__ = ["MAX_TOPICS", "TOPICS_FILE", "TopicTable", "TopicTableFull", "retry_topic"]

log = logging.getLogger("hanet.broker")

TOPICS_FILE = Path("config") / "topics.json"
"""Where a broker keeps its topic config, under its store directory (RocketMQ's name)."""

MAX_TOPICS = 100_000
"""Most topics one broker creates on demand (anyone who reaches the broker port can send)."""


def retry_topic(group: str) -> str:
    """A consumer group's retry topic (``%RETRY%group``)."""
    return f"%RETRY%{group}"


class TopicTableFull(HanetError, ValueError):
    """A send or heartbeat would create a topic past :data:`MAX_TOPICS`."""


class TopicNotExist(HanetError, LookupError):
    """A send to a topic the broker does not have, with ``autoCreateTopicEnable=false``."""


def _now_ms() -> int:
    return int(time.time() * 1000)


def _load(document: dict[str, Any]) -> TopicConfigSerializeWrapper:
    try:
        return TopicConfigSerializeWrapper.from_json(document)
    except RemotingHeaderError as exc:
        raise ValueError(str(exc)) from exc


class TopicTable:
    """The topic configs of a broker, by name.

    Args:
        path: the file (None: memory only).
        default_queues: queues of a topic created by a send (``defaultTopicQueueNums``).
        max_topics: see :data:`MAX_TOPICS`.
    """

    def __init__(
        self, path: Path | None = None, *, default_queues: int = 4, max_topics: int = MAX_TOPICS
    ) -> None:
        self.path = path
        self.default_queues = default_queues
        self.max_topics = max_topics
        self._table: dict[str, TopicConfig] = {}
        self.data_version = DataVersion(_now_ms(), 0)
        self._dirty = False
        self._deleted: set[str] = set()  # deleted by an admin: not re-added from the store
        self._set: set[str] = set()  # queues set by an admin: not grown back from the store
        self.auto_create = True
        """Whether a send creates an unknown topic (RocketMQ's ``autoCreateTopicEnable``;
        retry topics are created either way, as RocketMQ creates them on a send back)."""
        self.on_change: Callable[[], None] | None = None
        """Called when a topic is created or grows (the broker registers again at once, as
        RocketMQ's ``registerBrokerAll`` after a topic is created)."""

    @classmethod
    def load(cls, path: Path, *, default_queues: int = 4) -> TopicTable:
        """The table in ``path`` (empty when it does not exist).

        Raises:
            ConfigFileError: the file and its ``.bak`` are unusable.
        """
        table = cls(path, default_queues=default_queues)
        wrapper = read_config_file(path, _load)
        if wrapper is not None:
            table._table = dict(wrapper.topic_config_table)
            table.data_version = wrapper.data_version
        return table

    def __contains__(self, topic: object) -> bool:
        return topic in self._table

    def __len__(self) -> int:
        return len(self._table)

    def get(self, topic: str) -> TopicConfig | None:
        """The config of ``topic``, None when it does not exist here."""
        return self._table.get(topic)

    def names(self) -> list[str]:
        """Every topic, sorted."""
        return sorted(self._table)

    def queue_counts(self) -> dict[str, int]:
        """Each topic and its queues (the larger of read and write queue numbers)."""
        return {name: max(c.read_queue_nums, c.write_queue_nums) for name, c in self._table.items()}

    def _changed(self) -> None:
        self.data_version = self.data_version.next(_now_ms())
        self._dirty = True
        if self.on_change is not None:
            self.on_change()

    def ensure(self, topic: str, queues: int, *, perm: int | None = None) -> TopicConfig:
        """``topic``'s config, created with ``queues`` queues when it does not exist, and
        grown to ``queues`` when it has fewer (a store holding more queues than the file).

        Raises:
            TopicTableFull: it would be a topic past ``max_topics``.
        """
        config = self._table.get(topic)
        if config is not None and config.read_queue_nums >= queues <= config.write_queue_nums:
            return config
        if config is None:
            self._deleted.discard(topic)
            if len(self._table) >= self.max_topics:
                raise TopicTableFull(
                    f"{self.max_topics} topics already: {topic!r:.80} is not created"
                )
            config = TopicConfig(topic, queues, queues)
            if perm is not None:
                config = attrs.evolve(config, perm=perm)
            log.debug("topic %s added with %d queues", topic, queues)
        else:
            config = attrs.evolve(
                config,
                read_queue_nums=max(config.read_queue_nums, queues),
                write_queue_nums=max(config.write_queue_nums, queues),
            )
        self._table[topic] = config
        self._changed()
        return config

    def create_for_send(self, topic: str, requested: int) -> TopicConfig:
        """``topic``'s config; created on a send as RocketMQ's ``autoCreateTopicEnable``
        does: ``requested`` queues (the producer's ``defaultTopicQueueNums``), at most
        :attr:`default_queues`.

        Raises:
            TopicTableFull: it would be a topic past ``max_topics``.
            TopicNotExist: it is unknown and :attr:`auto_create` is off.
        """
        config = self._table.get(topic)
        if config is not None:
            return config
        if not self.auto_create and not topic.startswith("%RETRY%"):
            raise TopicNotExist(f"topic[{topic}] not exist, apply first please!")
        queues = min(max(requested, 1), self.default_queues)
        config = self.ensure(topic, queues)
        log.info("topic %s created by a send, %d queues", topic, queues)
        return config

    def add_store_queues(self, queues: Iterable[tuple[str, int]]) -> None:
        """Make sure every topic of the store's consume queues is in the table, with at
        least :attr:`default_queues` queues and its highest queue id."""
        highest: dict[str, int] = {}
        for topic, queue_id in queues:
            if topic not in self._deleted and topic not in self._set:
                highest[topic] = max(highest.get(topic, 0), queue_id + 1)
        for topic, count in highest.items():
            config = self._table.get(topic)
            if config is None:
                self.ensure(topic, max(count, self.default_queues))
            elif count > max(config.read_queue_nums, config.write_queue_nums):
                self.ensure(topic, count)

    def replace(self, configs: Mapping[str, TopicConfig], version: DataVersion) -> bool:
        """A slave takes its master's table as it is (RocketMQ's ``syncTopicConfig``);
        returns whether anything changed.

        Raises:
            TopicTableFull: the master's table has more than ``max_topics`` topics (nothing
                is taken).
        """
        if len(configs) > self.max_topics:
            raise TopicTableFull(
                f"the master's topic table has {len(configs)} topics, more than "
                f"{self.max_topics}: not taken"
            )
        if dict(configs) == self._table and version == self.data_version:
            return False
        self._table = dict(configs)
        self.data_version = version
        self._dirty = True
        return True

    def update(self, config: TopicConfig) -> TopicConfig:
        """Create ``config.topic_name`` or replace its config as given (UPDATE_AND_CREATE_TOPIC:
        queues may shrink, the permission change; the store's queues beyond them no longer
        grow it back).

        Raises:
            TopicTableFull: it would be a topic past ``max_topics``.
        """
        name = config.topic_name
        if name not in self._table and len(self._table) >= self.max_topics:
            raise TopicTableFull(f"{self.max_topics} topics already: {name!r:.80} is not created")
        if self._table.get(name) == config:
            return config
        self._table[name] = config
        self._deleted.discard(name)
        self._set.add(name)
        log.info(
            "topic %s set: %d read / %d write queues, perm %d",
            name,
            config.read_queue_nums,
            config.write_queue_nums,
            config.perm,
        )
        self._changed()
        return config

    def delete(self, topic: str) -> bool:
        """Forget ``topic`` (DELETE_TOPIC_IN_BROKER); the store's queues of it no longer bring
        it back (:meth:`add_store_queues`) until it is created again. Returns whether it was
        known."""
        if self._table.pop(topic, None) is None:
            return False
        self._deleted.add(topic)
        self._set.discard(topic)
        log.info("topic %s deleted", topic)
        self._changed()
        return True

    def wrapper(self) -> TopicConfigSerializeWrapper:
        """The table and its version (GET_ALL_TOPIC_CONFIG's body, the file)."""
        return TopicConfigSerializeWrapper(dict(sorted(self._table.items())), self.data_version)

    def mark_dirty(self) -> None:
        """Have the next :meth:`persist` write the table."""
        self._dirty = True

    @property
    def dirty(self) -> bool:
        """Whether the table changed since it was last persisted."""
        return self._dirty

    def snapshot(self) -> dict[str, Any] | None:
        """The document to write when the table changed and has a file (it is then clean),
        else None."""
        if not self._dirty or self.path is None:
            return None
        self._dirty = False
        return self.wrapper().to_json()

    def persist(self) -> bool:
        """Write the table if it changed; returns whether it wrote (blocks: call from a
        worker thread within trio).

        Raises:
            OSError: the file cannot be written (the table stays dirty).
        """
        document = self.snapshot()
        if document is None:
            return False
        assert self.path is not None
        try:
            write_config_file(self.path, document)
        except OSError:
            self._dirty = True
            raise
        return True
