"""Progress of a long Spark job on stderr, for when Spark's own progress bar is off (no
pyspark import: it works on the session it is given).

Spark draws its stage progress bar only on a terminal (``hanet.spark.spark_session``). With
``--json``, or stdout piped, a long audit would print nothing for minutes: :class:`Progress`
polls Spark's status tracker from a daemon thread and writes one line per ``interval`` seconds
to stderr while stages run, e.g. ``hanet: stage 3 (count at ...): 5/12 tasks, 2 running,
31 s``. stdout is never touched (it stays the JSON document). Over Spark Connect there is no
status tracker in the client: nothing is printed.
"""

from __future__ import annotations

import sys
import threading
import time
from types import TracebackType
from typing import Any, TextIO

__all__ = ["PROGRESS_INTERVAL", "Progress", "stage_lines"]

PROGRESS_INTERVAL = 5.0
"""Seconds between two progress lines (and before the first)."""


def stage_lines(stages: list[Any], elapsed: float) -> list[str]:
    """One line per active stage (``SparkStageInfo``-like objects)."""
    return [
        f"hanet: stage {s.stageId} ({s.name.split(' at ')[0]}): {s.numCompletedTasks}/"
        f"{s.numTasks} tasks, {s.numActiveTasks} running, {elapsed:.0f} s"
        for s in stages
    ]


class Progress:
    """A context manager printing the active stages every ``interval`` seconds to ``out``."""

    def __init__(
        self, spark: Any, *, interval: float = PROGRESS_INTERVAL, out: TextIO | None = None
    ) -> None:
        self._tracker = _tracker(spark)
        self._interval = interval
        self._out = out or sys.stderr
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = time.monotonic()

    def __enter__(self) -> Progress:
        if self._tracker is not None:
            self._started = time.monotonic()
            self._thread = threading.Thread(target=self._run, name="hanet-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self._interval)

    def _run(self) -> None:
        tracker = self._tracker
        while not self._stop.wait(self._interval):
            try:
                stages = [tracker.getStageInfo(i) for i in tracker.getActiveStageIds()]
            except Exception:
                return
            lines = stage_lines([s for s in stages if s is not None], self.elapsed())
            if lines:
                print("\n".join(lines), file=self._out, flush=True)

    def elapsed(self) -> float:
        """Seconds since the context was entered."""
        return time.monotonic() - self._started


def _tracker(spark: Any) -> Any:
    """The session's status tracker, or None (Spark Connect has no SparkContext)."""
    try:
        return spark.sparkContext.statusTracker()
    except Exception:
        return None
