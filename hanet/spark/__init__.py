"""Commit logs on Spark: PySpark data sources and the audit, diff and stats jobs.

Behind the ``spark`` extra (``pip install 'hanet[spark]'``: pyspark 4, pyarrow). Importing
``hanet.spark`` does not import pyspark; each name below imports its module on first use, so
the ``hanet`` command line works without the extra.

- :func:`register` adds the ``commitlog`` and ``consumequeue`` formats to a session
  (:class:`CommitLogDataSource`, :class:`ConsumeQueueDataSource`; ``_source.py``).
- :func:`spark_session` starts (or joins) a session with them registered (``_session.py``).
- :func:`commit_log` / :func:`consume_queue` load one or more stores as one DataFrame.
- Jobs returning DataFrames: :func:`audit` (``_audit.py``), :func:`diff` (``_diff.py``),
  :func:`stats` (``_stats.py``); the ``hanet audit|diff|stats`` verbs print them
  (:mod:`hanet.cli`).
- Small stores are read in the driver and handed to Spark as Arrow tables
  (:func:`commit_log_table`, :func:`consume_queue_table`, :func:`is_small`; ``_local.py``):
  the jobs do so up to :data:`DEFAULT_DRIVER_ROWS` rows (their ``driver_rows`` argument).
  :func:`spark_session` with ``quick=True`` starts the JVM for a short job, mapping Spark's
  classes from a class data sharing archive (:func:`cds_plan`; ``_cds.py``);
  :func:`connect_session` joins a Spark Connect server, :func:`start_connect_server` starts
  one from the installed pyspark (``_connect_server.py``). :class:`Progress` prints the running
  stages on stderr while Spark's own progress bar is off (``_progress.py``).
- Without Spark: :func:`commit_log_batches` reads one commit log range as Arrow batches
  (``_arrow.py``), :func:`consume_queue_batches` one consume queue file (``_queues.py``);
  :func:`find_stores`, :func:`plan_commit_log` plan the ranges (``_layout.py``);
  :func:`compare_records` says where two records' bytes differ (``_fields.py``);
  :func:`settle_worker` freezes a reused Spark Python worker's objects once, from its second
  task, so the collection PySpark runs after every task skips them (``_worker.py``; the
  readers call it).
- Live brokers without shared files (``_remote.py``): ``option("brokers", "HOST:PORT,...")`` or
  a ``hanet://HOST:PORT`` path; :func:`plan_broker` plans a broker's ranges,
  :func:`remote_batches` reads one over the broker port (:class:`LogReadClient`,
  HANET_READ_LOG; ``_log_client.py``).

Example::

    from hanet.spark import spark_session, audit

    spark = spark_session("local[*]")
    df = spark.read.format("commitlog").load("/data/store")
    df.groupBy("topic").count().show()
    audit(spark, ["/data/store"]).problems.show()
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hanet.lazy import lazy_exports

if TYPE_CHECKING:
    from ._arrow import (
        PropertyColumns,
        commit_log_batches,
        commit_log_schema,
        properties_map_column,
    )
    from ._audit import AUDIT_COLUMNS, PROBLEM_KINDS, AuditResult, audit
    from ._cds import CdsPlan, cds_plan
    from ._connect_server import ConnectServer, ConnectServerError, start_connect_server
    from ._diff import DiffResult, DiffSummary, diff
    from ._fields import RecordDifference, compare_records, record_spans
    from ._frames import commit_log, consume_queue, java_string_hash_column
    from ._layout import (
        DEFAULT_DRIVER_ROWS,
        CommitLogRange,
        ConsumeQueueFile,
        StoreLocation,
        find_record_start,
        find_stores,
        plan_commit_log,
        plan_consume_queues,
    )
    from ._local import commit_log_table, consume_queue_table, is_small
    from ._log_client import LogChunk, LogReadClient, LogReadError, TlsFiles
    from ._progress import PROGRESS_INTERVAL, Progress, connect_stage_lines, stage_lines
    from ._queues import consume_queue_batches, consume_queue_schema
    from ._remote import (
        BROKER_SCHEME,
        RemoteRange,
        broker_credentials,
        plan_broker,
        remote_batches,
    )
    from ._session import (
        JAVA_HINT,
        QUICK_SQL_SETTINGS,
        SparkUnavailableError,
        connect_session,
        describe,
        java_problem,
        spark_session,
    )
    from ._source import (
        CommitLogDataSource,
        ConsumeQueueDataSource,
        commit_log_struct,
        consume_queue_struct,
        register,
    )
    from ._stats import StatsResult, stats
    from ._worker import settle_worker, worker_tasks

__all__ = [
    "AUDIT_COLUMNS",
    "BROKER_SCHEME",
    "DEFAULT_DRIVER_ROWS",
    "JAVA_HINT",
    "PROBLEM_KINDS",
    "PROGRESS_INTERVAL",
    "QUICK_SQL_SETTINGS",
    "AuditResult",
    "CdsPlan",
    "CommitLogDataSource",
    "CommitLogRange",
    "ConnectServer",
    "ConnectServerError",
    "ConsumeQueueDataSource",
    "ConsumeQueueFile",
    "DiffResult",
    "DiffSummary",
    "LogChunk",
    "LogReadClient",
    "LogReadError",
    "Progress",
    "PropertyColumns",
    "RecordDifference",
    "RemoteRange",
    "SparkUnavailableError",
    "StatsResult",
    "StoreLocation",
    "TlsFiles",
    "audit",
    "broker_credentials",
    "cds_plan",
    "commit_log",
    "commit_log_batches",
    "commit_log_schema",
    "commit_log_struct",
    "commit_log_table",
    "compare_records",
    "connect_session",
    "connect_stage_lines",
    "consume_queue",
    "consume_queue_batches",
    "consume_queue_schema",
    "consume_queue_struct",
    "consume_queue_table",
    "describe",
    "diff",
    "find_record_start",
    "find_stores",
    "is_small",
    "java_problem",
    "java_string_hash_column",
    "plan_broker",
    "plan_commit_log",
    "plan_consume_queues",
    "properties_map_column",
    "record_spans",
    "register",
    "remote_batches",
    "settle_worker",
    "spark_session",
    "stage_lines",
    "start_connect_server",
    "stats",
    "worker_tasks",
]

_HOMES = {
    "_arrow": (
        "PropertyColumns",
        "commit_log_batches",
        "commit_log_schema",
        "properties_map_column",
    ),
    "_audit": ("AUDIT_COLUMNS", "PROBLEM_KINDS", "AuditResult", "audit"),
    "_diff": ("DiffResult", "DiffSummary", "diff"),
    "_fields": ("RecordDifference", "compare_records", "record_spans"),
    "_frames": ("commit_log", "consume_queue", "java_string_hash_column"),
    "_layout": (
        "DEFAULT_DRIVER_ROWS",
        "CommitLogRange",
        "ConsumeQueueFile",
        "StoreLocation",
        "find_record_start",
        "find_stores",
        "plan_commit_log",
        "plan_consume_queues",
    ),
    "_cds": ("CdsPlan", "cds_plan"),
    "_connect_server": ("ConnectServer", "ConnectServerError", "start_connect_server"),
    "_progress": ("PROGRESS_INTERVAL", "Progress", "connect_stage_lines", "stage_lines"),
    "_local": ("commit_log_table", "consume_queue_table", "is_small"),
    "_queues": ("consume_queue_batches", "consume_queue_schema"),
    "_log_client": ("LogChunk", "LogReadClient", "LogReadError", "TlsFiles"),
    "_remote": (
        "BROKER_SCHEME",
        "RemoteRange",
        "broker_credentials",
        "plan_broker",
        "remote_batches",
    ),
    "_session": (
        "JAVA_HINT",
        "QUICK_SQL_SETTINGS",
        "SparkUnavailableError",
        "connect_session",
        "describe",
        "java_problem",
        "spark_session",
    ),
    "_source": (
        "CommitLogDataSource",
        "ConsumeQueueDataSource",
        "commit_log_struct",
        "consume_queue_struct",
        "register",
    ),
    "_stats": ("StatsResult", "stats"),
    "_worker": ("settle_worker", "worker_tasks"),
}
_MODULE_OF = {name: f".{module}" for module, names in _HOMES.items() for name in names}

__getattr__, __dir__ = lazy_exports(__name__, _MODULE_OF)
