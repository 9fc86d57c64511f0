"""The garbage collector of a long-running service: what start-up made is frozen once serving."""

from __future__ import annotations

import gc

__all__ = ["freeze_startup_heap"]


def freeze_startup_heap() -> None:
    """Collect once, then move every object left (modules, classes, configuration, the
    store's tables: what start-up made and the service keeps) to the collector's permanent
    generation (``gc.freeze``): the full collections that requests' allocations trigger no
    longer walk them again and again. Objects made from here on are collected as before."""
    gc.collect()
    gc.freeze()
