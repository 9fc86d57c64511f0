"""Small stores read in the driver: Arrow tables handed to Spark, no Python workers.

Reading a store through the ``commitlog`` data source costs, before the first row, a Python
process on the driver to plan the partitions and a Python worker per executor core to read
them (each imports pyspark, pyarrow and hanet): seconds that dominate a job over a few
thousand records. A store that small is read faster here, in the driver, by the same
partition reader (:func:`~hanet.spark.commit_log_batches`,
:func:`~hanet.spark.consume_queue_batches`), and handed to Spark as one Arrow table
(``createDataFrame``): same columns, same types, same rows.

Each function gives up (returns None) as soon as the rows read pass ``max_rows``; the caller
then reads through the data sources, which scale out. What was read is dropped: at most
``max_rows`` rows of work lost.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pyarrow as pa

from ._arrow import commit_log_batches, commit_log_schema
from ._layout import DEFAULT_DRIVER_ROWS, find_stores, plan_commit_log, plan_consume_queues
from ._queues import consume_queue_batches, consume_queue_schema
from ._remote import BROKER_SCHEME

__all__ = ["DEFAULT_DRIVER_ROWS", "commit_log_table", "consume_queue_table", "is_small"]


def _bounded(
    batches: Iterable[pa.RecordBatch], schema: pa.Schema, max_rows: int
) -> pa.Table | None:
    kept: list[pa.RecordBatch] = []
    rows = 0
    for batch in batches:
        rows += batch.num_rows
        if rows > max_rows:
            return None
        kept.append(batch)
    return pa.Table.from_batches(kept, schema=schema)


def commit_log_table(
    paths: Sequence[str],
    *,
    include_body: bool = False,
    columns: Sequence[str] | None = None,
    max_rows: int = DEFAULT_DRIVER_ROWS,
) -> pa.Table | None:
    """The ``commitlog`` rows of the stores named by ``paths`` (as the data source gives them,
    ``columns`` only when given), or None when there are more than ``max_rows``.

    Raises:
        StoreLayoutError: a path is not a store (as the data source would).
    """
    schema = commit_log_schema(include_body, columns)

    def batches() -> Iterable[pa.RecordBatch]:
        for path in paths:
            for store in find_stores(path):
                for part in plan_commit_log(store):
                    yield from commit_log_batches(part, include_body=include_body, columns=columns)

    return _bounded(batches(), schema, max_rows)


def consume_queue_table(
    paths: Sequence[str], *, max_rows: int = DEFAULT_DRIVER_ROWS
) -> pa.Table | None:
    """The ``consumequeue`` rows of the stores named by ``paths``, or None when there are more
    than ``max_rows``."""

    def batches() -> Iterable[pa.RecordBatch]:
        for path in paths:
            for store in find_stores(path):
                for queue_file in plan_consume_queues(store):
                    yield from consume_queue_batches(queue_file)

    return _bounded(batches(), consume_queue_schema(), max_rows)


def is_small(paths: Sequence[str], max_rows: int = DEFAULT_DRIVER_ROWS) -> bool:
    """The commit logs of the stores named by ``paths`` hold at most ``max_rows`` rows in all
    (what :func:`commit_log_table` would read; one cheap column computed)."""
    if max_rows <= 0 or any(p.startswith(BROKER_SCHEME) for p in paths):
        return False  # a live broker's log is read by the data source's tasks
    return commit_log_table(paths, columns=("size",), max_rows=max_rows) is not None
