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

from collections.abc import Sequence

import attrs
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from ._frames import commit_log, consume_queue, java_string_hash, record_end

__all__ = ["PROBLEM_KINDS", "AuditResult", "audit"]

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
    spark: SparkSession, stores: str | Sequence[str], *, consume_queues: bool = True
) -> AuditResult:
    """Audit one or more stores (paths or globs); ``consume_queues=False`` skips the rebuild
    and comparison of the consume queues.

    Scans the commit logs once, here (a Spark job); the tables are computed from that cached
    scan when they are used.
    """
    scan = (
        commit_log(spark, stores)
        .select(
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
        .cache()
    )
    rows = scan.count()
    ok = scan.where(F.col("status") == "ok")
    problems = _corrupt(scan).unionByName(_crc_failures(ok)).unionByName(_queue_offsets(ok))
    if consume_queues:
        problems = problems.unionByName(_consume_queue_problems(ok, consume_queue(spark, stores)))
    problems = problems.orderBy("store", "physical_offset", "kind").cache()
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
    counts = problems.groupBy("store").pivot("kind", list(PROBLEM_KINDS)).count()
    store_table = (
        totals.join(counts, "store", "left")
        .fillna(0, subset=list(PROBLEM_KINDS))
        .withColumn("problems", sum((F.col(k) for k in PROBLEM_KINDS), F.lit(0)))
        .fillna(0, subset=["messages", "bytes"])
        .orderBy("store")
    )
    return AuditResult(
        stores=store_table, queues=queues, problems=problems, rows=rows, cached=(scan, problems)
    )


def _problem(
    df: DataFrame,
    kind: str,
    detail: Column,
    *,
    physical_offset: Column | None = None,
    keyed: bool = True,
) -> DataFrame:
    def key(name: str, spark_type: str) -> Column:
        return F.col(name) if keyed else F.lit(None).cast(spark_type)

    return df.select(
        "store",
        F.lit(kind).alias("kind"),
        (F.col("physical_offset") if physical_offset is None else physical_offset).alias(
            "physical_offset"
        ),
        key("topic", "string").alias("topic"),
        key("queue_id", "int").alias("queue_id"),
        key("queue_offset", "bigint").alias("queue_offset"),
        detail.alias("detail"),
    )


def _corrupt(scan: DataFrame) -> DataFrame:
    corrupt = scan.where(F.col("status") == "corrupt")
    detail = F.concat(F.lit("file "), F.col("file"), F.lit(": "), F.col("error"))
    return _problem(corrupt, "corrupt", detail, keyed=False)


def _crc_failures(ok: DataFrame) -> DataFrame:
    detail = F.format_string("body CRC %d does not match the body", F.col("body_crc"))
    return _problem(ok.where(~F.col("crc_ok")), "crc", detail)


def _queue_offsets(ok: DataFrame) -> DataFrame:
    order = Window.partitionBy("store", "topic", "queue_id").orderBy("physical_offset")
    previous = F.lag("queue_offset").over(order)
    steps = ok.withColumn("previous", previous).where(
        F.col("previous").isNotNull() & (F.col("queue_offset") != F.col("previous") + 1)
    )
    gaps = steps.where(F.col("queue_offset") > F.col("previous") + 1)
    repeats = steps.where(F.col("queue_offset") <= F.col("previous"))
    gap_detail = F.format_string(
        "queue offsets %d..%d missing", F.col("previous") + 1, F.col("queue_offset") - 1
    )
    repeat_detail = F.format_string(
        "queue offset %d after %d", F.col("queue_offset"), F.col("previous")
    )
    return _problem(gaps, "queue_gap", gap_detail).unionByName(
        _problem(repeats, "queue_repeat", repeat_detail)
    )


def _consume_queue_problems(ok: DataFrame, entries: DataFrame) -> DataFrame:
    with_queues = entries.select("store").distinct()
    rebuilt = ok.join(with_queues, "store", "left_semi").select(
        *_QUEUE_KEY,
        F.col("physical_offset").alias("m_offset"),
        F.col("size").alias("m_size"),
        java_string_hash(F.col("tags")).alias("m_hash"),
    )
    on_disk = entries.select(
        *_QUEUE_KEY,
        F.col("physical_offset").alias("e_offset"),
        F.col("size").alias("e_size"),
        F.col("tag_hash").alias("e_hash"),
    )
    both = rebuilt.join(on_disk, list(_QUEUE_KEY), "full_outer")
    missing = both.where(F.col("e_offset").isNull())
    extra = both.where(F.col("m_offset").isNull())
    differ = both.where(
        F.col("m_offset").isNotNull()
        & F.col("e_offset").isNotNull()
        & (
            (F.col("m_offset") != F.col("e_offset"))
            | (F.col("m_size") != F.col("e_size"))
            | (F.col("m_hash") != F.col("e_hash"))
        )
    )
    return (
        _problem(
            missing,
            "cq_missing",
            F.lit("no consume queue entry for this message"),
            physical_offset=F.col("m_offset"),
        )
        .unionByName(
            _problem(
                extra,
                "cq_extra",
                F.format_string(
                    "entry (size %d, tag hash %d) points at no message of this queue",
                    F.col("e_size"),
                    F.col("e_hash"),
                ),
                physical_offset=F.col("e_offset"),
            )
        )
        .unionByName(
            _problem(
                differ,
                "cq_mismatch",
                F.format_string(
                    "entry says offset %d size %d tag hash %d; the message: "
                    "offset %d size %d tag hash %d",
                    F.col("e_offset"),
                    F.col("e_size"),
                    F.col("e_hash"),
                    F.col("m_offset"),
                    F.col("m_size"),
                    F.col("m_hash"),
                ),
                physical_offset=F.col("m_offset"),
            )
        )
    )
