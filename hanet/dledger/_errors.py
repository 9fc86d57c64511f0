"""The typed errors of the DLedger layer.

Everything this layer raises on purpose derives from :class:`DLedgerError` (itself a
:class:`hanet.errors.HanetError`).
"""

from __future__ import annotations

from hanet.errors import HanetError

__all__ = [
    "BodyCrcError",
    "DLedgerError",
    "EntryFormatError",
    "IllegalTransitionError",
    "NodeNotRunningError",
    "TruncatedEntryError",
]


class DLedgerError(HanetError):
    """Base class of the errors the DLedger layer raises on purpose."""


class EntryFormatError(DLedgerError, ValueError):
    """An entry or index entry is malformed (magic, a size, a field out of range).

    Attributes:
        offset: where in the caller's buffer the entry starts.
        reason: a short human-readable reason, e.g. ``"size 40 below the 48-byte header"``.
    """

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"invalid DLedger entry at offset {offset}: {reason}")
        self.offset = offset
        self.reason = reason


class TruncatedEntryError(EntryFormatError):
    """The buffer ends before the entry does (``needed`` bytes from ``offset``, ``available``)."""

    def __init__(self, offset: int, needed: int, available: int) -> None:
        super().__init__(offset, f"needs {needed} bytes, {available} available")
        self.needed = needed
        self.available = available


class BodyCrcError(EntryFormatError):
    """The stored body CRC is neither 0 nor the CRC of the body."""

    def __init__(self, offset: int, stored: int, computed: int) -> None:
        super().__init__(offset, f"body CRC {stored} != computed {computed}")
        self.stored = stored
        self.computed = computed


class IllegalTransitionError(DLedgerError, RuntimeError):
    """The Raft core tried a role change its transition table does not allow (a bug)."""


class NodeNotRunningError(DLedgerError, RuntimeError):
    """The node is not running (starting, or stopped): it has no Raft state to tell."""
