"""Serving a PULL_MESSAGE from a store's consume queues: what every broker mode answers, and
which member of the broker name the consumer should pull from next (RocketMQ's
``DefaultMessageStore.getMessage``)."""

from __future__ import annotations

import enum
from collections.abc import Callable

import attrs

from hanet.protocol import MASTER_ID
from hanet.store import CommitLogStore, CorruptRecordError
from hanet.store.lowlevel import CQ_BLANK_SIZE, INDEX_ROW, java_string_hash, scan_index

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

_TO_FILE_END = 1 << 62

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
        records: the records as stored, in queue order (FOUND only): copies, or views of
            the mapped commit log (``serve_pull(views=True)``).
        suggested: the member to pull from next (``suggestWhichBrokerId``).
    """

    status: GetMessageStatus
    next_offset: int
    min_offset: int
    max_offset: int
    records: tuple[bytes | memoryview, ...] = ()
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
    views: bool = False,
) -> PullResult:
    """Serve a pull from ``store``'s consume queues (synchronous; reads mapped files).

    ``views``: the records are read-only views of the mapped commit log instead of copies:
    copy them (the answer's body) before anything else runs, as a slave or a DLedger
    follower may truncate (zero) what they show.

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
        records: tuple[bytes | memoryview, ...] = (),
        behind: int = 0,
    ) -> PullResult:
        suggested = MASTER_ID if suggest is None else suggest(behind)
        return PullResult(status, next_offset, low, high, records, suggested)

    if high <= low and (high == 0 or offset >= low):
        if high == 0 and (topic, queue_id) not in store.queues():
            return answer(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 0)
        return answer(GetMessageStatus.NO_MESSAGE_IN_QUEUE, high)
    if offset < low:  # retention deleted it (also when it left the queue empty): min offset
        return answer(GetMessageStatus.OFFSET_TOO_SMALL, low)
    if offset == high:
        return answer(GetMessageStatus.OFFSET_OVERFLOW_ONE, offset)
    if offset > high:
        return answer(GetMessageStatus.OFFSET_OVERFLOW_BADLY, high)
    records: list[bytes | memoryview] = []
    budget = MAX_PULL_BYTES
    end = min(offset + min(max(max_messages, 1), MAX_PULL_MESSAGES), high)
    next_offset = offset
    pulled_end = 0
    floor = store.min_offset
    topic_bytes = topic.encode()
    # A view from a record to its file's end serves the queue's next records (they lie
    # after it, interleaved with other queues') without a lookup each.
    span: memoryview = memoryview(b"")
    span_start = 0
    full = False
    while next_offset < end and not full:
        # The entries in one go (one consume queue file at a time), then each record.
        entries = store.consume_queue_entries(topic, queue_id, next_offset, end - next_offset)
        if not entries:
            break
        for physical, size, tags_hash in entries:
            if store.damage:  # a gap, or an entry into a damaged range: named, not skipped
                _refuse_damaged(store, topic, queue_id, next_offset, physical, size, pulled_end)
            if (
                size == CQ_BLANK_SIZE
                or (tags is not None and tags_hash not in tags)
                or physical < floor  # being deleted (RocketMQ: MESSAGE_WAS_REMOVING)
            ):
                next_offset += 1
                continue
            if records and size > budget:
                full = True
                break
            if size <= 0:
                raise CorruptRecordError(physical, f"not a {size}-byte record")
            at = physical - span_start
            if not 0 <= at <= len(span) - size:
                span, span_start, at = store.read_view(physical, _TO_FILE_END), physical, 0
            record = _checked(
                span[at : at + size], physical, size, topic_bytes, queue_id, next_offset, tags_hash
            )
            records.append(record if views else record.tobytes())
            pulled_end = physical + size
            budget -= size
            next_offset += 1
    if not records:
        return answer(GetMessageStatus.NO_MATCHED_MESSAGE, next_offset)
    behind = max(store.max_offset - pulled_end, 0)
    return answer(GetMessageStatus.FOUND, next_offset, tuple(records), behind)


def _refuse_damaged(
    store: CommitLogStore,
    topic: str,
    queue_id: int,
    queue_offset: int,
    physical: int,
    size: int,
    before: int,
) -> None:
    """In a store with damaged commit log ranges: an entry pointing into one, or a blank
    entry (a gap) with one between the queue's records around it (the lost message may be in
    it), is refused, naming the range, rather than served or skipped (it may be repaired)."""
    if size != CQ_BLANK_SIZE:
        damaged = store.damaged(physical, physical + max(size, 1))
        if damaged is not None:
            raise CorruptRecordError(
                physical, f"the damaged commit log range {damaged} (not served until repaired)"
            )
        return
    low = before
    if queue_offset > 0 and not low:
        previous = store.consume_queue_entry(topic, queue_id, queue_offset - 1)
        low = previous[0] if previous is not None else 0
    high = store.max_offset
    last = min(store.max_queue_offset(topic, queue_id), queue_offset + 1025)
    for following in range(queue_offset + 1, last):
        entry = store.consume_queue_entry(topic, queue_id, following)
        if entry is not None and entry[1] != CQ_BLANK_SIZE:
            high = entry[0]
            break
    damaged = store.damaged(low, high)
    if damaged is not None:
        raise CorruptRecordError(
            damaged.start,
            f"message {topic}/{queue_id}@{queue_offset} may be in the damaged commit log range "
            f"{damaged} (not served until repaired)",
        )


def _checked(
    record: memoryview,
    physical: int,
    size: int,
    topic: bytes,
    queue_id: int,
    queue_offset: int,
    tags_hash: int,
) -> memoryview:
    """``record`` when it is the whole valid record its consume queue entry points at, and
    that entry's: its topic, queue id, queue offset and tag hash (an entry damaged on disk, or
    pointing at another record of the same size, would serve the wrong message).

    A pull never serves bytes that fail their checks (a byte flipped on disk, an entry that
    points at the wrong place): the error names the record's physical offset. Checked by
    the store's record index (native when built), which decodes no body; one scan gives both
    the checks and the fields compared.
    """
    result = scan_index(record, 0, size, physical, check_physical_offset=True)
    if result.records != 1 or result.position != size:
        detail = result.detail if result.records == 0 else ""
        raise CorruptRecordError(physical, detail or f"not a {size}-byte record")
    _, _, rec_queue, rec_offset, rec_hash, _, start, length, _ = INDEX_ROW.unpack_from(result.rows)
    if (rec_queue, rec_offset, rec_hash) != (queue_id, queue_offset, tags_hash) or (
        record[start : start + length] != topic  # compared in place: no copy per record
    ):
        rec_topic = bytes(record[start : start + length])
        raise CorruptRecordError(
            physical,
            f"the consume queue entry {topic.decode('utf-8', 'replace')}/{queue_id} "
            f"{queue_offset} (tag hash {tags_hash}) points at a record of "
            f"{rec_topic.decode('utf-8', 'replace')}/{rec_queue} {rec_offset} "
            f"(tag hash {rec_hash})",
        )
    return record
