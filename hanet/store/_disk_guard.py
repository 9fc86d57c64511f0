"""The disk guard: puts are refused while the store's file system is used past
``disk_max_used_space_ratio`` (RocketMQ's ``diskMaxUsedSpaceRatio``).

The usage is read at most every ``disk_check_interval`` seconds of the store's clock (puts call
:meth:`DiskGuard.refresh`), or now with :meth:`DiskGuard.check`. The clock is injectable: tests
move it instead of sleeping.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path

__all__ = ["Clock", "DiskGuard"]

logger = logging.getLogger(__name__)

Clock = Callable[[], float]
"""Seconds of a monotonic clock (``time.monotonic`` unless a test gives another)."""


class DiskGuard:
    """Whether the file system holding ``root`` is too full for puts (see the module doc).

    Attributes:
        full: puts are refused (as of the last reading).
        used_ratio: the last reading, used / (used + available); None when it could not be
            read (nothing is refused for that).
    """

    def __init__(self, root: Path, max_used_percent: int, interval: float, clock: Clock) -> None:
        self.root = root
        self.max_used_percent = max_used_percent
        self.interval = interval
        self.clock = clock
        self.full = False
        self.used_ratio: float | None = None
        self._checked_at: float | None = None  # never read yet

    def refresh(self) -> bool:
        """:meth:`check` if the last reading is ``interval`` seconds old (or none was made);
        returns :attr:`full`."""
        checked = self._checked_at
        if checked is None or self.clock() - checked >= self.interval:
            return self.check()
        return self.full

    def check(self) -> bool:
        """Read the usage now; returns :attr:`full`. Logs a WARNING when puts start being
        refused and an INFO when they are accepted again."""
        self._checked_at = self.clock()
        try:
            usage = shutil.disk_usage(self.root)
        except OSError as exc:
            logger.debug("%s: cannot read the disk usage: %s", self.root, exc)
            self.used_ratio = None
            return self.full
        # RocketMQ's (and df's) used percentage: used / (used + available to us); the blocks
        # reserved for root count as neither.
        entire = usage.used + usage.free
        ratio = usage.used / entire if entire > 0 else 0.0
        self.used_ratio = ratio
        full = ratio * 100 > self.max_used_percent
        if full and not self.full:
            logger.warning("%s: %s: puts are refused", self.root, self._detail(ratio))
        elif self.full and not full:
            logger.info(
                "%s: disk used %s %% <= diskMaxUsedSpaceRatio %d %%: puts are accepted again",
                self.root,
                self._percent(ratio),
                self.max_used_percent,
            )
        self.full = full
        return full

    def detail(self) -> str:
        """Why puts are refused: ``disk full: disk used 91 % > diskMaxUsedSpaceRatio 75 %``."""
        return self._detail(self.used_ratio or 0.0)

    def _detail(self, ratio: float) -> str:
        return (
            f"disk full: disk used {self._percent(ratio)} % > diskMaxUsedSpaceRatio "
            f"{self.max_used_percent} %"
        )

    def _percent(self, ratio: float) -> str:
        percent = ratio * 100
        shown = f"{percent:.0f}"
        limit = self.max_used_percent
        if (int(shown) > limit) != (percent > limit):  # rounding would hide the comparison
            shown = f"{percent:.2f}"
        return shown
