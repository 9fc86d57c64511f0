"""Serving a PULL_MESSAGE from a store's consume queues: what every broker mode answers, and
which member of the broker name the consumer should pull from next (RocketMQ's
``DefaultMessageStore.getMessage``)."""

from __future__ import annotations

import enum
from collections.abc import Callable

import attrs

from hanet.protocol import MASTER_ID
from hanet.store import (
    CQ_BLANK_SIZE,
    INDEX_ROW,
    CommitLogStore,
    CorruptRecordError,
    index_scan_stop,
    java_string_hash,
    scan_index,
)

__all__ = [
    "MAX_PULL_BYTES",
    "MAX_PULL_MESSAGES",
    "GetMessageStatus",
    "PullResult",
    "serve_pull",
    "subscription_filter",
    "suggest_broker_id",
]

MAX_PULL_BYTES = 4 * 1024 * 1024
"""A pull stops adding messages past this many record bytes (the first always goes)."""

MAX_PULL_MESSAGES = 1024
"""The most messages one pull answers, whatever ``maxMsgNums`` asks."""


class GetMessageStatus(enum.Enum):
    """How a pull went (RocketMQ's ``GetMessageStatus``)."""

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"


@attrs.frozen
class PullResult:
    """What a pull found.

    Attributes:
        status: how it went.
        next_offset: the queue offset to pull from next.
        min_offset, max_offset: the queue's bounds.
        records: the records as stored, in queue order (FOUND only).
        suggested: the member to pull from next (``suggestWhichBrokerId``).
    """

    status: GetMessageStatus
    next_offset: int
    min_offset: int
    max_offset: int
    records: tuple[bytes, ...] = ()
    suggested: int = MASTER_ID


def suggest_broker_id(
    behind: int, *, memory: int, slave_read_enable: bool, which_broker: int
) -> int:
    """The member a consumer should pull from next (RocketMQ's ``suggestWhichBrokerId``).

    ``behind``: the commit log bytes after what the pull returned (the max offset minus the
    end of its last record); ``memory``: the physical memory times
    ``accessMessageInMemoryMaxRatio`` / 100. A consumer that far behind reads from disk, not
    the page cache: it is sent to slave ``which_broker`` (``whichBrokerWhenConsumeSlowly``)
    when ``slave_read_enable``, otherwise (and when it is not that far behind) to the master.
    The same rule holds on a master and on a slave (a slave without ``slaveReadEnable`` sends
    its consumers back to the master).
    """
    if slave_read_enable and behind > memory:
        return which_broker
    return MASTER_ID


def subscription_filter(expression: str | None) -> frozenset[int] | None:
    """The tag hashes a TAG subscription expression accepts (``TagA || TagB``), None for
    every message (``*``, empty, or no expression)."""
    if expression is None:
        return None
    tags = [t.strip() for t in expression.split("||")]
    tags = [t for t in tags if t]
    if not tags or "*" in tags:
        return None
    return frozenset(java_string_hash(t) for t in tags)


def serve_pull(
    store: CommitLogStore,
    topic: str,
    queue_id: int,
    offset: int,
    max_messages: int,
    *,
    tags: frozenset[int] | None = None,
    suggest: Callable[[int], int] | None = None,
) -> PullResult:
    """Serve a pull from ``store``'s consume queues (synchronous; reads mapped files).

    ``tags``: the tag hashes to return (:func:`subscription_filter`; None: all); entries of
    other tags are skipped and a range holding none answers NO_MATCHED_MESSAGE with the
    offset after it. ``suggest`` maps the commit log bytes left behind the pull (0 when
    nothing was found) to the member to pull from next (see :func:`suggest_broker_id`;
    None: always the master). Creates nothing: an unknown queue answers
    NO_MATCHED_LOGIC_QUEUE, an empty one NO_MESSAGE_IN_QUEUE.

    Raises:
        CorruptRecordError: an entry points at bytes that are not a record.
    """
    low = store.min_queue_offset(topic, queue_id)
    high = store.max_queue_offset(topic, queue_id)

    def answer(
        status: GetMessageStatus,
        next_offset: int,
        records: tuple[bytes, ...] = (),
        behind: int = 0,
    ) -> PullResult:
        suggested = MASTER_ID if suggest is None else suggest(behind)
        return PullResult(status, next_offset, low, high, records, suggested)

    if high <= low:
        if high == 0 and (topic, queue_id) not in store.queues():
            return answer(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 0)
        return answer(GetMessageStatus.NO_MESSAGE_IN_QUEUE, high)
    if offset < low:
        return answer(GetMessageStatus.OFFSET_TOO_SMALL, low)
    if offset == high:
        return answer(GetMessageStatus.OFFSET_OVERFLOW_ONE, offset)
    if offset > high:
        return answer(GetMessageStatus.OFFSET_OVERFLOW_BADLY, high)
    records: list[bytes] = []
    budget = MAX_PULL_BYTES
    end = min(offset + min(max(max_messages, 1), MAX_PULL_MESSAGES), high)
    next_offset = offset
    pulled_end = 0
    while next_offset < end:
        entry = store.consume_queue_entry(topic, queue_id, next_offset)
        if entry is None:
            break
        physical, size, tags_hash = entry
        if size == CQ_BLANK_SIZE or (tags is not None and tags_hash not in tags):
            next_offset += 1
            continue
        if records and size > budget:
            break
        record = _validated(store.read(physical, size), physical, size)
        _agrees(record, physical, topic, queue_id, next_offset, tags_hash)
        records.append(record)
        pulled_end = physical + size
        budget -= size
        next_offset += 1
    if not records:
        return answer(GetMessageStatus.NO_MATCHED_MESSAGE, next_offset)
    behind = max(store.max_offset - pulled_end, 0)
    return answer(GetMessageStatus.FOUND, next_offset, tuple(records), behind)


def _agrees(
    record: bytes, physical: int, topic: str, queue_id: int, queue_offset: int, tags_hash: int
) -> None:
    """A record served for a consume queue entry must be that entry's: its topic, queue id,
    queue offset and tag hash (an entry damaged on disk, or pointing at another record of the
    same size, would serve the wrong message).

    Raises:
        CorruptRecordError: it is not.
    """
    row = INDEX_ROW.unpack(scan_index(record, 0, len(record), physical, None, False, True)[5])
    _, _, rec_queue, rec_offset, rec_hash, _, start, length, _ = row
    rec_topic = record[start : start + length].decode("utf-8", "replace")
    if (rec_topic, rec_queue, rec_offset, rec_hash) != (topic, queue_id, queue_offset, tags_hash):
        raise CorruptRecordError(
            physical,
            f"the consume queue entry {topic}/{queue_id} {queue_offset} (tag hash {tags_hash}) "
            f"points at a record of {rec_topic}/{rec_queue} {rec_offset} (tag hash {rec_hash})",
        )


def _validated(record: bytes, physical: int, size: int) -> bytes:
    """``record`` when it is the whole valid record its consume queue entry points at.

    A pull never serves bytes that fail their checks (a byte flipped on disk, an entry that
    points at the wrong place): the error names the record's physical offset. Checked by
    the store's record index (native when built), which decodes no body.
    """
    result = scan_index(record, 0, size, physical, None, True, True)
    position, count = result[0], result[4]
    if count == 1 and position == size:
        return record
    detail = index_scan_stop(result, physical).detail if count == 0 else ""
    raise CorruptRecordError(physical, detail or f"not a {size}-byte record")
