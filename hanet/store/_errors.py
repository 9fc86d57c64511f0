"""The typed errors of the commit log store.

Everything the store raises on purpose derives from :class:`StoreError` (itself a
:class:`hanet.HanetError`). Errors that concern a place in the commit log carry its physical
offset, so a caller (the HA slave, ``hanet verify``, the Spark audit) can name it.
"""

from __future__ import annotations

from hanet.errors import HanetError

__all__ = [
    "CorruptRecordError",
    "OffsetMismatchError",
    "StoreClosedError",
    "StoreError",
    "StoreLayoutError",
    "StoreLockedError",
]


class StoreError(HanetError):
    """Base class of the errors the commit log store raises on purpose."""


class CorruptRecordError(StoreError, ValueError):
    """A commit log record failed validation (magic, a length, the body CRC, ...).

    Attributes:
        offset: the physical offset of the record that failed.
        reason: a short human-readable reason, e.g. ``"body CRC mismatch"``.
    """

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"invalid record at offset {offset}: {reason}")
        self.offset = offset
        self.reason = reason


class OffsetMismatchError(StoreError, ValueError):
    """Raw bytes were offered at an offset that does not continue the commit log.

    Attributes:
        expected: the offset the commit log continues at (its max offset).
        actual: the offset that was offered.
    """

    def __init__(self, expected: int, actual: int) -> None:
        super().__init__(
            f"non-contiguous append: the commit log continues at {expected}, got {actual}"
        )
        self.expected = expected
        self.actual = actual


class StoreLayoutError(StoreError):
    """The files on disk do not form a valid store (wrong file size, a gap, a bad name, ...)."""


class StoreLockedError(StoreError):
    """Another process holds the store's ``lock`` file."""


class StoreClosedError(StoreError):
    """The store was closed."""
