"""Progress of a long Spark job on stderr, for when Spark's own progress bar is off (no
pyspark import: it works on the session it is given).

Spark draws its stage progress bar only on a terminal (``hanet.spark.spark_session``). With
``--json``, or stdout piped, a long audit would print nothing for minutes: :class:`Progress`
polls Spark's status tracker from a daemon thread and writes one line per ``interval`` seconds
to stderr while stages run, e.g. ``hanet: stage 3 (count at ...): 5/12 tasks, 2 running,
31 s``. stdout is never touched (it stays the JSON document). Over Spark Connect, where the
client has no status tracker, the same lines come from the progress the server sends with each
query's results (a handler registered with ``registerProgressHandler``; no stage names there,
and the running count is the query's running tasks), e.g. ``hanet: stage 3: 5/12 tasks,
2 running, 31 s``.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from types import TracebackType
from typing import Any, TextIO

__all__ = ["PROGRESS_INTERVAL", "Progress", "connect_stage_lines", "stage_lines"]

PROGRESS_INTERVAL = 5.0
"""Seconds between two progress lines (and before the first)."""


def stage_lines(stages: list[Any], elapsed: float) -> list[str]:
    """One line per active stage (``SparkStageInfo``-like objects)."""
    return [
        f"hanet: stage {s.stageId} ({s.name.split(' at ')[0]}): {s.numCompletedTasks}/"
        f"{s.numTasks} tasks, {s.numActiveTasks} running, {elapsed:.0f} s"
        for s in stages
    ]


def connect_stage_lines(stages: list[Any], running: int, elapsed: float) -> list[str]:
    """One line per stage not done (Spark Connect's ``StageInfo``-like objects: ``stage_id``,
    ``num_tasks``, ``num_completed_tasks``, ``done``), ``running`` tasks of the query."""
    return [
        f"hanet: stage {s.stage_id}: {s.num_completed_tasks}/{s.num_tasks} tasks, "
        f"{running} running, {elapsed:.0f} s"
        for s in stages
        if not s.done
    ]


class _ConnectProgress:
    """Spark Connect's progress handler: keeps the last stages the server reported."""

    def __init__(self) -> None:
        self.stages: list[Any] = []
        self.running = 0
        self._lock = threading.Lock()

    def __call__(
        self, stages: Any, inflight_tasks: int, operation_id: str | None, done: bool
    ) -> None:
        with self._lock:
            self.stages = [] if done else list(stages or ())
            self.running = 0 if done else inflight_tasks

    def lines(self, elapsed: float) -> list[str]:
        with self._lock:
            return connect_stage_lines(self.stages, self.running, elapsed)


class Progress:
    """A context manager printing the active stages every ``interval`` seconds to ``out``."""

    def __init__(
        self, spark: Any, *, interval: float = PROGRESS_INTERVAL, out: TextIO | None = None
    ) -> None:
        self._spark = spark
        self._tracker = _tracker(spark)
        self._connect: _ConnectProgress | None = None
        if self._tracker is None and hasattr(spark, "registerProgressHandler"):
            self._connect = _ConnectProgress()
        self._interval = interval
        self._out = out or sys.stderr
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = time.monotonic()

    def __enter__(self) -> Progress:
        if self._connect is not None:
            try:
                self._spark.registerProgressHandler(self._connect)
            except Exception:
                self._connect = None
        if self._tracker is not None or self._connect is not None:
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
        if self._connect is not None:
            with contextlib.suppress(Exception):
                self._spark.removeProgressHandler(self._connect)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                lines = self._lines()
            except Exception:
                return
            if lines:
                print("\n".join(lines), file=self._out, flush=True)

    def _lines(self) -> list[str]:
        if self._connect is not None:
            return self._connect.lines(self.elapsed())
        tracker = self._tracker
        stages = [tracker.getStageInfo(i) for i in tracker.getActiveStageIds()]
        return stage_lines([s for s in stages if s is not None], self.elapsed())

    def elapsed(self) -> float:
        """Seconds since the context was entered."""
        return time.monotonic() - self._started


def _tracker(spark: Any) -> Any:
    """The session's status tracker, or None (a Spark Connect session has no SparkContext)."""
    try:
        return spark.sparkContext.statusTracker()
    except Exception:
        return None
