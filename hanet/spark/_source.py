"""The ``commitlog`` and ``consumequeue`` Python data sources (``pyspark.sql.datasource``).

After :func:`register`::

    df = spark.read.format("commitlog").load("/data/store")          # a store root
    df = spark.read.format("commitlog").load("/data/store/commitlog")  # its commit log
    df = spark.read.format("commitlog").load("/data/broker-*/store")   # a glob of stores
    df = spark.read.format("commitlog").option("includeBody", "true").load(path)
    cq = spark.read.format("consumequeue").load("/data/store")

Partitions are planned on the driver (:mod:`hanet.spark._layout`): one per commit log file, or
one per byte range of a file larger than ``maxPartitionBytes`` (default 128 MiB), cut at
record boundaries; one per consume queue file. Each partition is read in a Python worker by
:mod:`hanet.spark._arrow`, which yields ``pyarrow.RecordBatch`` objects; each reader first
settles its worker (:func:`~hanet.spark._worker.settle_worker`: from a reused worker's second
task on, the garbage collection PySpark runs after every task skips what the worker imported).
Spark takes the batches as they are declared (no dictionary-encoded strings: a Python source's
batches must have exactly its schema's Arrow types). Executors need
``hanet`` and ``pyarrow`` importable (``pip install 'hanet[spark]'`` on every node), and read
the store paths from their own file system.

Options (``commitlog``): ``includeBody`` (``true``/``false``, default false),
``columns`` (comma-separated names: only these columns, in this order; Python data sources
get no column pruning from Spark, so a job that needs few columns says so and the others are
never computed nor shipped to the JVM), ``maxPartitionBytes`` (bytes, default 134217728),
``batchRows`` (rows per Arrow batch, 8192).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    InputPartition,
)
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from ._arrow import DEFAULT_BATCH_ROWS, commit_log_batches, commit_log_schema
from ._layout import (
    DEFAULT_MAX_RANGE_BYTES,
    find_stores,
    plan_commit_log,
    plan_consume_queues,
)
from ._queues import consume_queue_batches, consume_queue_schema
from ._remote import broker_reader
from ._worker import settle_worker

__all__ = [
    "CommitLogDataSource",
    "ConsumeQueueDataSource",
    "commit_log_struct",
    "consume_queue_struct",
    "register",
]

_TRUE = frozenset({"true", "1", "yes"})


_REGISTERED = "_hanet_sources_registered"


def register(spark: SparkSession) -> None:
    """Register the ``commitlog`` and ``consumequeue`` formats with a Spark session (once per
    session object: later calls do nothing)."""
    if getattr(spark, _REGISTERED, False):
        return
    spark.dataSource.register(CommitLogDataSource)
    spark.dataSource.register(ConsumeQueueDataSource)
    setattr(spark, _REGISTERED, True)


def _spark_type(arrow_type: Any) -> DataType:
    if pa.types.is_map(arrow_type):
        return MapType(_spark_type(arrow_type.key_type), _spark_type(arrow_type.item_type))
    simple: dict[Any, DataType] = {
        pa.string(): StringType(),
        pa.int32(): IntegerType(),
        pa.int64(): LongType(),
        pa.bool_(): BooleanType(),
        pa.binary(): BinaryType(),
    }
    return simple[arrow_type]


def _struct(schema: pa.Schema) -> StructType:
    return StructType([StructField(f.name, _spark_type(f.type)) for f in schema])


def commit_log_struct(
    include_body: bool = False, columns: Sequence[str] | None = None
) -> StructType:
    """The Spark schema of the ``commitlog`` format (``body`` last with ``includeBody``; only
    ``columns`` when given)."""
    return _struct(commit_log_schema(include_body, columns))


def consume_queue_struct() -> StructType:
    """The Spark schema of the ``consumequeue`` format."""
    return _struct(consume_queue_schema())


def _path(options: Any) -> str:
    path = options.get("path")
    if not path:
        raise ValueError("load(PATH) needs a store directory, a commitlog/ directory or a glob")
    return str(path)


def _int_option(options: Any, name: str, default: int) -> int:
    value = options.get(name)
    if value is None:
        return default
    number = int(value)
    if number <= 0:
        raise ValueError(f"option {name} must be > 0, got {value}")
    return number


class CommitLogDataSource(DataSource):
    """``spark.read.format("commitlog")``: one row per commit log record (see the module)."""

    @classmethod
    def name(cls) -> str:
        """The format name, ``commitlog``."""
        return "commitlog"

    def _include_body(self) -> bool:
        return str(self.options.get("includeBody", "false")).lower() in _TRUE

    def _columns(self) -> list[str] | None:
        value = self.options.get("columns")
        if not value:
            return None
        return [name.strip() for name in str(value).split(",") if name.strip()]

    def schema(self) -> StructType:
        """The columns; ``body`` only with ``includeBody``; only ``columns`` when given."""
        return commit_log_struct(self._include_body(), self._columns())

    def reader(self, schema: StructType) -> DataSourceReader:
        """A reader planning one partition per file or file range (of brokers' logs with
        option ``brokers`` or a ``hanet://`` path: :mod:`hanet.spark._remote`)."""
        settings: dict[str, Any] = dict(
            include_body=self._include_body(),
            columns=self._columns(),
            max_range_bytes=_int_option(self.options, "maxPartitionBytes", DEFAULT_MAX_RANGE_BYTES),
            batch_rows=_int_option(self.options, "batchRows", DEFAULT_BATCH_ROWS),
        )
        remote = broker_reader(self.options, **settings)
        return remote or _CommitLogReader(path=_path(self.options), **settings)


class _CommitLogReader(DataSourceReader):
    def __init__(
        self,
        *,
        path: str,
        include_body: bool,
        columns: list[str] | None,
        max_range_bytes: int,
        batch_rows: int,
    ) -> None:
        self.path = path
        self.include_body = include_body
        self.columns = columns
        self.max_range_bytes = max_range_bytes
        self.batch_rows = batch_rows

    def partitions(self) -> Sequence[InputPartition]:
        """One partition per commit log file, or per range of a large file."""
        parts: list[InputPartition] = []
        for store in find_stores(self.path):
            parts.extend(InputPartition(r) for r in plan_commit_log(store, self.max_range_bytes))
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The Arrow batches of one file range."""
        settle_worker()
        if partition.value is None:  # Spark's stand-in when there is nothing to read
            return iter(())
        return commit_log_batches(
            partition.value,
            include_body=self.include_body,
            columns=self.columns,
            batch_rows=self.batch_rows,
        )


class ConsumeQueueDataSource(DataSource):
    """``spark.read.format("consumequeue")``: one row per consume queue entry.

    Columns ``store, topic, queue_id, queue_offset, physical_offset, size, tag_hash``; a bare
    ``commitlog/`` directory without a store root has no entries.
    """

    @classmethod
    def name(cls) -> str:
        """The format name, ``consumequeue``."""
        return "consumequeue"

    def schema(self) -> StructType:
        """The columns."""
        return consume_queue_struct()

    def reader(self, schema: StructType) -> DataSourceReader:
        """A reader planning one partition per consume queue file."""
        return _ConsumeQueueReader(_path(self.options))


class _ConsumeQueueReader(DataSourceReader):
    def __init__(self, path: str) -> None:
        self.path = path

    def partitions(self) -> Sequence[InputPartition]:
        """One partition per consume queue file."""
        return [
            InputPartition(f)
            for store in find_stores(self.path)
            for f in plan_consume_queues(store)
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The Arrow batches of one consume queue file."""
        settle_worker()
        if partition.value is None:
            return iter(())
        return consume_queue_batches(partition.value)
