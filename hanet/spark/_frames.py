"""DataFrames the jobs start from, and the Spark expressions they share."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import reduce

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from ._local import commit_log_table, consume_queue_table
from ._remote import BROKER_SCHEME
from ._source import commit_log_struct, consume_queue_struct, register

__all__ = ["commit_log", "consume_queue", "java_string_hash_column", "paths_of", "record_end"]


def paths_of(stores: str | Sequence[str]) -> list[str]:
    """One path as a list; a sequence of paths as a list."""
    return [stores] if isinstance(stores, str) else list(stores)


def commit_log(
    spark: SparkSession,
    stores: str | Sequence[str],
    *,
    include_body: bool = False,
    columns: Sequence[str] | None = None,
    driver_rows: int = 0,
    options: Mapping[str, str] | None = None,
) -> DataFrame:
    """The ``commitlog`` rows of one or more stores (each a path or a glob), as one DataFrame;
    only ``columns`` when given (the others are not computed).

    Stores of at most ``driver_rows`` rows in all are read in the driver and handed to Spark
    as an Arrow table (:mod:`hanet.spark._local`: no Python workers); larger ones, and all
    with ``driver_rows=0``, through the ``commitlog`` data source.

    ``options`` are further options of the ``commitlog`` source (``accessKey`` and
    ``secretKey`` sign the reads of brokers under RocketMQ's ACL).

    Raises:
        ValueError: no path given.
    """
    paths = paths_of(stores)
    if not paths:
        raise ValueError("no store given")
    if driver_rows > 0 and not any(p.startswith(BROKER_SCHEME) for p in paths):
        # (a live broker's log is read over the network by the data source's tasks)
        table = commit_log_table(
            paths, include_body=include_body, columns=columns, max_rows=driver_rows
        )
        if table is not None:
            return spark.createDataFrame(table, commit_log_struct(include_body, columns))
    register(spark)
    reader = spark.read.format("commitlog").option("includeBody", str(include_body).lower())
    if columns:
        reader = reader.option("columns", ",".join(columns))
    if options:
        reader = reader.options(**options)
    return reduce(DataFrame.unionByName, (reader.load(p) for p in paths))


def consume_queue(
    spark: SparkSession, stores: str | Sequence[str], *, driver_rows: int = 0
) -> DataFrame:
    """The ``consumequeue`` rows of one or more stores, as one DataFrame (read in the driver
    when there are at most ``driver_rows``, as :func:`commit_log` does)."""
    paths = paths_of(stores)
    if not paths:
        raise ValueError("no store given")
    if driver_rows > 0:
        table = consume_queue_table(paths, max_rows=driver_rows)
        if table is not None:
            return spark.createDataFrame(table, consume_queue_struct())
    register(spark)
    reader = spark.read.format("consumequeue")
    return reduce(DataFrame.unionByName, (reader.load(p) for p in paths))


def record_end() -> Column:
    """``physical_offset + size``: the offset right after a record."""
    return F.col("physical_offset") + F.col("size").cast("bigint")


def java_string_hash_column(column: Column) -> Column:
    """Java's ``String.hashCode`` of a string column, in Spark SQL (0 for null or empty).

    What RocketMQ writes as a consume queue entry's tag hash (the codec's
    :func:`~hanet.store.lowlevel.java_string_hash`): ``s[0]*31^(n-1) + ... + s[n-1]`` over the
    UTF-16 code units, as a signed 32-bit int, widened to bigint.
    """
    units = F.encode(column, "UTF-16BE")
    count = (F.octet_length(units) / 2).cast("int")
    unsigned = F.aggregate(
        F.sequence(F.lit(0), count - 1),
        F.lit(0).cast("bigint"),
        lambda acc, i: (
            (acc * 31 + F.conv(F.hex(F.substring(units, i * 2 + 1, 2)), 16, 10).cast("bigint"))
            % 4294967296
        ),
    )
    signed = F.when(unsigned >= 2147483648, unsigned - 4294967296).otherwise(unsigned)
    return F.when(column.isNull() | (F.length(column) == 0), F.lit(0).cast("bigint")).otherwise(
        signed
    )
