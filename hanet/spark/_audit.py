"""The audit job: what a set of stores holds, and everything wrong with it.

:func:`audit` returns lazy DataFrames (:class:`AuditResult`):

- ``queues``: per store, topic and queue: messages, bytes, first and last physical and queue
  offsets, CRC failures;
- ``stores``: per store: files, messages, bytes, the data range, and problem counts by kind;
- ``problems``: one row per problem, ``kind`` one of :data:`PROBLEM_KINDS`:
  ``corrupt`` (a scan stopped on bad data: garbage, a torn tail), ``crc`` (a body CRC
  mismatch), ``queue_gap`` / ``queue_repeat`` (queue offsets of a queue, in commit log order,
  skip or go back), ``cq_missing`` / ``cq_extra`` / ``cq_mismatch`` (the consume queues,
  rebuilt in Spark from the commit log, against the ones on disk; only for stores that have
  consume queues).

The commit log is scanned once: the columns the job needs are cached (memory, then disk)
until :meth:`AuditResult.unpersist`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from ._frames import commit_log, consume_queue, java_string_hash_column, paths_of, record_end
from ._layout import find_stores, plan_consume_queues
from ._local import DEFAULT_DRIVER_ROWS
from ._remote import BROKER_SCHEME

__all__ = ["AUDIT_COLUMNS", "PROBLEM_KINDS", "AuditResult", "audit"]

PROBLEM_KINDS = (
    "corrupt",
    "crc",
    "queue_gap",
    "queue_repeat",
    "cq_missing",
    "cq_extra",
    "cq_mismatch",
)
"""The ``kind`` values of the ``problems`` table, in the order the ``stores`` table counts them."""

_QUEUE_KEY = ("store", "topic", "queue_id", "queue_offset")
AUDIT_COLUMNS = (
    "store",
    "file",
    "physical_offset",
    "size",
    "topic",
    "queue_id",
    "queue_offset",
    "body_crc",
    "crc_ok",
    "tags",
    "status",
    "error",
)


@attrs.frozen
class AuditResult:
    """The audit's tables (lazy DataFrames; see the module docstring).

    Attributes:
        stores: one row per store.
        queues: one row per store, topic and queue.
        problems: one row per problem found.
        rows: how many commit log rows the scan read (records and corrupt rows).
    """

    stores: DataFrame
    queues: DataFrame
    problems: DataFrame
    rows: int
    _cached: tuple[DataFrame, ...]

    def unpersist(self) -> None:
        """Drop the cached scan of the commit logs and the cached problems."""
        for df in self._cached:
            df.unpersist()


def audit(
    spark: SparkSession,
    stores: str | Sequence[str],
    *,
    consume_queues: bool = True,
    driver_rows: int = DEFAULT_DRIVER_ROWS,
    options: Mapping[str, str] | None = None,
) -> AuditResult:
    """Audit one or more stores (paths or globs); ``consume_queues=False`` skips the rebuild
    and comparison of the consume queues. Commit logs and consume queues of at most
    ``driver_rows`` rows are read in the driver (:func:`~hanet.spark.commit_log`), larger ones
    (all with 0) by the executors; ``options`` go to the ``commitlog`` source (e.g.
    ``accessKey``/``secretKey`` for brokers under ACL).

    Scans the commit logs once, here (a Spark job); the tables are computed from that cached
    scan when they are used.
    """
    scan = commit_log(
        spark, stores, columns=AUDIT_COLUMNS, driver_rows=driver_rows, options=options
    ).cache()
    rows = scan.count()
    ok = scan.where(F.col("status") == "ok")
    problems = _record_problems(scan).unionByName(_queue_offsets(ok))
    cached = [scan]
    with_queues = _stores_with_consume_queues(stores) if consume_queues else []
    if with_queues:
        entries = consume_queue(spark, with_queues, driver_rows=driver_rows).cache()
        cached.append(entries)
        problems = problems.unionByName(_consume_queue_problems(ok, entries, with_queues))
    found = problems.cache()  # unsorted: sorting a cached table costs a sampling job more
    cached.append(found)
    problems = found.orderBy("store", "physical_offset", "kind")
    queues = (
        ok.groupBy("store", "topic", "queue_id")
        .agg(
            F.count("*").alias("messages"),
            F.sum("size").alias("bytes"),
            F.min("physical_offset").alias("first_offset"),
            F.max("physical_offset").alias("last_offset"),
            F.min("queue_offset").alias("first_queue_offset"),
            F.max("queue_offset").alias("last_queue_offset"),
            F.sum(F.when(~F.col("crc_ok"), 1).otherwise(0)).alias("crc_failures"),
        )
        .orderBy("store", "topic", "queue_id")
    )
    totals = scan.groupBy("store").agg(
        F.countDistinct("file").alias("files"),
        F.count(F.when(F.col("status") == "ok", 1)).alias("messages"),
        F.sum(F.when(F.col("status") == "ok", F.col("size"))).alias("bytes"),
        F.min(F.when(F.col("status") == "ok", F.col("physical_offset"))).alias("first_offset"),
        F.max(F.when(F.col("status") == "ok", record_end())).alias("end_offset"),
    )
    counts = found.groupBy("store").pivot("kind", list(PROBLEM_KINDS)).count()
    store_table = (
        totals.join(counts, "store", "left")
        .fillna(0, subset=list(PROBLEM_KINDS))
        .withColumn("problems", sum((F.col(k) for k in PROBLEM_KINDS), F.lit(0)))
        .fillna(0, subset=["messages", "bytes"])
        .orderBy("store")
    )
    return AuditResult(
        stores=store_table, queues=queues, problems=problems, rows=rows, cached=tuple(cached)
    )


def _stores_with_consume_queues(stores: str | Sequence[str]) -> list[str]:
    """The stores (as their ``store`` column says) that have consume queue files."""
    return [
        location.name
        for path in paths_of(stores)
        if not path.startswith(BROKER_SCHEME)  # a broker's consume queues are not read
        for location in find_stores(path)
        if plan_consume_queues(location)
    ]


def _select_problems(
    df: DataFrame, kind: Column, detail: Column, physical_offset: Column | None = None
) -> DataFrame:
    """``df`` rows as problems: ``kind`` null means not a problem."""
    return df.select(
        "store",
        kind.alias("kind"),
        (F.col("physical_offset") if physical_offset is None else physical_offset).alias(
            "physical_offset"
        ),
        "topic",
        "queue_id",
        "queue_offset",
        detail.alias("detail"),
    ).where(F.col("kind").isNotNull())


def _record_problems(scan: DataFrame) -> DataFrame:
    corrupt = F.col("status") == "corrupt"
    kind = F.when(corrupt, "corrupt").when(~F.col("crc_ok"), "crc")
    detail = F.when(
        corrupt, F.concat(F.lit("file "), F.col("file"), F.lit(": "), F.col("error"))
    ).otherwise(F.format_string("body CRC %d does not match the body", F.col("body_crc")))
    return _select_problems(scan, kind, detail)


def _queue_offsets(ok: DataFrame) -> DataFrame:
    order = Window.partitionBy("store", "topic", "queue_id").orderBy("physical_offset")
    previous = F.col("previous")
    offset = F.col("queue_offset")
    kind = F.when(offset > previous + 1, "queue_gap").when(offset <= previous, "queue_repeat")
    detail = F.when(
        offset > previous + 1,
        F.format_string("queue offsets %d..%d missing", previous + 1, offset - 1),
    ).otherwise(F.format_string("queue offset %d after %d", offset, previous))
    with_previous = ok.withColumn("previous", F.lag("queue_offset").over(order))
    return _select_problems(with_previous, kind, detail)


def _consume_queue_problems(ok: DataFrame, entries: DataFrame, stores: list[str]) -> DataFrame:
    rebuilt = ok.where(F.col("store").isin(stores)).select(
        *_QUEUE_KEY,
        F.col("physical_offset").alias("m_offset"),
        F.col("size").alias("m_size"),
        java_string_hash_column(F.col("tags")).alias("m_hash"),
    )
    on_disk = entries.select(
        *_QUEUE_KEY,
        F.col("physical_offset").alias("e_offset"),
        F.col("size").alias("e_size"),
        F.col("tag_hash").alias("e_hash"),
    )
    both = rebuilt.join(on_disk, list(_QUEUE_KEY), "full_outer")
    missing = F.col("e_offset").isNull()
    extra = F.col("m_offset").isNull()
    kind = (
        F.when(missing, "cq_missing")
        .when(extra, "cq_extra")
        .when(
            (F.col("m_offset") != F.col("e_offset"))
            | (F.col("m_size") != F.col("e_size"))
            | (F.col("m_hash") != F.col("e_hash")),
            "cq_mismatch",
        )
    )
    detail = (
        F.when(missing, F.lit("no consume queue entry for this message"))
        .when(
            extra,
            F.format_string(
                "entry (size %d, tag hash %d) points at no message of this queue",
                F.col("e_size"),
                F.col("e_hash"),
            ),
        )
        .otherwise(
            F.format_string(
                "entry says offset %d size %d tag hash %d; the message: "
                "offset %d size %d tag hash %d",
                F.col("e_offset"),
                F.col("e_size"),
                F.col("e_hash"),
                F.col("m_offset"),
                F.col("m_size"),
                F.col("m_hash"),
            )
        )
    )
    return _select_problems(both, kind, detail, F.coalesce(F.col("m_offset"), F.col("e_offset")))
