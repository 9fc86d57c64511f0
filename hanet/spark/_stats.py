"""The stats job: traffic per topic per minute, store latency, the largest messages.

:func:`stats` returns lazy DataFrames (:class:`StatsResult`) over the good records of one or
more stores (STORETIMESTAMP decides the minute, in UTC). Counts are per store: a master and
its slave given together are two stores with their own rows, not one topic counted twice.

- ``per_minute``: ``store, topic, minute, messages, bytes``;
- ``latency``: per store and topic, percentiles of STORETIMESTAMP - BORNTIMESTAMP in
  milliseconds (how long a message took from the producer's clock to the broker's: network,
  queueing and the clock skew between the two hosts);
- ``largest``: the ``top`` largest records with where they are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ._frames import commit_log
from ._local import DEFAULT_DRIVER_ROWS

__all__ = ["LATENCY_PERCENTILES", "StatsResult", "stats"]

LATENCY_PERCENTILES = (0.5, 0.9, 0.99)
"""The latency percentiles reported (plus the maximum)."""


@attrs.frozen
class StatsResult:
    """The stats tables (lazy DataFrames; see the module docstring) and how many good records
    the scan read (``rows``)."""

    per_minute: DataFrame
    latency: DataFrame
    largest: DataFrame
    rows: int
    _scan: DataFrame

    def unpersist(self) -> None:
        """Drop the cached scan of the commit logs."""
        self._scan.unpersist()


def stats(
    spark: SparkSession,
    stores: str | Sequence[str],
    *,
    top: int = 10,
    driver_rows: int = DEFAULT_DRIVER_ROWS,
    options: Mapping[str, str] | None = None,
) -> StatsResult:
    """Statistics of one or more stores (paths or globs); ``top`` largest messages; stores of
    at most ``driver_rows`` rows are read in the driver (:func:`~hanet.spark.commit_log`);
    ``options`` go to the ``commitlog`` source (e.g. ``accessKey``/``secretKey`` for brokers
    under ACL).

    Scans the commit logs once, here (a Spark job); the tables are computed from that cached
    scan when they are used.
    """
    columns = (
        "store",
        "topic",
        "queue_id",
        "physical_offset",
        "size",
        "born_timestamp",
        "store_timestamp",
        "msg_id",
        "keys",
        "status",
    )
    scan = commit_log(spark, stores, columns=columns, driver_rows=driver_rows, options=options)
    scan = scan.where(F.col("status") == "ok").cache()
    rows = scan.count()
    per_minute = (
        scan.groupBy(
            "store",
            "topic",
            F.date_trunc("minute", F.timestamp_millis("store_timestamp")).alias("minute"),
        )
        .agg(F.count("*").alias("messages"), F.sum("size").alias("bytes"))
        .orderBy("store", "topic", "minute")
    )
    latency_ms = F.col("store_timestamp") - F.col("born_timestamp")
    quantiles = F.percentile_approx(latency_ms, list(LATENCY_PERCENTILES))
    latency = (
        scan.groupBy("store", "topic")
        .agg(F.count("*").alias("messages"), quantiles.alias("q"), F.max(latency_ms).alias("max"))
        .select(
            "store",
            "topic",
            "messages",
            *(
                F.col("q")[i].alias(f"p{round(p * 100)}_ms")
                for i, p in enumerate(LATENCY_PERCENTILES)
            ),
            F.col("max").alias("max_ms"),
        )
        .orderBy("store", "topic")
    )
    largest = scan.orderBy(F.desc("size"), "store", "physical_offset").limit(top)
    largest = largest.select(
        "store", "topic", "queue_id", "physical_offset", "size", "msg_id", "keys"
    )
    return StatsResult(
        per_minute=per_minute, latency=latency, largest=largest, rows=rows, scan=scan
    )
