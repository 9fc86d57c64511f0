"""Commit logs read from running brokers over the network (HANET_READ_LOG), no shared files.

What ``spark.read.format("commitlog").option("brokers", "HOST:PORT,...")`` (or
``load("hanet://HOST:PORT,...")``) reads: the driver asks each broker for its log's offsets and
file size (:func:`plan_broker`) and plans the same ranges as for the files (one per commit log
file, or per ``maxPartitionBytes`` of a larger one, the cuts found by the broker with ``seek``);
each Spark task reads its range answer after answer (at most 4 MiB each, whole records) with
:class:`LogReadClient` (``_log_client.py``: a small synchronous client of the remoting
protocol, as Spark's Python workers are not trio programs; any :class:`LogSource` will do,
a test passes its own), and turns the records into
the same Arrow batches as the file reader (:func:`remote_batches`): same rows, same CRC and
corrupt rows. The ``store`` column is the broker's address as given; the ``file`` column the
20-digit name of the file the record is in.

The data read is the log as the broker holds it when planned: each range ends at the maximum
offset the driver saw, so records written meanwhile are not part of this read. A range whose
start was deleted by retention meanwhile fails its task with the broker's error.

TLS: ``tlsCa``, ``tlsCert``, ``tlsKey`` (paths on the driver, as ``hanet``'s clients'
``--tls-ca/--tls-cert/--tls-key``): the driver reads the files and the tasks get their
contents, so executors need no copy of them. Consume queues are not read from brokers (the audit
skips their comparison for a broker).

ACL: a broker with RocketMQ's plain ACL answers HANET_READ_LOG only to an admin account; the
options ``accessKey`` and ``secretKey`` (both, or neither) sign every request as RocketMQ's
``AclClientRPCHook`` does. They are options, never part of a ``hanet://`` path, so the secret
is not in the path Spark shows in plans and logs; the tasks get the secret with the reader.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

import attrs
import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from hanet.protocol import Credentials
from hanet.store import StopReason
from hanet.store.lowlevel import INDEX_ROW, INDEX_SCAN_WINDOW, file_name

from ._arrow import (
    DEFAULT_BATCH_ROWS,
    _BatchBuilder,
    _judge_stop,
    commit_log_schema,
    scan_batches,
)
from ._layout import DEFAULT_MAX_RANGE_BYTES, CommitLogRange
from ._log_client import LogChunk, LogReadClient, LogReadError, TlsFiles, split_address
from ._worker import settle_worker

__all__ = [
    "BROKER_SCHEME",
    "READ_BYTES",
    "BrokerLogReader",
    "Connect",
    "LogSource",
    "RemoteRange",
    "broker_addresses",
    "broker_credentials",
    "broker_reader",
    "broker_tls_options",
    "plan_broker",
    "remote_batches",
]

BROKER_SCHEME = "hanet://"
"""A ``load()`` path naming brokers instead of files: ``hanet://HOST:PORT[,HOST:PORT...]``,
optionally ``?tlsCa=FILE&tlsCert=FILE&tlsKey=FILE``."""
MAX_BROKER_FILES = 1 << 20
"""The most commit log files :func:`plan_broker` plans for one broker (its own answer's
``fileSize`` and offsets decide the count: a broken or hostile broker's tiny file size with a
huge max offset must not make billions of ranges)."""

READ_BYTES = 4 * 1024 * 1024
"""Bytes asked for per request (the broker's cap)."""


def broker_addresses(text: str) -> list[str]:
    """``HOST:PORT,HOST:PORT`` (or a ``hanet://`` path) as a list of addresses.

    Raises:
        ValueError: an empty list or an address without a port number.
    """
    if text.startswith(BROKER_SCHEME):
        text = urlsplit(text).netloc
    addresses = [a.strip() for a in text.split(",") if a.strip()]
    if not addresses:
        raise ValueError("no broker address given (HOST:PORT,...)")
    for address in addresses:
        split_address(address)
    return addresses


def broker_tls_options(path: str) -> dict[str, str]:
    """The ``tlsCa``/``tlsCert``/``tlsKey`` of a ``hanet://`` path's query."""
    query = parse_qs(urlsplit(path).query)
    return {k: v[-1] for k, v in query.items() if k in ("tlsCa", "tlsCert", "tlsKey")}


@attrs.frozen
class RemoteRange:
    """What one partition reads from a broker: a range of one commit log file.

    Attributes:
        broker: ``HOST:PORT``; also the ``store`` column.
        file_start: the file's start offset.
        file_size: the broker's commit log file size.
        start: position in the file where the range starts (the first record at or after it
            when not 0).
        end: position where it ends (records starting before it are read).
        last_file: the file is the broker's last one (its data ends at the log's end).
        tls: TLS files' contents, or None for plain TCP.
        credentials: the ACL account that signs the reads, or None.
    """

    broker: str
    file_start: int
    file_size: int
    start: int
    end: int
    last_file: bool
    tls: TlsFiles | None = None
    credentials: Credentials | None = None


class LogSource(Protocol):
    """What reads a broker's log: :class:`LogReadClient`'s :meth:`~LogReadClient.read`."""

    def read(self, offset: int | None, max_bytes: int, *, seek: bool = False) -> LogChunk:
        """One HANET_READ_LOG."""
        ...


Connect = Callable[[str, TlsFiles | None], contextlib.AbstractContextManager[LogSource]]
"""Opens a :class:`LogReadClient` (address, TLS): a test passes its own."""


def _open(
    connect: Connect | None, broker: str, tls: TlsFiles | None, credentials: Credentials | None
) -> contextlib.AbstractContextManager[LogSource]:
    """``connect(broker, tls)``, or a :class:`LogReadClient` signing with ``credentials``."""
    if connect is not None:
        return connect(broker, tls)
    return LogReadClient(broker, tls, credentials=credentials)


def plan_broker(
    broker: str,
    max_range_bytes: int = DEFAULT_MAX_RANGE_BYTES,
    tls: TlsFiles | None = None,
    *,
    connect: Connect | None = None,
    credentials: Credentials | None = None,
) -> list[RemoteRange]:
    """The ranges of a broker's log, from its offsets (one request): one per file, or one per
    ``max_range_bytes`` of a larger file.

    Raises:
        LogReadError: the broker cannot be reached or refuses, or its offsets would make more
            than :data:`MAX_BROKER_FILES` files.
    """
    with _open(connect, broker, tls, credentials) as client:
        probe = client.read(None, 0)
    size, low, high = probe.file_size, probe.min_offset, probe.max_offset
    files = -(-(high - (low - low % size)) // size)
    if files > MAX_BROKER_FILES:
        raise LogReadError(
            f"broker {broker}: its log would be {files} files of {size} bytes (offsets "
            f"{low} to {high}), more than {MAX_BROKER_FILES}: not planned"
        )
    ranges = []
    for file_start in range(low - low % size, high, size):
        end = min(size, high - file_start)
        first = low - file_start if file_start < low else 0
        cuts = [*range(first, end, max_range_bytes), end]
        last_file = file_start + size >= high
        for a, b in itertools.pairwise(cuts):
            ranges.append(RemoteRange(broker, file_start, size, a, b, last_file, tls, credentials))
    return ranges


def remote_batches(
    part: RemoteRange,
    *,
    include_body: bool = False,
    columns: Sequence[str] | None = None,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    read_bytes: int = READ_BYTES,
    connect: Connect | None = None,
) -> Iterator[pa.RecordBatch]:
    """The rows of one broker range as Arrow batches: what :func:`~._arrow.commit_log_batches`
    gives for the same bytes in a file (the same rows, CRC failures and corrupt rows).

    Raises:
        LogReadError: the broker cannot be reached, or refuses (e.g. the range was deleted).
    """
    schema = commit_log_schema(include_body, columns)
    name = file_name(part.file_start)
    end = part.file_start + part.end
    with _open(connect, part.broker, part.tls, part.credentials) as client:
        position = part.file_start + part.start
        seek = part.start > 0
        while position < end:
            chunk = client.read(position, min(read_bytes, end - position), seek=seek)
            if seek and chunk.offset >= end:
                return  # no record starts in this range: the next range reads from there
            seek = False
            chunk_range = CommitLogRange(
                store=part.broker,
                path=name,
                file_start=chunk.offset,
                start=0,
                end=len(chunk.data),
                last_file=part.last_file,
            )
            builder = _BatchBuilder(chunk_range, schema)
            corrupt = yield from _chunk_batches(builder, chunk, batch_rows)
            if corrupt:
                return
            if chunk.stop is not None:
                file_range = attrs.evolve(chunk_range, file_start=part.file_start)
                judged = _judge_stop(chunk.stop, file_range, part.file_size)
                if judged is not None:
                    yield builder.corrupt_row(*judged)
                return
            if chunk.next_offset <= position:
                if chunk.data:  # a broker going back would have this task read forever
                    raise LogReadError(f"broker {part.broker}: the read did not move on")
                return  # the log's end (or nothing found by seek)
            position = chunk.next_offset


def _chunk_batches(
    builder: _BatchBuilder, chunk: LogChunk, batch_rows: int
) -> Generator[pa.RecordBatch, None, bool]:
    """The batches of one answer's records (body CRCs checked here); True returned when a
    record fails anything but its CRC (a corrupt row was yielded: the range ends)."""
    view = memoryview(chunk.data)
    limit = chunk.file_size - chunk.offset % chunk.file_size
    rows_step = max(1, batch_rows) * INDEX_ROW.size
    stop = yield from scan_batches(
        builder, view, 0, len(view), chunk.offset, limit, INDEX_SCAN_WINDOW, rows_step
    )
    if stop.reason is StopReason.END:
        return False
    yield builder.corrupt_row(stop.offset, stop.detail or stop.reason.value)
    return True


class BrokerLogReader(DataSourceReader):
    """The ``commitlog`` reader of brokers: partitions planned by :func:`plan_broker`, each
    read by :func:`remote_batches`."""

    def __init__(
        self,
        brokers: Sequence[str],
        tls: TlsFiles | None,
        *,
        credentials: Credentials | None = None,
        include_body: bool,
        columns: list[str] | None,
        max_range_bytes: int,
        batch_rows: int,
    ) -> None:
        self.brokers = list(brokers)
        self.tls = tls
        self.credentials = credentials
        self.include_body = include_body
        self.columns = columns
        self.max_range_bytes = max_range_bytes
        self.batch_rows = batch_rows

    def partitions(self) -> Sequence[InputPartition]:
        """One partition per commit log file of each broker, or per range of a large file."""
        return [
            InputPartition(r)
            for broker in self.brokers
            for r in plan_broker(
                broker, self.max_range_bytes, self.tls, credentials=self.credentials
            )
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The Arrow batches of one range, read from its broker."""
        settle_worker()
        if partition.value is None:  # Spark's stand-in when there is nothing to read
            return iter(())
        return remote_batches(
            partition.value,
            include_body=self.include_body,
            columns=self.columns,
            batch_rows=self.batch_rows,
        )


def broker_reader(
    options: Any,
    *,
    include_body: bool,
    columns: list[str] | None,
    max_range_bytes: int,
    batch_rows: int,
) -> BrokerLogReader | None:
    """The reader of the brokers a ``commitlog`` load names (option ``brokers``, or a
    ``hanet://`` path; TLS options ``tlsCa``/``tlsCert``/``tlsKey`` or the path's query; ACL
    options ``accessKey``/``secretKey``), or None when it names files.

    Raises:
        ValueError: brokers named twice, or one ACL option without the other.
    """
    path = str(options.get("path") or "")
    spec = options.get("brokers")
    tls_options = {k: options.get(k) for k in ("tlsCa", "tlsCert", "tlsKey")}
    if path.startswith(BROKER_SCHEME):
        if spec:
            raise ValueError("give brokers either as option brokers or as a hanet:// path")
        spec = path
        for key, value in broker_tls_options(path).items():
            tls_options[key] = tls_options[key] or value
    elif not spec:
        return None
    elif path:
        raise ValueError("option brokers reads from brokers: load() takes no path then")
    tls = TlsFiles.load(tls_options["tlsCa"], tls_options["tlsCert"], tls_options["tlsKey"])
    return BrokerLogReader(
        broker_addresses(str(spec)),
        tls,
        credentials=broker_credentials(options),
        include_body=include_body,
        columns=columns,
        max_range_bytes=max_range_bytes,
        batch_rows=batch_rows,
    )


def broker_credentials(options: Any) -> Credentials | None:
    """The ACL account of options ``accessKey`` and ``secretKey``, or None without them.

    Raises:
        ValueError: one without the other.
    """
    access_key = str(options.get("accessKey") or "")
    secret_key = str(options.get("secretKey") or "")
    if not access_key and not secret_key:
        return None
    if not access_key or not secret_key:
        missing = "accessKey" if not access_key else "secretKey"
        raise ValueError(f"option {missing} is needed with the other ACL option")
    return Credentials(access_key, secret_key)
