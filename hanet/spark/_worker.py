"""What the data sources do once in each of Spark's Python worker processes.

A reused PySpark worker (``spark.python.worker.reuse``, the default) runs a full garbage
collection (``gc.collect()``) after every task, and a full collection walks every object the
process tracks: the modules pyspark, pyarrow and hanet imported, ~40,000 objects and more,
tens of milliseconds per task on this project's 2-core machine (most of a no-op reader's CPU
in Spark, measured with ``py-spy``). :func:`settle_worker`, called by the readers before their
first batch, collects once and freezes what is there (``gc.freeze()``): later collections skip
those objects and see only what tasks create. Nothing of a task is kept: its objects are newer
than the freeze, except the first task's few (its command and reader), which stay.
"""

from __future__ import annotations

import gc
import os

__all__ = ["REUSED_WORKER_ENV", "settle_worker"]

REUSED_WORKER_ENV = "SPARK_REUSE_WORKER"
"""Set by Spark in the environment of the Python workers it reuses (their daemon collects after
every task): only there does :func:`settle_worker` act."""

_settled_pid: int | None = None


def settle_worker() -> bool:
    """Once per process, in a reused Spark Python worker: collect, then freeze the objects the
    process has (``gc.freeze``) so that the collection after each task skips them. True when it
    froze now; False elsewhere (not a reused worker, or done before in this process)."""
    global _settled_pid
    if not os.environ.get(REUSED_WORKER_ENV):
        return False
    pid = os.getpid()
    if _settled_pid == pid:
        return False
    _settled_pid = pid
    gc.collect()
    gc.freeze()
    return True
