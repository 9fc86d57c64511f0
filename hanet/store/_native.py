"""The optional C extension (``_speedups.c``, built by ``pip install -e .``), imported here once.

:data:`speedups` is the module whenever it is built; :data:`ENABLED` says whether the store uses
it (built, and ``HANET_NO_EXTENSIONS`` unset: then the pure-Python references run). The native
functions stay reachable with the variable set, so tests can compare the two.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

__all__ = ["ENABLED", "native", "speedups"]


def _load() -> ModuleType | None:
    try:
        from . import _speedups  # noqa: PLC0415 - optional: built by pip install -e .
    except ImportError:
        return None
    return _speedups


speedups = _load()
"""``hanet.store._speedups``, or None when the extension is not built."""

ENABLED = speedups is not None and not os.environ.get("HANET_NO_EXTENSIONS")
"""Whether the native code is used (built, and ``HANET_NO_EXTENSIONS`` unset)."""


def native(name: str) -> Any:
    """The extension's function ``name``, or None when it is not built (or lacks it)."""
    return getattr(speedups, name, None)
