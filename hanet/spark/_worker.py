"""What the data sources do once in each of Spark's Python worker processes.

A reused PySpark worker (``spark.python.worker.reuse``, the default) runs a full garbage
collection (``gc.collect()``) after every task, and a full collection walks every object the
process tracks: the modules pyspark, pyarrow and hanet imported, and pandas, which pyarrow
imports on first use while the first batch is built: ~70,000 objects, 20-50 ms per task on
this project's 2-core machine (most of a no-op reader's CPU in Spark, measured with
``py-spy``). :func:`settle_worker`, called by the readers before each task's first batch,
freezes what the process holds once its first task is over (``gc.freeze()``, at the start of
its second task: the first one's lazy imports are done, its garbage collected): later
collections skip those objects and see only what tasks create. Nothing of a task is kept but
the second task's few objects (its command and reader) that live at that moment.
"""

from __future__ import annotations

import gc
import os

__all__ = ["REUSED_WORKER_ENV", "settle_worker", "worker_tasks"]

REUSED_WORKER_ENV = "SPARK_REUSE_WORKER"
"""Set by Spark in the environment of the Python workers it reuses (their daemon collects after
every task): only there does :func:`settle_worker` act."""

_FREEZE_AT_TASK = 2
"""The task of a process at whose start its objects are frozen."""

_tasks: tuple[int, int] | None = None
"""(pid, tasks begun in that process)."""


def settle_worker() -> bool:
    """Called at the start of each task of a reused Spark Python worker: at the process's second
    task, collect, then freeze the objects the process has (``gc.freeze``) so that the
    collection after each task skips them. True when it froze now; False otherwise (not a
    reused worker, its first task, or frozen before)."""
    global _tasks
    if not os.environ.get(REUSED_WORKER_ENV):
        return False
    pid = os.getpid()
    begun = _tasks[1] + 1 if _tasks is not None and _tasks[0] == pid else 1
    _tasks = (pid, begun)
    if begun != _FREEZE_AT_TASK:
        return False
    gc.collect()
    gc.freeze()
    return True


def worker_tasks() -> int:
    """The tasks :func:`settle_worker` has seen begin in this process (0: none, or not a reused
    worker): the objects were frozen at the start of the second."""
    if _tasks is None or _tasks[0] != os.getpid():
        return 0
    return _tasks[1]
