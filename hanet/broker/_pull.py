"""Serving a PULL from a store's consume queues: what every broker mode answers, and which
member of the broker name the consumer should pull from next."""

from __future__ import annotations

from collections.abc import Callable

from hanet.protocol import MASTER_ID, MAX_PULL_MESSAGES, PullRequest, PullResponse, PullStatus
from hanet.store import (
    CQ_BLANK_SIZE,
    CommitLogStore,
    CorruptRecordError,
    index_scan_stop,
    scan_index,
)

__all__ = ["MAX_PULL_BYTES", "serve_pull", "suggest_broker_id"]

MAX_PULL_BYTES = 4 * 1024 * 1024
"""A pull stops adding messages past this many record bytes (the first always goes)."""


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


def serve_pull(
    store: CommitLogStore,
    request: PullRequest,
    queues: int,
    *,
    suggest: Callable[[int], int] | None = None,
) -> PullResponse:
    """Serve a PULL from ``store``'s consume queues (synchronous; reads mapped files).

    ``queues`` is how many queues a topic has on this broker. ``suggest`` maps the commit log
    bytes left behind the pull (0 when nothing was found) to the answer's
    ``suggested_broker_id`` (see :func:`suggest_broker_id`; None: always the master).

    Only looks queues up and creates nothing: a topic never stored here answers
    TOPIC_NOT_EXIST, a queue id beyond the topic's queues NO_MATCHED_LOGIC_QUEUE, an
    empty queue NO_MESSAGE_IN_QUEUE.

    Raises:
        CorruptRecordError: an entry points at bytes that are not a record.
    """
    topic, queue_id, offset = request.topic, request.queue_id, request.queue_offset
    low = store.min_queue_offset(topic, queue_id)
    high = store.max_queue_offset(topic, queue_id)

    def answer(
        status: PullStatus, next_offset: int, records: tuple[bytes, ...] = (), behind: int = 0
    ) -> PullResponse:
        suggested = MASTER_ID if suggest is None else suggest(behind)
        return PullResponse(request.request_id, status, next_offset, low, high, records, suggested)

    if high <= low:
        if high == 0:  # an empty or unknown queue: which one (the rare path)
            existing = store.queues()
            if (topic, queue_id) not in existing:
                known = [q for t, q in existing if t == topic]
                if not known:
                    return answer(PullStatus.TOPIC_NOT_EXIST, 0)
                if not 0 <= queue_id < queues:
                    return answer(PullStatus.NO_MATCHED_LOGIC_QUEUE, 0)
        return answer(PullStatus.NO_MESSAGE_IN_QUEUE, 0 if high == 0 else high)
    if offset < low:
        return answer(PullStatus.OFFSET_TOO_SMALL, low)
    if offset == high:
        return answer(PullStatus.OFFSET_OVERFLOW_ONE, offset)
    if offset > high:
        return answer(PullStatus.OFFSET_OVERFLOW_BADLY, high)
    records: list[bytes] = []
    budget = MAX_PULL_BYTES
    end = min(offset + min(request.max_messages, MAX_PULL_MESSAGES), high)
    next_offset = offset
    pulled_end = 0
    while next_offset < end:
        entry = store.consume_queue_entry(topic, queue_id, next_offset)
        if entry is None:
            break
        physical, size, _tags_hash = entry
        if size == CQ_BLANK_SIZE:
            next_offset += 1
            continue
        if records and size > budget:
            break
        records.append(_validated(store.read(physical, size), physical, size))
        pulled_end = physical + size
        budget -= size
        next_offset += 1
    behind = max(store.max_offset - pulled_end, 0) if records else 0
    return answer(PullStatus.FOUND, next_offset, tuple(records), behind)


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
