"""The typed errors of the commit log store.

Everything the store raises on purpose derives from :class:`StoreError` (itself a
:class:`hanet.HanetError`). Errors that concern a place in the commit log carry its physical
offset, so a caller (the HA slave, ``hanet verify``, the Spark audit) can name it.
"""

from __future__ import annotations

import errno

from hanet.errors import HanetError

__all__ = [
    "CorruptRecordError",
    "CreateMappedFileError",
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


class CreateMappedFileError(StoreError, OSError):
    """A new commit log or consume queue file could not be created: the disk is full
    (ENOSPC), a quota is reached (EDQUOT), the directory is not writable, ...

    Raised before anything is mapped: no mapping exists and no half-created file is left
    behind. A put that needs the file answers CREATE_MAPPED_FILE_FAILED (RocketMQ's status)
    with this message as its detail (``cannot create PATH: [Errno 28 ENOSPC] No space left on
    device``). Also an :class:`OSError` carrying the failure's ``errno``.

    Attributes:
        path: the file that could not be created.
        errno: the operating system's error number (None when unknown).
        reason: the operating system's message.
    """

    def __init__(self, path: object, cause: OSError) -> None:
        code = cause.errno
        name = _errno_name(code)
        why = cause.strerror or str(cause)
        super().__init__(code, f"cannot create {path}: [Errno {code}{name}] {why}")
        self.path = path
        self.reason = why

    def __str__(self) -> str:
        return str(self.strerror)


def _errno_name(code: int | None) -> str:
    """`` ENOSPC`` for 28, "" when unknown (a suffix for messages)."""
    name = errno.errorcode.get(code) if code is not None else None
    return f" {name}" if name else ""


class StoreLayoutError(StoreError):
    """The files on disk do not form a valid store (wrong file size, a gap, a bad name, ...)."""


class StoreLockedError(StoreError):
    """Another process holds the store's ``lock`` file."""


class StoreClosedError(StoreError):
    """The store was closed."""
