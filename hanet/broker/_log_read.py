"""HANET_READ_LOG (30003): raw commit log bytes for a reader on another machine.

What ``hanet.spark``'s live audit reads instead of the store's files (``format("commitlog")
.option("brokers", ...)``): each Spark task asks the broker port for its range, answer after
answer. The request's ext fields:

- ``offset``: the physical offset to read from (absent: the log's minimum offset). It must be a
  record boundary: a file's start, the data end, or where a record (or a file's blank tail)
  starts; anything else answers SYSTEM_ERROR "not at a record boundary". Below the log's
  minimum (files deleted by retention) or past its maximum answers SYSTEM_ERROR too.
- ``maxBytes``: at most this many bytes (capped at :data:`MAX_READ_BYTES`; 0: no bytes, only
  the offsets below). A first record larger than that is sent whole.
- ``seek``: ``true`` to start at the first record found at or after ``offset`` (a magic code
  whose record decodes with its own offset in its PHYSICALOFFSET field, looked for up to
  :data:`SEEK_BYTES` ahead), as the file reader cuts a large file into ranges.

The answer's body is the commit log bytes from ``offset`` (ext field ``offset``: where the body
starts, which ``seek`` may move), whole records only, never crossing a file; the records are
walked without their body CRCs (the reader checks those). Ext fields: ``nextOffset`` (where to
read on), ``minOffset``, ``maxOffset``, ``fileSize``; and when the walk stopped on something
that is not a record (a file's blank tail, unwritten zeros, bad data: what the reader turns into
a normal end or a corrupt row) ``stopOffset``, ``stopReason`` (a :class:`~hanet.store.StopReason`
value), ``stopDetail``, ``blankSize``, with ``nextOffset`` then the next file's start.

Served on the broker port only (the HA port's readers count as slaves); TLS applies as to any
broker port request.
"""

from __future__ import annotations

from hanet.protocol import RemotingCommand, RemotingHeaderError, ResponseCode
from hanet.store import CommitLogStore, CorruptRecordError, StopReason, decode_record
from hanet.store.lowlevel import MAGIC_V1, MAGIC_V2, scan_index

__all__ = ["MAX_READ_BYTES", "SEEK_BYTES", "read_log"]

MAX_READ_BYTES = 4 * 1024 * 1024
"""The most bytes one answer carries (a larger ``maxBytes`` is capped; a single larger record
is still sent whole)."""
SEEK_BYTES = 8 * 1024 * 1024
"""How far ``seek`` looks for a record start (twice the largest RocketMQ message)."""

_MAGICS = (MAGIC_V1.to_bytes(4, "big"), MAGIC_V2.to_bytes(4, "big"))


def _int_field(request: RemotingCommand, name: str, default: int | None) -> int | None:
    value = request.fields.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise RemotingHeaderError(f"{name} must be an integer, got {value!r}") from None


def read_log(store: CommitLogStore, request: RemotingCommand) -> RemotingCommand:
    """Serve HANET_READ_LOG from ``store`` (see the module)."""
    low, high = store.min_offset, store.max_offset
    file_size = store.commit_log.file_size
    offset = _int_field(request, "offset", low)
    max_bytes = _int_field(request, "maxBytes", MAX_READ_BYTES)
    assert offset is not None and max_bytes is not None
    seek = request.fields.get("seek", "false").lower() == "true"
    bounds = {"minOffset": low, "maxOffset": high, "fileSize": file_size}
    if max_bytes < 0:
        raise RemotingHeaderError(f"maxBytes must be >= 0, got {max_bytes}")
    if offset < low:
        return request.response(
            ResponseCode.SYSTEM_ERROR,
            f"offset {offset} is below the log's minimum offset {low} "
            "(its file was deleted, or never held)",
            bounds,
        )
    if offset > high:
        return request.response(
            ResponseCode.SYSTEM_ERROR,
            f"offset {offset} is past the log's maximum offset {high}",
            bounds,
        )
    if max_bytes == 0 or offset == high:
        return request.response(fields={**bounds, "offset": offset, "nextOffset": offset})
    damaged = store.damaged(offset, offset - offset % file_size + file_size)
    if damaged is not None and damaged.start <= offset:  # never served (bytes before it are)
        return request.response(
            ResponseCode.SYSTEM_ERROR,
            f"offset {offset} is in the damaged commit log range {damaged}",
            bounds,
        )
    file_start = offset - offset % file_size
    try:
        view = store.read_view(file_start, file_size)
    except ValueError as exc:  # a first file not at a multiple of the file size
        return request.response(ResponseCode.SYSTEM_ERROR, str(exc), bounds)
    if damaged is not None and damaged.start < file_start + len(view):
        view = view[: damaged.start - file_start]  # the data ends there for this answer
    position = offset - file_start
    if seek and position:
        found = _seek(view, position, file_start)
        if found is None:  # nothing that looks like a record ahead: this range reads nothing
            end = file_start + file_size
            return request.response(fields={**bounds, "offset": end, "nextOffset": end})
        position = found
    return _walk(
        request, bounds, view, position, file_start, file_size, min(max_bytes, MAX_READ_BYTES)
    )


