"""The root of hanet's errors: the one module every layer may import.

Each layer derives its own small hierarchy from :class:`HanetError` (channel errors in
:mod:`hanet.channel`, decoder errors in :mod:`handlers`, store errors in :mod:`hanet.store`,
...), translating OS and trio errors at its boundary with ``raise ... from exc``.
"""

from __future__ import annotations

__all__ = ["ConfigError", "HanetError"]


class HanetError(Exception):
    """Base class of every error hanet raises on purpose."""


class ConfigError(HanetError, ValueError):
    """A setting or an address is missing, unknown, malformed or out of range."""
