"""Serving a PULL_MESSAGE from a store's consume queues: what every broker mode answers, and
which member of the broker name the consumer should pull from next (RocketMQ's
``DefaultMessageStore.getMessage``)."""

from __future__ import annotations

import enum
import functools
import struct
from collections.abc import Callable

import attrs

from hanet.protocol import MASTER_ID
from hanet.store import CommitLogStore, CorruptRecordError
from hanet.store.lowlevel import (
    CQ_BLANK_SIZE,
    CQ_ENTRY_SIZE,
    INDEX_ROW,
    NATIVE_PULL,
    PULL_DONE,
    PULL_FULL,
    PULL_MOVE,
    PullGather,
    java_string_hash,
    native_pull_gather,
    pack_damaged,
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

_TO_FILE_END = 1 << 62
_ENTRY = struct.Struct(">qiq")

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
        records: the records as stored, in queue order (FOUND, unless ``joined``): copies,
            or views of the mapped commit log (``serve_pull(views=True)``).
        suggested: the member to pull from next (``suggestWhichBrokerId``).
        body: the records joined (``serve_pull(joined=True)``: the answer's body; else b"").
        count: how many records were found.
    """

    status: GetMessageStatus
    next_offset: int
    min_offset: int
    max_offset: int
    records: tuple[bytes | memoryview, ...] = ()
    suggested: int = MASTER_ID
    body: bytes = b""
    count: int = 0


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


_CACHED_EXPRESSION = 256
"""The longest subscription expression whose filter is cached (a peer chooses them: 1,024
cached expressions of a frame's size each would hold gigabytes)."""


def subscription_filter(expression: str | None) -> frozenset[int] | None:
    """The tag hashes a TAG subscription expression accepts (``TagA || TagB``), None for
    every message (``*``, empty, or no expression). Expressions up to
    :data:`_CACHED_EXPRESSION` characters are parsed once (cached), longer ones each time."""
    if expression is None:
        return None
    if len(expression) <= _CACHED_EXPRESSION:
        return _cached_filter(expression)
    return _parse_filter(expression)


@functools.lru_cache(maxsize=1024)
def _cached_filter(expression: str) -> frozenset[int] | None:
    return _parse_filter(expression)


def _parse_filter(expression: str) -> frozenset[int] | None:
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
    joined: bool = False,
    native: bool | None = None,
    max_bytes: int = MAX_PULL_BYTES,
) -> PullResult:
    """Serve a pull from ``store``'s consume queues (synchronous; reads mapped files).

    ``views``: the records are read-only views of the mapped commit log instead of copies:
    copy them (the answer's body) before anything else runs, as a slave or a DLedger
    follower may truncate (zero) what they show. ``joined``: the records come joined in
    :attr:`PullResult.body` (a copy: the answer's body) instead of one by one; then
    ``native`` (None: when built and ``HANET_NO_EXTENSIONS`` is unset) gathers them in one
    native call per consume queue file (:data:`~hanet.store.lowlevel.native_pull_gather`),
    with the same result as this module's loop, its reference. ``max_bytes``: the pull stops
    adding records past this many record bytes (the first always goes).

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

    def answer(status: GetMessageStatus, next_offset: int) -> PullResult:
        suggested = MASTER_ID if suggest is None else suggest(0)
        return PullResult(status, next_offset, low, high, (), suggested)

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
    end = min(offset + min(max(max_messages, 1), MAX_PULL_MESSAGES), high)
    taking = _Taking(
        store,
        topic,
        topic.encode(),
        queue_id,
        tags,
        views or joined,  # joined below, before anything else runs: the one copy
        store.min_offset,
        offset,
        max_bytes,
    )
    gather = native_pull_gather if (NATIVE_PULL if native is None else native) else None
    if joined and gather is not None:
        _gather_natively(taking, end, gather)
    else:
        _take_each(taking, end)
    if not taking.count:
        return answer(GetMessageStatus.NO_MATCHED_MESSAGE, taking.next_offset)
    behind = max(store.max_offset - taking.pulled_end, 0)
    suggested = MASTER_ID if suggest is None else suggest(behind)
    parts = taking.parts
    records: tuple[bytes | memoryview, ...] = ()
    body = b""
    if not joined:
        records = tuple(parts)
    elif len(parts) == 1 and isinstance(parts[0], bytes):
        body = parts[0]  # the one native run: already a copy
    else:
        body = b"".join(parts)
    return PullResult(
        GetMessageStatus.FOUND,
        taking.next_offset,
        low,
        high,
        records,
        suggested,
        body,
        taking.count,
    )


@attrs.define
class _Taking:
    """A pull's records so far, and where it is."""

    store: CommitLogStore
    topic: str
    topic_bytes: bytes
    queue_id: int
    tags: frozenset[int] | None
    views: bool
    floor: int
    """Entries pointing below it are skipped: being deleted (RocketMQ: MESSAGE_WAS_REMOVING)."""
    next_offset: int
    budget: int
    """The record bytes that may still be added."""
    parts: list[bytes | memoryview] = attrs.Factory(list)
    """The records (or runs of them joined), in queue order."""
    count: int = 0
    pulled_end: int = 0
    # A view from a record to its file's end serves the queue's next records (they lie
    # after it, interleaved with other queues') without a lookup each.
    span: memoryview = attrs.field(factory=lambda: memoryview(b""))
    span_start: int = -1

    def take(self, physical: int, size: int, tags_hash: int) -> bool:
        """The entry at :attr:`next_offset`: skip it or add its record (the reference of
        every check). False, and the entry not used, when its record does not fit the
        budget (the first record always goes)."""
        store = self.store
        if store.damage:  # a gap, or an entry into a damaged range: named, not skipped
            _refuse_damaged(
                store,
                self.topic,
                self.queue_id,
                self.next_offset,
                physical,
                size,
                self.pulled_end,
            )
        if (
            size == CQ_BLANK_SIZE
            or (self.tags is not None and tags_hash not in self.tags)
            or physical < self.floor
        ):
            self.next_offset += 1
            return True
        if self.count and size > self.budget:
            return False
        if size <= 0:
            raise CorruptRecordError(physical, f"not a {size}-byte record")
        at = physical - self.span_start
        if not 0 <= at <= len(self.span) - size:
            self.span, self.span_start, at = store.read_view(physical, _TO_FILE_END), physical, 0
        record = _checked(
            self.span[at : at + size],
            physical,
            size,
            self.topic_bytes,
            self.queue_id,
            self.next_offset,
            tags_hash,
        )
        self.parts.append(record if self.views else record.tobytes())
        self.count += 1
        self.pulled_end = physical + size
        self.budget -= size
        self.next_offset += 1
        return True


def _take_each(taking: _Taking, end: int) -> None:
    """The reference loop: the entries in one go (one consume queue file at a time), then
    each record."""
    store = taking.store
    while taking.next_offset < end:
        entries = store.consume_queue_entries(
            taking.topic, taking.queue_id, taking.next_offset, end - taking.next_offset
        )
        if not entries:
            return
        for physical, size, tags_hash in entries:
            if not taking.take(physical, size, tags_hash):
                return


def _gather_natively(taking: _Taking, end: int, gather: PullGather) -> None:
    """As :func:`_take_each`, one native call per consume queue file (more where it stops:
    a record in another commit log file, an entry the reference serves)."""
    store = taking.store
    damaged = pack_damaged(store.damage) if store.damage else None
    while taking.next_offset < end:
        view = store.consume_queue_view(
            taking.topic, taking.queue_id, taking.next_offset, end - taking.next_offset
        )
        if not view:
            return
        if taking.span_start < 0:  # the log from the first record on, before the first call
            physical, size, _ = _ENTRY.unpack_from(view)
            if size != CQ_BLANK_SIZE and physical >= taking.floor:
                taking.span, taking.span_start = store.read_view(physical, _TO_FILE_END), physical
        at = 0
        while at < len(view):
            stop, used, count, pulled_end, budget, body = gather(
                view[at:] if at else view,
                taking.span,
                max(taking.span_start, 0),
                taking.floor,
                taking.tags,
                taking.budget,
                taking.count,
                taking.topic_bytes,
                taking.queue_id,
                taking.next_offset,
                damaged,
            )
            at += used * CQ_ENTRY_SIZE
            taking.next_offset += used
            if count:
                taking.parts.append(body)
                taking.count += count
                taking.pulled_end = pulled_end
                taking.budget = budget
            if stop == PULL_DONE:
                break
            if stop == PULL_FULL:
                return
            physical, size, tags_hash = _ENTRY.unpack_from(view, at)
            if stop == PULL_MOVE and taking.span_start != physical:
                taking.span, taking.span_start = store.read_view(physical, _TO_FILE_END), physical
                continue
            if not taking.take(physical, size, tags_hash):  # raises, or serves it
                return
            at += CQ_ENTRY_SIZE


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
