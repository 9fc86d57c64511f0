"""A pull's records in one native call per consume queue file (``_speedups.pull_gather``).

:data:`native_pull_gather` walks a consume queue file's entries (:meth:`ConsumeQueue
.entries_view`) against a view of the commit log and returns the records an answer carries,
joined: the per-message work of a PULL_MESSAGE (skipping blank entries, other tags and deleted
records, the byte budget, each record's checks against its entry, the damaged ranges) without a
Python loop. Its reference is the broker's own loop (``hanet.broker``'s ``serve_pull``), which
also serves every entry the native walk hands back (``PULL_STEP``): a record that fails a
check raises there, with the reference's exact error.

Arguments, in order: ``entries`` (the entries' bytes), ``log`` (commit log bytes),
``log_base`` (the physical offset of ``log[0]``), ``floor`` (entries pointing below it are
skipped: being deleted), ``tags`` (the tag hashes wanted; None: all), ``budget`` (record bytes
left), ``taken`` (records already in the answer: the first one always goes), ``topic`` (UTF-8),
``queue_id``, ``queue_offset`` (of ``entries[0]``), ``damaged`` (None, or the damaged commit
log ranges as native ``int64`` (start, end) pairs, :func:`pack_damaged`).

Returns ``(stop, used, count, pulled_end, budget, body)``: how it stopped (:data:`PULL_DONE`
every entry used, :data:`PULL_FULL` the budget is full at entry ``used``, :data:`PULL_STEP`
entry ``used`` needs the reference, :data:`PULL_MOVE` its record is not inside ``log``: view
the log there and call again), the entries used, the records gathered, the end of the last
(-1: none), the budget left and the records joined.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable

from ._damage import DamagedRange
from ._native import ENABLED, native

__all__ = [
    "NATIVE_PULL",
    "PULL_DONE",
    "PULL_FULL",
    "PULL_MOVE",
    "PULL_STEP",
    "PullGather",
    "native_pull_gather",
    "pack_damaged",
]

PULL_DONE = 0
PULL_FULL = 1
PULL_STEP = 2
PULL_MOVE = 3

PullGather = Callable[
    [
        memoryview,
        memoryview,
        int,
        int,
        frozenset[int] | None,
        int,
        int,
        bytes,
        int,
        int,
        bytes | None,
    ],
    tuple[int, int, int, int, int, bytes],
]
"""The signature of :data:`native_pull_gather` (see the module)."""

native_pull_gather: PullGather | None = native("pull_gather")
"""``hanet.store._speedups.pull_gather``, or None when the extension is not built."""

NATIVE_PULL = native_pull_gather is not None and ENABLED
"""Whether pulls gather natively (built, and ``HANET_NO_EXTENSIONS`` unset)."""

_PAIR = struct.Struct("=qq")


def pack_damaged(ranges: Iterable[DamagedRange]) -> bytes:
    """The ``damaged`` argument: each range's ``[start, end)`` as native ``int64`` pairs."""
    return b"".join(_PAIR.pack(r.start, r.end) for r in ranges)