def _scan(view: memoryview, start: int, end: int, file_start: int, file_size: int) -> _Stop:
    result = scan_index(
        view, start, end, file_start, file_size, check_crc=False, check_physical_offset=True
    )
    return result.position, result.reason, result.detail, result.blank_size


_Stop = tuple[int, StopReason, str, int]
"""Where a walk stopped (buffer position), why, the detail, a blank record's size."""


def _walk(
    request: RemotingCommand,
    bounds: dict[str, int],
    view: memoryview,
    position: int,
    file_start: int,
    file_size: int,
    max_bytes: int,
) -> RemotingCommand:
    """Whole records from ``position``: at most ``max_bytes`` (one record at least)."""
    data_end = len(view)
    reached, reason, detail, blank = _scan(
        view, position, min(data_end, position + max_bytes), file_start, file_size
    )
    if reached == position and reason is StopReason.INCOMPLETE:
        # the first record is larger than max_bytes (or torn at the data end): whole or a stop
        reached, reason, detail, blank = _scan(
            view, position, _record_end(view, position, data_end), file_start, file_size
        )
    start = file_start + position
    if reached == position and position and reason not in (StopReason.END, StopReason.BLANK):
        return request.response(
            ResponseCode.SYSTEM_ERROR,
            f"offset {start} is not at a record boundary ({detail or reason.value})",
            bounds,
        )
    if reason in (StopReason.END, StopReason.INCOMPLETE) and reached < data_end:
        # a window's edge: look at the next record so that bad data there is reported now
        # (a read starting at it would be refused as not a record boundary)
        reason = StopReason.END
        if not _record_at(view, reached, file_start):
            probe_end = min(data_end, reached + SEEK_BYTES)
            probed = _scan(view, reached, probe_end, file_start, file_size)
            if probed[1] is not StopReason.INCOMPLETE or probe_end == data_end:
                reason, detail, blank = probed[1:]
    stopped = reason is not StopReason.END and (
        reason is not StopReason.INCOMPLETE or reached == data_end
    )
    fields: dict[str, object] = {**bounds, "offset": start}
    if not stopped:
        fields["nextOffset"] = file_start + (file_size if reached == file_size else reached)
    else:
        fields.update(
            nextOffset=file_start + file_size,
            stopOffset=file_start + reached,
            stopReason=reason.value,
            stopDetail=detail,
            blankSize=blank,
        )
    return request.response(ResponseCode.SUCCESS, None, fields, bytes(view[position:reached]))


def _record_end(view: memoryview, position: int, data_end: int) -> int:
    """Where the record at ``position`` claims to end (at most ``data_end``)."""
    total = int.from_bytes(view[position : position + 4], "big") if position + 4 <= data_end else 0
    return min(data_end, position + max(total, 0))


def _record_at(view: memoryview, position: int, file_start: int) -> bool:
    """Whether a whole valid record (CRC unchecked) starts at ``position``, its
    PHYSICALOFFSET field its own offset."""
    try:
        record = decode_record(view, position, base_offset=file_start, check_crc=False)
    except CorruptRecordError:
        return False
    return record.physical_offset == file_start + position


def _seek(view: memoryview, position: int, file_start: int) -> int | None:
    """The first record start at or after ``position`` (see the module), or None."""
    window = bytes(view[position : position + SEEK_BYTES + 4])
    # each magic's next hit, found again only once passed: the window is scanned once per
    # magic, however many false hits (magic bytes in bodies) it holds
    hits = [window.find(m, 4) for m in _MAGICS]
    while True:
        found = [h for h in hits if h >= 0]
        if not found:
            return None
        candidate = min(found) - 4
        if _record_at(view, position + candidate, file_start):
            return position + candidate
        for i, hit in enumerate(hits):
            if hit == candidate + 4:
                hits[i] = window.find(_MAGICS[i], hit + 1)
