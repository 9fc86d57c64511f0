"""Damaged ranges of the commit log: kept, named and persisted instead of dropping later data.

A record that fails its checks (recovery, a read) does not make the store drop every record
after it: recovery resynchronises on the next record that passes every check
(:func:`next_valid_record`) and the bytes in between become a :class:`DamagedRange`, kept in
``damaged.json`` in the store directory (:class:`DamageLedger`) until they are repaired from a
replica that holds them intact. The store never serves, replicates, dispatches or indexes them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import attrs

from ._codec import BLANK_MAGIC, BLANK_RECORD_SIZE, MAGIC_V1, MAGIC_V2, MIN_RECORD_SIZE
from ._errors import StoreLayoutError
from ._index import scan_index
from ._store_files import write_file_durably

__all__ = ["DAMAGE_FILE", "DamageLedger", "DamagedRange", "damage_end", "next_valid_record"]

DAMAGE_FILE = "damaged.json"
"""The ledger's file name in the store directory."""

_MAGICS = tuple(m.to_bytes(4, "big") for m in (MAGIC_V2, MAGIC_V1, BLANK_MAGIC))
_CHUNK = 1 << 20


@attrs.frozen
class DamagedRange:
    """Commit log bytes ``[start, end)`` that failed their checks, and why."""

    start: int
    end: int
    reason: str

    def overlaps(self, start: int, end: int) -> bool:
        """Whether ``[start, end)`` shares a byte with this range."""
        return start < self.end and self.start < end

    def __str__(self) -> str:
        return f"[{self.start}, {self.end}) ({self.reason})"


class DamageLedger:
    """The damaged ranges of one store, sorted, persisted in ``directory/damaged.json``
    (written whole to a temporary file, fsynced, then renamed over it)."""

    def __init__(self, directory: Path | None) -> None:
        """Raises:
        StoreLayoutError: the file is there but is not a list of ranges."""
        self.path = None if directory is None else directory / DAMAGE_FILE
        self._ranges: list[DamagedRange] = []
        if self.path is not None and self.path.exists():
            try:
                entries = json.loads(self.path.read_text() or "[]")
                self._ranges = sorted(
                    DamagedRange(int(e["start"]), int(e["end"]), str(e["reason"])) for e in entries
                )
            except (ValueError, KeyError, TypeError) as exc:
                raise StoreLayoutError(
                    f"{self.path}: not a list of damaged ranges ({exc!r}); it names the commit "
                    "log ranges that failed their checks: fix or remove it to go on"
                ) from None

    @property
    def ranges(self) -> tuple[DamagedRange, ...]:
        """The damaged ranges, in offset order."""
        return tuple(self._ranges)

    def __bool__(self) -> bool:
        return bool(self._ranges)

    def __iter__(self) -> Iterator[DamagedRange]:
        return iter(tuple(self._ranges))

    def add(self, *ranges: DamagedRange) -> None:
        """Mark ``ranges`` (each merged with ranges it overlaps or touches); persist once."""
        for damaged in ranges:
            start, end, reasons = damaged.start, damaged.end, [damaged.reason]
            kept = []
            for r in self._ranges:
                if r.overlaps(start, end) or r.end == start or r.start == end:
                    start, end = min(start, r.start), max(end, r.end)
                    reasons.insert(0, r.reason)
                else:
                    kept.append(r)
            reason = "; ".join(dict.fromkeys(reasons))
            self._ranges = sorted([*kept, DamagedRange(start, end, reason)], key=lambda r: r.start)
        if ranges:
            self._save()

    def remove(self, damaged: DamagedRange) -> None:
        """Clear the mark of ``damaged`` (repaired) and persist."""
        self._ranges = [r for r in self._ranges if r != damaged]
        self._save()

    def truncate(self, offset: int) -> None:
        """Forget ranges at or past ``offset`` (the commit log was cut there); clip one that
        crosses it."""
        ranges = [
            r if r.end <= offset else DamagedRange(r.start, offset, r.reason)
            for r in self._ranges
            if r.start < offset
        ]
        if ranges != self._ranges:
            self._ranges = ranges
            self._save()

    def forget_below(self, offset: int) -> None:
        """Forget ranges that end at or below ``offset`` (their file was deleted)."""
        ranges = [r for r in self._ranges if r.end > offset]
        if len(ranges) != len(self._ranges):
            self._ranges = ranges
            self._save()

    def find(self, start: int, end: int) -> DamagedRange | None:
        """The first damaged range sharing a byte with ``[start, end)``, or None."""
        for r in self._ranges:
            if r.overlaps(start, end):
                return r
        return None

    def next_start(self, offset: int) -> int | None:
        """The start of the first damaged range at or after ``offset``, or None."""
        for r in self._ranges:
            if r.start >= offset:
                return r.start
        return None

    def _save(self) -> None:
        if self.path is None:
            return
        if not self._ranges:
            self.path.unlink(missing_ok=True)
            return
        text = json.dumps([attrs.asdict(r) for r in self._ranges], indent=1)
        write_file_durably(self.path, text.encode())


def next_valid_record(
    view: memoryview, start: int, base_offset: int, limit: int | None = None
) -> int | None:
    """The buffer position, at or after ``start``, of the first whole record of ``view`` (a
    commit log file mapped from ``base_offset``) that passes every check (magic, sizes, body
    CRC, whole-record CRC when present, PHYSICALOFFSET equal to its own offset), or of a
    blank record that ends the file; None when there is none (where recovery resynchronises
    after damage)."""
    size = len(view) if limit is None else limit
    position = start
    while position + 8 <= size:
        chunk = view[position : min(size, position + _CHUNK + 8)].tobytes()
        found = sorted(
            at - 4
            for magic in _MAGICS
            for at in _find_all(chunk, magic)
            if at >= 4 and position + at - 4 >= start
        )
        for at in found:
            candidate = position + at
            total = int.from_bytes(chunk[at : at + 4], "big", signed=True)
            magic = chunk[at + 4 : at + 8]
            if magic == _MAGICS[2]:
                if total >= BLANK_RECORD_SIZE and candidate + total == size:
                    return candidate
                continue
            if not MIN_RECORD_SIZE <= total <= size - candidate:
                continue
            if int.from_bytes(view[candidate + 28 : candidate + 36], "big") != (
                base_offset + candidate
            ):
                continue
            result = scan_index(
                view, candidate, candidate + total, base_offset, size, check_physical_offset=True
            )
            if result.records == 1:
                return candidate
        position += _CHUNK
    return None


def damage_end(view: memoryview, offset: int, base_offset: int, data_end: int) -> int:
    """Where damage found at ``offset`` in a file mapped from ``base_offset`` ends: at the
    next valid record (or blank record ending the file), else at the file's end or
    ``data_end``, whichever comes first."""
    found = next_valid_record(view, offset - base_offset + 1, base_offset)
    if found is not None:
        return min(base_offset + found, data_end)
    return min(base_offset + len(view), data_end)


def _find_all(data: bytes, needle: bytes) -> Iterator[int]:
    at = data.find(needle)
    while at >= 0:
        yield at
        at = data.find(needle, at + 1)
