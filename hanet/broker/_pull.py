"""Serving a PULL from a store's consume queues: what every broker mode answers."""

from __future__ import annotations

from hanet.protocol import MAX_PULL_MESSAGES, PullRequest, PullResponse, PullStatus
from hanet.store import CQ_BLANK_SIZE, CommitLogStore, CorruptRecordError, scan_records

__all__ = ["MAX_PULL_BYTES", "serve_pull"]

MAX_PULL_BYTES = 4 * 1024 * 1024
"""A pull stops adding messages past this many record bytes (the first always goes)."""


def serve_pull(store: CommitLogStore, request: PullRequest, queues: int) -> PullResponse:
    """Serve a PULL from ``store``'s consume queues (synchronous; reads mapped files).

    ``queues`` is how many queues a topic has on this broker.

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
        status: PullStatus, next_offset: int, records: tuple[bytes, ...] = ()
    ) -> PullResponse:
        return PullResponse(request.request_id, status, next_offset, low, high, records)

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
        budget -= size
        next_offset += 1
    return answer(PullStatus.FOUND, next_offset, tuple(records))


def _validated(record: bytes, physical: int, size: int) -> bytes:
    """``record`` when it is the whole valid record its consume queue entry points at.

    A pull never serves bytes that fail their checks (a byte flipped on disk, an entry that
    points at the wrong place): the error names the record's physical offset.
    """
    scanner = scan_records(record, base_offset=physical, check_physical_offset=True)
    for _ in scanner:
        if scanner.position == size:
            return record
        break
    stop = scanner.stop
    reason = stop.detail if stop is not None and stop.detail else f"not a {size}-byte record"
    raise CorruptRecordError(physical, reason)
