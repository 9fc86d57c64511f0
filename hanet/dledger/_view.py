"""A DLedger node's commit log view and the entry bodies it keeps in memory.

:class:`CommitLogView` applies committed entries to a :class:`hanet.store.CommitLogStore`
(role SLAVE: only these raw appends write to it): each record is re-stamped with its offset in
the view and its consume queue offset and appended with
:meth:`~hanet.store.CommitLogStore.append_raw` (a blank record ends a file as the store itself
does). ``applied`` (JSON: the last applied index and the view's end) records how far the view
goes; :meth:`CommitLogView.load` makes the view match it at start.

:class:`Bodies` keeps the bodies of entries appended (index -> term, body) until they are
applied and, on a leader, acknowledged by every follower that keeps up, within a byte budget,
so that neither the appends a leader sends (:class:`CachedLog`, the log as the Raft core reads
it; the follower one acknowledgement behind the quorum included) nor the view read them back
from the files. A committed record is applied without being decoded (``_stamp.py``: its
placing fields read, its two offsets rewritten at fixed places); the store checks it whole.
A batch of committed records is placed in one call by the store extension's ``view_records``
when it is built (:func:`view_records_py` is its reference).

Synchronous; the node calls :meth:`CommitLogView.save` off its event loop.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Container, Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

from hanet.errors import HanetError
from hanet.store import CommitLogStore, offset_msg_id
from hanet.store.lowlevel import (
    BLANK_RECORD_SIZE,
    NATIVE_SCANNER,
    encode_blank,
    native_view_records,
)

from ._filelog import FileLog
from ._log import LogEntry
from ._stamp import OFFSETS, OFFSETS_AT, record_fields

_OFFSETS, _OFFSETS_AT = OFFSETS, OFFSETS_AT
_NATIVE_VIEW = native_view_records if NATIVE_SCANNER else None
"""The store extension's ``view_records`` when the extension is in use (the reference is
:func:`view_records_py`), else None."""

__all__ = [
    "APPLIED",
    "Bodies",
    "CachedLog",
    "CommitLogView",
    "NotARecordError",
    "Placement",
    "view_records_py",
]

log = logging.getLogger("hanet.dledger")

APPLIED = "applied"
"""The name of the record of how far the view goes, in the log's directory."""
_APPLIED = APPLIED
_MAX_BODIES = 1 << 16
"""Appended entries whose bodies are kept until they are released (else read back)."""
_MAX_BODY_BYTES = 64 * 1024 * 1024
"""Bytes of those bodies kept at most: past it, entries are read back from the log (appends
a leader sends that do not commit cannot fill a follower's memory)."""


class Bodies:
    """Index -> (term, body) of entries appended and not yet released, within
    :data:`_MAX_BODY_BYTES` (an entry past it is read back from the log when needed).

    An entry is released (:meth:`release_through`) once it is applied and, on a leader, sent
    to and acknowledged by every follower that keeps up: the appends to a follower one ack
    behind the quorum are made from here too, not read back entry by entry."""

    def __init__(self) -> None:
        self._bodies: dict[int, tuple[int, bytes]] = {}
        self.bytes = 0
        self.released = 0
        """Every entry up to this index is released (applied, sent)."""

    def __len__(self) -> int:
        return len(self._bodies)

    def get(self, index: int) -> tuple[int, bytes] | None:
        return self._bodies.get(index)

    def keep(self, index: int, term: int, body: bytes) -> None:
        """Keep an appended entry's body until it is released (replacing one kept there)."""
        kept = self._bodies
        old = kept.pop(index, None)  # self.drop(index), inlined: once per entry
        if old is not None:
            self.bytes -= len(old[1])
        if index > self.released and self.bytes + len(body) <= _MAX_BODY_BYTES:
            kept[index] = (term, body)
            self.bytes += len(body)

    def drop(self, index: int) -> None:
        self.pop(index)

    def pop(self, index: int) -> tuple[int, bytes] | None:
        old = self._bodies.pop(index, None)
        if old is not None:
            self.bytes -= len(old[1])
        return old

    @property
    def crowded(self) -> bool:
        """Over half the byte budget is kept: keep nothing applied for a lagging follower
        (the entries appended next must fit, or they are read back when applied)."""
        return self.bytes > _MAX_BODY_BYTES // 2

    def release_through(self, index: int) -> None:
        """Forget the entries up to ``index`` (applied, and no follower that keeps up lacks
        them)."""
        low = self.released
        if index <= low:
            return
        kept = self._bodies
        gone: Iterable[int]
        if index - low > len(kept):
            gone = [i for i in kept if i <= index]
        else:
            gone = range(low + 1, index + 1)
        freed = 0
        for each in gone:  # self.pop(each), inlined: once per entry
            old = kept.pop(each, None)
            if old is not None:
                freed += len(old[1])
        self.bytes -= freed
        self.released = index

    def trim(self) -> None:
        """Forget everything when too many entries were never released (cut by a new
        leader)."""
        if len(self._bodies) > _MAX_BODIES:
            self._bodies.clear()
            self.bytes = 0


