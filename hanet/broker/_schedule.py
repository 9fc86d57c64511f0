"""Delayed messages: RocketMQ's 18 delay levels, the ``SCHEDULE_TOPIC_XXXX`` rewrite and the
service that delivers them when due (4.9.8's ``ScheduleMessageService``).

A message put with the property ``DELAY=n`` (1..18; more is capped at 18, 0 or less means no
delay) is not stored on its topic: :func:`delay_rewrite` moves it to queue ``n - 1`` of
:data:`SCHEDULE_TOPIC` and keeps where it was going in ``REAL_TOPIC`` / ``REAL_QID``.
:class:`ScheduleService` reads each level's queue in order and, once a message's store time
plus its level's delay has passed, puts it back on its real topic and queue (:func:`timeup`:
the same body, flag, properties and hosts, ``DELAY`` cleared; ``REAL_TOPIC`` / ``REAL_QID``
stay, as RocketMQ leaves them). Every level's queue is in store-time order and all its messages
wait the same delay, so the head of a queue is always the next one due.

Per level, the next queue offset to deliver is kept in ``<store>/config/delayOffset.json``
(:data:`DELAY_OFFSETS_FILE`, RocketMQ's ``{"offsetTable":{"1":12,...}}``; RocketMQ's own
unquoted keys ``{1:12}`` are read too), written every ``persist_interval`` and when the
service stops. An offset moves on only after its message was put on the real topic, so a
restart (even a crash) loses nothing and at most delivers again the messages delivered since
the last write.

Wiring (what the broker does):

- Every put of a message on a master goes through :func:`delay_rewrite` after its queue was
  chosen and before ``store.put`` (sends, batches, and the internal puts of
  ``CONSUMER_SEND_MSG_BACK``). It raises :class:`DelayLevelError` (a
  :class:`~hanet.protocol.RemotingHeaderError`: the dispatcher answers SYSTEM_ERROR with the
  reason) for a ``DELAY`` that is not an integer.
- On a master only: ``service = ScheduleService(store, put, store_root / DELAY_OFFSETS_FILE)``
  (reads the file: :class:`~hanet.broker.ConfigFileError` when it and its ``.bak`` are
  unusable), then ``await nursery.start(service.run)``. ``put`` is the broker's put path for
  internal messages (``lambda m: broker.put_now([m])[0]``: the store, then the
  ``stored_listeners``, which wake long polling); a put that is not PUT_OK is retried after
  :data:`RETRY_PAUSE` seconds, except MESSAGE_ILLEGAL and PROPERTIES_SIZE_EXCEEDED, which no
  retry can change: that message is skipped, logged at ERROR (it stays in the schedule
  topic's commit log). Cancelling ``run`` writes the offsets.
- ``GET_ALL_DELAY_OFFSET`` (45): register :meth:`ScheduleService.get_all_delay_offset`.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs
import trio

from hanet.channel import HandlerContext
from hanet.protocol import (
    MessageProperty,
    RemotingCommand,
    RemotingHeaderError,
    ResponseCode,
    body_json,
    load_body,
)
from hanet.store import (
    CommitLogStore,
    CorruptRecordError,
    Message,
    MessageRecord,
    PutResult,
    PutStatus,
)
from hanet.store.lowlevel import CQ_BLANK_SIZE

from ._config_files import ConfigFileError, write_config_file

__all__ = [
    "DELAY_LEVELS",
    "MAX_DELAY_LEVEL",
    "MESSAGE_DELAY_LEVEL",
    "RETRY_PAUSE",
    "SCHEDULE_TOPIC",
    "DelayLevelError",
    "ScheduleService",
    "ScheduleStatistics",
    "decode_offsets",
    "delay_level",
    "delay_rewrite",
    "encode_offsets",
    "parse_delay_levels",
    "timeup",
]

log = logging.getLogger("hanet.broker")

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
"""Where delayed messages wait: queue ``level - 1`` per delay level (RocketMQ's name)."""

PROPERTY_DELAY = MessageProperty.DELAY.value
PROPERTY_REAL_TOPIC = MessageProperty.REAL_TOPIC.value
PROPERTY_REAL_QUEUE_ID = MessageProperty.REAL_QID.value

MESSAGE_DELAY_LEVEL = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
"""RocketMQ's default ``messageDelayLevel``."""

RETRY_PAUSE = 1.0
"""Seconds before a level tries again a delivery whose put was refused (disk full, ...)."""

_NEVER_STORED = frozenset({PutStatus.MESSAGE_ILLEGAL, PutStatus.PROPERTIES_SIZE_EXCEEDED})
"""Put refusals a retry cannot change: the message is skipped, not retried for ever."""
_IDLE_PAUSE = 0.1  # after new data: let a burst of puts land before looking (RocketMQ: 100 ms)
_MAX_BATCH = 256  # deliveries per level before yielding to other tasks
_UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_JAVA_INT = re.compile(r"[+-]?[0-9]+")

# SYSFLAG transaction bits: only plain and committed messages are delayed (as RocketMQ).
_TRANSACTION_MASK = 0x3 << 2
_TRANSACTION_COMMIT = 0x2 << 2


def parse_delay_levels(text: str) -> tuple[int, ...]:
    """The delays (ms) of a ``messageDelayLevel`` string (``"1s 5s 1m 2h"``; s, m, h, d).

    Raises:
        ValueError: a level that is not a number and a unit, or no level at all.
    """
    levels = []
    for part in text.split():
        number, unit = part[:-1], part[-1:]
        if unit not in _UNITS or not number.isdigit():
            raise ValueError(f"bad delay level {part!r} in {text!r}: want a number and s/m/h/d")
        levels.append(int(number) * _UNITS[unit])
    if not levels:
        raise ValueError("no delay level")
    return tuple(levels)


DELAY_LEVELS = parse_delay_levels(MESSAGE_DELAY_LEVEL)
"""The delay of each level in ms: ``DELAY_LEVELS[level - 1]``."""

MAX_DELAY_LEVEL = len(DELAY_LEVELS)


class DelayLevelError(RemotingHeaderError):
    """A message's ``DELAY`` property is not an integer."""


def delay_level(properties: Mapping[str, str]) -> int:
    """The ``DELAY`` property as RocketMQ's ``getDelayTimeLevel`` reads it (0 when absent).

    Raises:
        DelayLevelError: it is not an integer.
    """
    raw = properties.get(PROPERTY_DELAY)
    if raw is None:
        return 0
    if _JAVA_INT.fullmatch(raw) is None:
        raise DelayLevelError(f"the DELAY property {raw!r} is not a delay level (1..18)")
    return int(raw)


def delay_rewrite(message: Message, *, max_level: int = MAX_DELAY_LEVEL) -> Message:
    """``message`` as it is stored: on :data:`SCHEDULE_TOPIC` when it asks for a delay.

    Pure. A message without ``DELAY``, with ``DELAY <= 0`` or of a prepared or rolled back
    transaction comes back unchanged, and so does a message already on :data:`SCHEDULE_TOPIC`
    (rewriting twice is harmless). Otherwise the level is capped at ``max_level`` (and
    ``DELAY`` says so), ``REAL_TOPIC`` / ``REAL_QID`` keep the topic and queue, and the message
    goes to queue ``level - 1`` of :data:`SCHEDULE_TOPIC`.

    Raises:
        DelayLevelError: ``DELAY`` is not an integer.
    """
    if message.topic == SCHEDULE_TOPIC:  # rewritten already: idempotent
        return message
    if PROPERTY_DELAY not in message.properties:  # (most messages: no delay_level call)
        return message
    level = delay_level(message.properties)
    if level <= 0:
        return message
    if message.sys_flag & _TRANSACTION_MASK not in (0, _TRANSACTION_COMMIT):
        return message
    level = min(level, max_level)
    properties = dict(message.properties)
    properties[PROPERTY_DELAY] = str(level)
    properties[PROPERTY_REAL_TOPIC] = message.topic
    properties[PROPERTY_REAL_QUEUE_ID] = str(message.queue_id)
    return attrs.evolve(message, topic=SCHEDULE_TOPIC, queue_id=level - 1, properties=properties)


def timeup(record: MessageRecord) -> Message:
    """The message to put on its real topic for a due record of :data:`SCHEDULE_TOPIC`.

    Raises:
        ValueError: the record has no ``REAL_TOPIC`` or no integer ``REAL_QID``.
    """
    properties = record.properties
    topic = properties.get(PROPERTY_REAL_TOPIC)
    queue = properties.get(PROPERTY_REAL_QUEUE_ID, "")
    if not topic or _JAVA_INT.fullmatch(queue) is None:
        raise ValueError(f"no REAL_TOPIC / REAL_QID: {topic!r} / {queue!r}")
    properties.pop(PROPERTY_DELAY, None)
    return Message(
        topic=topic,
        body=record.body,
        queue_id=int(queue),
        flag=record.flag,
        properties=properties,
        sys_flag=record.sys_flag,
        born_timestamp=record.born_timestamp,
        born_host=record.born_host,
        born_port=record.born_port,
        reconsume_times=record.reconsume_times,
        prepared_transaction_offset=record.prepared_transaction_offset,
    )


def offsets_document(offsets: Mapping[int, int]) -> dict[str, Any]:
    """The ``delayOffset.json`` document: ``{"offsetTable":{"1":12,...}}``."""
    return {"offsetTable": {str(level): offsets[level] for level in sorted(offsets)}}


def encode_offsets(offsets: Mapping[int, int]) -> bytes:
    """The ``delayOffset.json`` document as a body."""
    return body_json(offsets_document(offsets))


def decode_offsets(text: str | bytes | bytearray | memoryview) -> dict[int, int]:
    """Parse a ``delayOffset.json`` (keys quoted or, as fastjson writes them, not).

    Raises:
        ValueError: not that document.
    """
    document = load_body(text, "delayOffset.json")
    if not isinstance(document, dict):
        raise ValueError("not a JSON object")
    return _offset_table(document)


def _offset_table(document: dict[str, Any]) -> dict[int, int]:
    table = document.get("offsetTable", {})
    if not isinstance(table, dict):
        raise ValueError("offsetTable is not an object")
    offsets = {}
    for key, value in table.items():
        if not str(key).lstrip("-").isdigit() or not isinstance(value, int) or value < 0:
            raise ValueError(f"bad offsetTable entry {key!r}: {value!r}")
        offsets[int(key)] = value
    return offsets


def _read(path: Path) -> dict[int, int] | None:
    """The offsets of ``path`` or its ``.bak`` (None: neither exists).

    Raises:
        ConfigFileError: the file is unusable and its ``.bak`` missing or unusable too.
    """
    problems = []
    for candidate in (path, path.with_name(path.name + ".bak")):
        if not candidate.exists():
            continue
        try:
            offsets = decode_offsets(candidate.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            problems.append(f"{candidate} is unusable: {exc}")
            log.error("%s", problems[-1])
            continue
        if problems or candidate != path:
            log.warning("delay offsets read from %s (the previous write)", candidate)
        return offsets
    if problems:
        raise ConfigFileError(
            "; ".join(problems) + ": fix the file, or move it away to start without it"
        )
    return None


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


@attrs.frozen
class ScheduleStatistics:
    """What :meth:`ScheduleService.statistics` reports.

    Attributes:
        offsets: delay level -> the next queue offset to deliver.
        waiting: delay level -> messages stored and not yet delivered.
        delivered: messages put back on their real topic since the service started.
        failed_puts: deliveries whose put was refused (each retried).
    """

    offsets: Mapping[int, int]
    waiting: Mapping[int, int]
    delivered: int
    failed_puts: int


@attrs.define(eq=False)
class ScheduleService:
    """Delivers the messages of :data:`SCHEDULE_TOPIC` to their real topics when due.

    Args:
        store: the master's store.
        put: the broker's put path for internal messages (see the module docstring).
        path: the offsets file (``<store>/`` :data:`DELAY_OFFSETS_FILE`); read at construction.
        levels: the delay of each level in ms (:data:`DELAY_LEVELS`).
        persist_interval: seconds between writes of the offsets file (RocketMQ's
            ``flushDelayOffsetInterval``, 10 s).
        now_ms: the wall clock in ms (store timestamps are wall clock; tests drive it).

    Raises:
        ConfigFileError: the offsets file and its ``.bak`` are unusable.
    """

    store: CommitLogStore
    put: Callable[[Message], PutResult]
    path: Path
    levels: tuple[int, ...] = DELAY_LEVELS
    persist_interval: float = 10.0
    now_ms: Callable[[], int] = _wall_ms
    _offsets: dict[int, int] = attrs.field(init=False, factory=dict)
    _written: dict[int, int] = attrs.field(init=False, factory=dict)
    _arrived: trio.Event = attrs.field(init=False, factory=trio.Event)
    _waiting: bool = attrs.field(init=False, default=False)
    _idle: dict[int, trio.Event] = attrs.field(init=False, factory=dict)
    """Levels whose queue was drained, each woken by the watcher when its queue grows."""
    _failing: set[int] = attrs.field(init=False, factory=set)
    _delivered: int = attrs.field(init=False, default=0)
    _failed_puts: int = attrs.field(init=False, default=0)

    def __attrs_post_init__(self) -> None:
        loaded = _read(self.path) or {}
        for level, offset in loaded.items():
            if 1 <= level <= len(self.levels):
                self._offsets[level] = offset
        self._written = dict(self._offsets)
        self._correct_offsets()

    def _correct_offsets(self) -> None:
        """Bring every offset within its queue (RocketMQ's ``correctDelayOffset``)."""
        for level, offset in list(self._offsets.items()):
            low = self.store.min_queue_offset(SCHEDULE_TOPIC, level - 1)
            high = self.store.max_queue_offset(SCHEDULE_TOPIC, level - 1)
            corrected = min(max(offset, low), high)
            if corrected != offset:
                log.error("delay level %d: offset %d corrected to %d", level, offset, corrected)
                self._offsets[level] = corrected

    def offsets(self) -> dict[int, int]:
        """Delay level -> the next queue offset of :data:`SCHEDULE_TOPIC` to deliver."""
        return dict(self._offsets)

    def encode(self) -> bytes:
        """The offsets as ``delayOffset.json`` holds them (what GET_ALL_DELAY_OFFSET answers)."""
        return encode_offsets(self._offsets)

    def persist(self) -> None:
        """Write the offsets file now (when they changed since the last write).

        Raises:
            OSError: it cannot be written (the previous one stays).
        """
        if self._offsets == self._written and self.path.exists():
            return
        snapshot = dict(self._offsets)
        document = json.loads(encode_offsets(snapshot))
        write_config_file(self.path, document)
        self._written = snapshot

    def get_all_delay_offset(
        self, ctx: HandlerContext, request: RemotingCommand
    ) -> RemotingCommand:
        """GET_ALL_DELAY_OFFSET (45): the offsets document as the body, as RocketMQ's
        ``AdminBrokerProcessor.getAllDelayOffset`` answers it."""
        return request.response(ResponseCode.SUCCESS, None, body=self.encode())

    def statistics(self) -> ScheduleStatistics:
        """Offsets, messages waiting per level and counters."""
        waiting = {}
        for level in range(1, len(self.levels) + 1):
            high = self.store.max_queue_offset(SCHEDULE_TOPIC, level - 1)
            left = high - max(self._offsets.get(level, 0), 0)
            if left > 0:
                waiting[level] = left
        return ScheduleStatistics(dict(self._offsets), waiting, self._delivered, self._failed_puts)

    def _on_data(self, _max_offset: int) -> None:
        if self._waiting:  # some level is drained: the watcher looks (one wake-up a burst)
            self._waiting = False
            self._arrived.set()  # (the watcher makes the next event when it wakes)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Deliver due messages until cancelled, then write the offsets file.

        One task per level; each sleeps until its head message is due, or, with nothing
        waiting, until its queue grows: one watcher task wakes on the store's new data
        (once a burst: ``_IDLE_PAUSE`` after the first put, as RocketMQ's 100 ms timer) and
        wakes only the drained levels whose queue got messages, so the puts of other topics
        wake no level. Writes the offsets every ``persist_interval`` (a failed write is
        logged and tried again at the next one).
        """
        self.store.add_listener(self._on_data)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._watch)
                for level in range(1, len(self.levels) + 1):
                    nursery.start_soon(self._deliver_level, level)
                nursery.start_soon(self._persist_loop)
                task_status.started()
        finally:
            self.store.remove_listener(self._on_data)
            self._persist_logged()

    def _persist_logged(self) -> None:
        try:
            self.persist()
        except OSError as exc:
            log.error("cannot write %s: %s", self.path, exc)

    async def _persist_loop(self) -> None:
        while True:
            await trio.sleep(self.persist_interval)
            if self._offsets == self._written:
                continue
            snapshot = dict(self._offsets)
            document = json.loads(encode_offsets(snapshot))
            try:  # the fsyncs in a worker thread, off the broker's event loop
                await trio.to_thread.run_sync(write_config_file, self.path, document)
            except OSError as exc:
                log.error("cannot write %s: %s", self.path, exc)
            else:
                self._written = snapshot

    async def _deliver_level(self, level: int) -> None:
        while True:
            pause = self.deliver_due(level)
            if pause is None:  # drained: the watcher wakes this level when its queue grows
                woken = self._idle[level] = trio.Event()
                self._waiting = True
                await woken.wait()
            else:
                await trio.sleep(pause)

    async def _watch(self) -> None:
        """Wake the drained levels whose queue grew, ``_IDLE_PAUSE`` after new data."""
        while True:
            await self._arrived.wait()
            self._arrived = trio.Event()
            await trio.sleep(_IDLE_PAUSE)  # let a burst of puts land before looking
            for level in list(self._idle):
                queued = self.store.max_queue_offset(SCHEDULE_TOPIC, level - 1)
                if queued > self._offsets.get(level, 0):
                    self._idle.pop(level).set()
            # (no await since the check: data after it finds the flag set and wakes us)
            self._waiting = bool(self._idle)

    def _note(self, level: int, offset: int) -> None:
        if offset or level in self._offsets:  # the file names the levels used, as RocketMQ's
            self._offsets[level] = offset

    def deliver_due(self, level: int) -> float | None:
        """Deliver the due messages of ``level`` in order (at most a batch; synchronous).

        Returns:
            Seconds until this level should look again (its head message is not due yet, a
            put was refused, or the batch is full: 0), or None when its queue is drained.
        """
        queue_id = level - 1
        delay = self.levels[queue_id]
        offset = self._offsets.get(level, 0)
        low = self.store.min_queue_offset(SCHEDULE_TOPIC, queue_id)
        high = self.store.max_queue_offset(SCHEDULE_TOPIC, queue_id)
        if offset < low:
            log.warning("delay level %d: offset %d is gone, going on at %d", level, offset, low)
            offset = low
        for _ in range(_MAX_BATCH):
            if offset >= high:
                self._note(level, offset)
                return None
            entry = self.store.consume_queue_entry(SCHEDULE_TOPIC, queue_id, offset)
            if entry is None or entry[1] == CQ_BLANK_SIZE:
                offset += 1
                continue
            try:
                record = self.store.read_record(entry[0])
            except CorruptRecordError as exc:
                log.error("delay level %d: offset %d skipped: %s", level, offset, exc)
                offset += 1
                continue
            now = self.now_ms()
            due = record.store_timestamp + delay
            if due > now + delay:  # stored "in the future": the clock went back
                due = now
            if due > now:
                self._note(level, offset)
                return (due - now) / 1000
            try:
                message = timeup(record)
            except ValueError as exc:
                log.error("delay level %d: offset %d dropped: %s", level, offset, exc)
                offset += 1
                continue
            result = self.put(message)
            if result.status in _NEVER_STORED:
                log.error(
                    "delay level %d: offset %d can never be delivered to %s: %s %s (skipped;"
                    " it stays in %s)",
                    level,
                    offset,
                    message.topic,
                    result.status.name,
                    result.detail,
                    SCHEDULE_TOPIC,
                )
                self._failed_puts += 1
                offset += 1
                continue
            if not result.ok:
                self._failed_puts += 1
                if level not in self._failing:
                    self._failing.add(level)
                    log.warning(
                        "delay level %d: delivering offset %d to %s failed: %s %s (retrying)",
                        level,
                        offset,
                        message.topic,
                        result.status.name,
                        result.detail,
                    )
                self._note(level, offset)
                return RETRY_PAUSE
            self._failing.discard(level)
            self._delivered += 1
            offset += 1
        self._note(level, offset)
        return 0.0