class Placement(NamedTuple):
    """Where a committed message went in the view (a tuple: one is made per put)."""

    wrote_offset: int
    wrote_size: int
    queue_id: int
    queue_offset: int
    store_timestamp: int
    msg_id: str


class NotARecordError(HanetError, ValueError):
    """A committed body :func:`view_records_py` cannot place: the ``at``-th, and why."""

    def __init__(self, at: int, reason: str) -> None:
        super().__init__(f"body {at}: {reason}")
        self.at = at
        self.reason = reason


PlacedRecord = tuple[int, int, int, int, int, bytes, int]
"""Where a committed record went: offset, size, queue id, queue offset, store timestamp,
store host and port."""


def view_records_py(
    bodies: Sequence[bytes],
    offset: int,
    file_size: int,
    queues: dict[tuple[str, int], int],
    queue_start: Callable[[str, int], int],
    places: bool,
) -> tuple[bytearray, int, list[PlacedRecord | None] | None]:
    """The commit log bytes that apply ``bodies`` (committed records; an empty body, a no-op,
    is skipped) at ``offset`` of a commit log of ``file_size``-byte files, the end they reach
    and, with ``places``, where each went (None for a skipped one).

    A record that does not fit with a blank after it in the rest of its file comes after a
    blank record filling it. Each is re-stamped, not decoded (``_stamp.py``): its queue offset
    the next of its (topic, queue id) in ``queues`` (updated; a queue not in it starts at
    ``queue_start(topic, queue_id)``), its physical offset its place. The reference of the
    store extension's ``view_records``, which makes the same bytes and returns None where this
    raises.

    Raises:
        NotARecordError: a body is not a record (as :func:`record_place` reads one).
        ValueError: a file's end leaves less room than a blank record (no store does).
    """
    buf = bytearray()
    placed: list[PlacedRecord | None] | None = [] if places else None
    place = record_fields
    pack_offsets = _OFFSETS.pack_into
    for k, body in enumerate(bodies):
        if not body:
            if placed is not None:
                placed.append(None)
            continue
        try:
            size, topic, queue_id, store_timestamp, store_host, store_port = place(body)
        except ValueError as exc:
            raise NotARecordError(k, str(exc)) from None
        space = file_size - offset % file_size
        if size + BLANK_RECORD_SIZE > space:
            buf += encode_blank(space)
            buf += bytes(space - BLANK_RECORD_SIZE)
            offset += space
        key = (topic, queue_id)
        queue_offset = queues.get(key)
        if queue_offset is None:
            queue_offset = queue_start(topic, queue_id)
        queues[key] = queue_offset + 1
        at = len(buf)
        buf += body
        pack_offsets(buf, at + _OFFSETS_AT, queue_offset, offset)  # stamp_into, inlined
        if placed is not None:
            placed.append(
                (offset, size, queue_id, queue_offset, store_timestamp, store_host, store_port)
            )
        offset += size
    return buf, offset, placed


class CommitLogView:
    """Committed entries of ``log`` applied to ``store`` (see the module docstring).

    Attributes:
        applied: the last index applied.
        saved: the (index, offset) ``applied`` holds.
        saved_error: why the last :meth:`save` failed (None: it did not).
    """

    def __init__(self, node_id: str, log: FileLog, store: CommitLogStore, bodies: Bodies) -> None:
        self.node_id = node_id
        self.log = log
        self.store = store
        self.bodies = bodies
        self.path: Path = log.directory / _APPLIED
        self.applied = 0
        self.saved = (-1, -1)
        self.saved_error: str | None = None
        self.queue_version = 0
        """Bumped when an apply reaches a (topic, queue id) this view had not applied to
        since it was opened: readers of the store's queue list refresh only then."""
        self._keys: set[tuple[str, int]] = set()

    def load(self) -> None:
        """Read ``applied`` and make the view match it: a view past it is cut back there;
        one that does not reach it, or a log that lost what it names, is rebuilt (emptied,
        applied again from the first entry)."""
        store, log_, path = self.store, self.log, self.path
        index, offset = 0, 0
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            index, offset = int(raw["index"]), int(raw["offset"])
        except FileNotFoundError:
            pass
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("%s: unreadable (%s): rebuilding the commit log view", path, exc)
            index, offset = 0, -1
        if offset >= 0 and store.min_offset <= offset < store.max_offset:
            # the view went on past its last checkpoint: drop that part, it is applied again
            store.truncate_to(offset)
        if index > log_.last_index or offset != store.max_offset:
            if store.max_offset > 0 or index > 0:
                log.warning(
                    "%s: the commit log view (end %d) does not match %s (index %d, end %d): "
                    "rebuilding it from the log",
                    self.node_id,
                    store.max_offset,
                    path,
                    index,
                    offset,
                )
            if store.max_offset > 0:
                store.truncate_to(store.min_offset)
                if store.max_offset > 0:
                    raise RuntimeError(f"{store.root}: cannot empty the commit log view")
            index = 0
        self.applied = index
        self.saved = (index, store.max_offset)

    def save(self, index: int, offset: int) -> None:
        """Replace ``applied`` with (index, offset); an error is logged once and retried
        at the next call (the record stays behind the view: safe)."""
        path = self.path
        temp = path.with_name(_APPLIED + ".tmp")
        try:
            temp.write_text(json.dumps({"index": index, "offset": offset}), encoding="utf-8")
            os.replace(temp, path)
        except OSError as exc:
            # out of descriptors, say: the record stays behind the view, which is safe (the
            # part past it is applied again at the next start); tried again next time
            if self.saved_error is None:
                log.warning("%s: cannot write %s (%s): retrying", self.node_id, path, exc)
            self.saved_error = str(exc)
            return
        if self.saved_error is not None:
            log.info("%s: %s written again", self.node_id, path)
            self.saved_error = None
        self.saved = (index, offset)

    def apply(self, commit_index: int, wanted: Container[int] = ()) -> dict[int, Placement]:
        """Apply the committed entries up to ``commit_index``; where the messages of the
        indexes in ``wanted`` went."""
        store, log_ = self.store, self.log
        placed: dict[int, Placement] = {}
        if commit_index <= self.applied:
            return placed
        file_size = store.config.mapped_file_size
        start = store.max_offset
        first = self.applied + 1
        kept = self.bodies.get
        term_at = log_.term_at
        bodies: list[bytes] = []
        for index in range(first, min(commit_index, log_.last_index) + 1):
            cached = kept(index)
            if cached is not None and term_at(index) == cached[0]:
                # the same index and term: the same entry (Raft's log matching)
                bodies.append(cached[1])
            else:
                bodies.append(log_.read_entry(index).body)  # checks the entry's CRC
        # placed without being decoded: checked when it entered the log, and append_raw
        # checks every record again (body CRC included)
        queues: dict[tuple[str, int], int] = {}
        want = bool(wanted)
        got = None
        if _NATIVE_VIEW is not None:
            got = _NATIVE_VIEW(bodies, start, file_size, queues, store.max_queue_offset, want)
        if got is None:  # refused natively (the reference names it) or no extension
            queues.clear()
            try:
                got = view_records_py(
                    bodies, start, file_size, queues, store.max_queue_offset, want
                )
            except NotARecordError as exc:
                index = first + exc.at
                raise RuntimeError(
                    f"{self.node_id}: committed entry {index} (at {log_.position(index)}) is "
                    f"not a record: {exc.reason}"
                ) from None
        buf, offset, places = got
        for key in queues:
            if key not in self._keys:
                self._keys.add(key)
                self.queue_version += 1
        if places is not None:
            for k, place in enumerate(places):
                if place is not None and first + k in wanted:
                    at, size, queue_id, queue_offset, stamp, host, port = place
                    placed[first + k] = Placement(
                        at, size, queue_id, queue_offset, stamp, offset_msg_id(host, port, at)
                    )
        if buf:
            store.append_raw(start, buf)
            if store.max_offset != offset:
                raise RuntimeError(
                    f"{self.node_id}: the commit log view refused committed entries: "
                    f"{store.dispatch_error}"
                )
        self.applied = commit_index
        self.bodies.trim()
        return placed


class CachedLog:
    """The node's :class:`FileLog` as the Raft core sees it, with the entries appended and
    not yet applied sent from memory (``bodies``: index -> term, body) rather than read back
    and CRC-checked again for each follower; anything else (a lagging follower, a no-op) is
    read from the files."""

    def __init__(self, log: FileLog, bodies: Bodies) -> None:
        self._log = log
        self._bodies = bodies

    @property
    def last_index(self) -> int:
        return self._log.last_index

    @property
    def last_term(self) -> int:
        return self._log.last_term

    def term_at(self, index: int) -> int | None:
        return self._log.term_at(index)

    def append(self, entries: Sequence[LogEntry]) -> None:
        self._log.append(entries)

    def truncate_from(self, index: int) -> None:
        self._log.truncate_from(index)

    def entries_from(self, index: int, max_count: int) -> list[LogEntry]:
        log_, bodies = self._log, self._bodies
        out: list[LogEntry] = []
        stop = min(max(index, 1) + max(max_count, 0), log_.last_index + 1)
        for i in range(max(index, 1), stop):
            cached = bodies.get(i)
            if cached is None or cached[1] == b"" or log_.term_at(i) != cached[0]:
                return out + log_.entries_from(i, stop - i)
            out.append(LogEntry(i, cached[0], cached[1]))
        return out
