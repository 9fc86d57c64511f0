"""Prometheus metrics of a broker, served on ``--metrics-listen HOST:PORT``.

:class:`BrokerMetrics` holds the counters the request path updates (puts by status, put
latency, connection events by reason) and, at each scrape, reads the broker's status for the
gauges: offsets, dispatch lag, and per slave its ack offset, lag, state and bytes pushed (a
master), or the link to the master (a slave); the registration with the name servers
(``hanet_namesrv_*``), a slave's metadata sync (``hanet_metadata_sync*``) and the consumer
offsets held (``hanet_consumer_offset*``). The text exposition comes from ``prometheus-client``;
:func:`serve_metrics` answers ``GET /metrics`` over plain HTTP/1.1 in the broker's own trio run
(no thread).
"""

from __future__ import annotations

import bisect
import itertools
import logging
import time
from collections.abc import Callable, Iterable, Iterator

import trio
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from hanet.channel import format_address
from hanet.errors import HanetError
from hanet.protocol import BrokerStatus

__all__ = [
    "CONTENT_TYPE",
    "MAX_LAG_SERIES",
    "BrokerMetrics",
    "ConsumerLagCollector",
    "ConsumerLagEntry",
    "MetricsListenError",
    "serve_metrics",
]

log = logging.getLogger("hanet.metrics")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_MAX_REQUEST = 8192
_REQUEST_TIMEOUT = 10.0
_LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 3, 5, 10)
_BUCKET_LABELS = (*(repr(float(bound)) for bound in _LATENCY_BUCKETS), "+Inf")  # le="1.0"


class MetricsListenError(HanetError, OSError):
    """The metrics port (``metrics_listen``) could not be opened: ``errno`` and ``strerror``
    are the operating system's, ``address`` the ``(host, port)`` asked for."""

    def __init__(self, cause: OSError, address: tuple[str, int]) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause))
        self.address = address


class _StatusCollector(Collector):
    """Gauges read from the broker's status at each scrape."""

    def __init__(self, status: Callable[[], BrokerStatus | None]) -> None:
        self._status = status

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        status = self._status()
        if status is None:
            return
        offsets = GaugeMetricFamily("hanet_commitlog_offset", "Commit log offsets", labels=["kind"])
        for kind, value in (
            ("min", status.min_offset),
            ("max", status.max_offset),
            ("flushed", status.flushed_offset),
            ("dispatched", status.dispatched_offset),
        ):
            offsets.add_metric([kind], value)
        yield offsets
        yield GaugeMetricFamily(
            "hanet_dispatch_lag_bytes",
            "Commit log bytes not yet in the consume queues",
            value=max(status.max_offset - status.dispatched_offset, 0),
        )
        yield GaugeMetricFamily(
            "hanet_damaged_bytes",
            "Commit log bytes in damaged ranges (kept, refused until repaired)",
            value=sum(r.end - r.start for r in status.damaged_ranges),
        )
        yield GaugeMetricFamily(
            "hanet_dispatch_stopped",
            "1 when dispatch stopped at a record it could not dispatch",
            value=0 if status.dispatch_error is None else 1,
        )
        if status.replicated_offset is not None:
            yield GaugeMetricFamily(
                "hanet_replicated_offset",
                "Offset acknowledged by enough replicas for SYNC puts",
                value=status.replicated_offset,
            )
        ack = GaugeMetricFamily(
            "hanet_slave_ack_offset", "A slave's acknowledged offset", labels=["slave"]
        )
        lag = GaugeMetricFamily(
            "hanet_slave_lag_bytes", "Bytes a slave is behind the master", labels=["slave"]
        )
        state = GaugeMetricFamily(
            "hanet_slave_state", "1 for a slave's current state", labels=["slave", "state"]
        )
        sent = CounterMetricFamily(
            "hanet_slave_bytes_sent", "Bytes pushed to a slave's connection", labels=["slave"]
        )
        for slave in status.slaves:
            ack.add_metric([slave.address], slave.ack_offset)
            lag.add_metric([slave.address], slave.lag_bytes)
            state.add_metric([slave.address, slave.state.split(":")[0]], 1)
            sent.add_metric([slave.address], slave.bytes_sent)
        yield from (ack, lag, state, sent)
        yield GaugeMetricFamily(
            "hanet_slaves_connected", "Slaves connected to this master", value=len(status.slaves)
        )
        if status.master is not None:
            link = status.master
            yield GaugeMetricFamily(
                "hanet_master_connected",
                "1 while this slave is connected to its master",
                value=1 if link.connected else 0,
            )
            yield CounterMetricFamily(
                "hanet_master_connects", "Connections made to the master", value=link.connects
            )
            diverged_at = link.epoch_diverged_at
            yield GaugeMetricFamily(
                "hanet_epoch_diverged",
                "1 while this slave refuses to follow: its log goes past where its master's "
                "epochs part from its own",
                value=0 if diverged_at is None else 1,
            )
            if diverged_at is not None:
                yield GaugeMetricFamily(
                    "hanet_epoch_diverged_offset",
                    "The offset where this slave's log parts from its master's (-1: no "
                    "common epoch)",
                    value=diverged_at,
                )
        yield from _cluster_metrics(status)


def _cluster_metrics(status: BrokerStatus) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
    """The status's ``cluster``, ``metadata_sync`` and ``consumer_offsets`` sections (each
    only when the status has it; an age only once there was a success)."""
    cluster = status.cluster
    if cluster is not None:
        yield CounterMetricFamily(
            "hanet_namesrv_registrations",
            "Registration rounds some name server took",
            value=cluster.registrations,
        )
        yield CounterMetricFamily(
            "hanet_namesrv_registration_failures",
            "Registration rounds no name server took",
            value=cluster.failures,
        )
        yield GaugeMetricFamily(
            "hanet_namesrv_registration_failing",
            "1 while the last registration round failed",
            value=0 if cluster.last_error is None else 1,
        )
        if cluster.last_registered_ago is not None:
            yield GaugeMetricFamily(
                "hanet_namesrv_registration_age_seconds",
                "Seconds since some name server last took a registration",
                value=cluster.last_registered_ago,
            )
    sync = status.metadata_sync
    if sync is not None:
        yield CounterMetricFamily(
            "hanet_metadata_syncs",
            "Metadata syncs from the master that succeeded",
            value=sync.syncs,
        )
        yield CounterMetricFamily(
            "hanet_metadata_sync_failures",
            "Metadata syncs from the master that failed",
            value=sync.failures,
        )
        if sync.last_synced_ago is not None:
            yield GaugeMetricFamily(
                "hanet_metadata_sync_age_seconds",
                "Seconds since the last successful metadata sync",
                value=sync.last_synced_ago,
            )
    offsets = status.consumer_offsets
    if offsets is not None:
        yield GaugeMetricFamily(
            "hanet_consumer_offset_entries",
            "topic@group entries of the consumer offsets",
            value=offsets.entries,
        )
        yield GaugeMetricFamily(
            "hanet_consumer_offset_groups",
            "Consumer groups with an offset",
            value=offsets.groups,
        )
        yield GaugeMetricFamily(
            "hanet_consumer_offsets_persist_failing",
            "1 while the last write of the consumer offsets failed",
            value=0 if offsets.last_error is None else 1,
        )


ConsumerLagEntry = tuple[str, str, int, int, int]
"""``(group, topic, queue id, broker offset, consumer offset)``."""


class ConsumerLagCollector(Collector):
    """Each consumer group's progress per queue, read at each scrape: the messages not
    consumed yet (``brokerOffset - consumerOffset``, at least 0, as ``mqadmin
    consumerProgress`` shows it) and both offsets, labelled ``group``, ``topic``, ``queue``.
    At most :data:`MAX_LAG_SERIES` queues are exported (the first, by group and topic)."""

    def __init__(self, source: Callable[[], Iterable[ConsumerLagEntry]]) -> None:
        self._source = source

    def collect(self) -> Iterator[GaugeMetricFamily]:
        labels = ["group", "topic", "queue"]
        lag = GaugeMetricFamily(
            "hanet_consumer_lag_messages",
            "Messages a consumer group has not consumed",
            labels=labels,
        )
        consumed = GaugeMetricFamily(
            "hanet_consumer_offset", "A consumer group's committed offset", labels=labels
        )
        held = GaugeMetricFamily(
            "hanet_consumer_broker_offset", "The queue's max offset on this broker", labels=labels
        )
        try:
            entries = list(itertools.islice(self._source(), MAX_LAG_SERIES))
        except (RuntimeError, OSError) as exc:  # the broker stopped between two checks
            log.debug("consumer lag not collected: %s", exc)
            entries = []
        for group, topic, queue_id, broker_offset, consumer_offset in entries:
            key = [group, topic, str(queue_id)]
            lag.add_metric(key, max(broker_offset - consumer_offset, 0))
            consumed.add_metric(key, consumer_offset)
            held.add_metric(key, broker_offset)
        yield from (lag, consumed, held)


MAX_LAG_SERIES = 10_000
"""Most (group, topic, queue) series of the consumer lag metrics."""


class _PutCollector(Collector):
    """``hanet_puts_total`` by status and the ``hanet_put_latency_seconds`` histogram, counted
    in plain ints and floats and turned into metric families at each scrape: the same
    exposition as a ``Counter`` and a ``Histogram`` of ``prometheus-client``, without their lock
    and value objects on every send (three locked increments a put: ~7 % of a send's CPU).
    The broker's trio thread is the only one that observes and scrapes."""

    def __init__(self) -> None:
        self.by_status: dict[str, int] = {}
        self.created: dict[str, float] = {}
        self.buckets = [0] * (len(_LATENCY_BUCKETS) + 1)  # the last: past every bound (+Inf)
        self.count = 0
        self.sum = 0.0
        self.since = time.time()

    def observe(self, statuses: list[str], seconds: float) -> None:
        for status in statuses:
            self._count(status, 1)
        self._latency(seconds, 1)

    def observe_many(self, status: str, requests: int, seconds: float) -> None:
        """``requests`` sends of one message each, all answered ``status`` after ``seconds``:
        as many :meth:`observe` calls, counted at once."""
        self._count(status, requests)
        self._latency(seconds, requests)

    def _count(self, status: str, messages: int) -> None:
        count = self.by_status.get(status)
        if count is None:  # one of the store's few PutStatus values, first seen
            self.created[status] = time.time()
            count = 0
        self.by_status[status] = count + messages

    def _latency(self, seconds: float, requests: int) -> None:
        seconds = max(seconds, 0.0)
        self.buckets[bisect.bisect_left(_LATENCY_BUCKETS, seconds)] += requests
        self.count += requests
        self.sum += seconds * requests

    def collect(self) -> Iterator[CounterMetricFamily | HistogramMetricFamily]:
        puts = CounterMetricFamily(
            "hanet_puts", "Messages put, by the status answered", labels=["status"]
        )
        for status, count in self.by_status.items():
            puts.add_metric([status], count, created=self.created[status])
        yield puts
        latency = HistogramMetricFamily(
            "hanet_put_latency_seconds", "Time from a send request's arrival to its answer"
        )
        cumulative = list(itertools.accumulate(self.buckets))
        latency.add_metric([], list(zip(_BUCKET_LABELS, cumulative, strict=True)), self.sum)
        latency.samples.append(Sample("hanet_put_latency_seconds_created", {}, self.since))
        yield latency


class BrokerMetrics:
    """The metrics of one broker, in a registry of its own.

    Args:
        status: returns the broker's current status (None while it is not running).
    """

    def __init__(self, status: Callable[[], BrokerStatus | None]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._puts = _PutCollector()
        self.registry.register(self._puts)
        self.connections = Counter(
            "hanet_connection_events",
            "Connections opened and closed, by port and reason",
            ["port", "event"],
            registry=self.registry,
        )
        self.registry.register(_StatusCollector(status))

    def observe_put(self, statuses: list[str], seconds: float) -> None:
        """One answered send request: the status of each of its messages and its latency."""
        self._puts.observe(statuses, seconds)

    def observe_puts_ok(self, requests: int, seconds: float) -> None:
        """``requests`` sends of one message each, each stored PUT_OK and answered after
        ``seconds``: as many :meth:`observe_put` calls."""
        self._puts.observe_many("PUT_OK", requests, seconds)

    def connection_event(self, port: str, event: str) -> None:
        """A connection ``opened`` or closed (``event`` is a short reason) on ``port``."""
        self.connections.labels(port, event).inc()

    def add_consumer_lag(self, source: Callable[[], Iterable[ConsumerLagEntry]]) -> None:
        """Serve each consumer group's lag per queue from ``source`` at each scrape
        (``hanet_consumer_lag_messages``, ``hanet_consumer_offset``,
        ``hanet_consumer_broker_offset``; see :class:`ConsumerLagCollector`)."""
        self.registry.register(ConsumerLagCollector(source))

    def exposition(self) -> bytes:
        """The text exposition of every metric."""
        return generate_latest(self.registry)


async def serve_metrics(
    metrics: BrokerMetrics,
    host: str,
    port: int,
    *,
    task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Answer ``GET /metrics`` (and ``GET /``) on ``host:port`` until cancelled; reports the
    bound address. Requests are bounded (8 KiB of headers, 10 s); anything else gets 404/405."""
    try:
        listeners = await trio.open_tcp_listeners(port, host=host)
    except OSError as exc:
        raise MetricsListenError(exc, (host, port)) from exc
    name = listeners[0].socket.getsockname()
    address = (name[0], name[1])
    log.info("metrics on http://%s/metrics", format_address(address))

    async def handle(stream: trio.SocketStream) -> None:
        try:
            with trio.move_on_after(_REQUEST_TIMEOUT):
                request = await _read_request(stream)
                if request is None:
                    return
                method, path = request
                if method != "GET":
                    await _respond(stream, 405, b"only GET\n", "text/plain")
                elif path.split("?")[0] not in ("/metrics", "/"):
                    await _respond(stream, 404, b"try /metrics\n", "text/plain")
                else:
                    try:
                        body = metrics.exposition()
                    except Exception:
                        log.exception("metrics: collecting the broker's status failed")
                        await _respond(stream, 500, b"metrics collection failed\n", "text/plain")
                    else:
                        await _respond(stream, 200, body, CONTENT_TYPE)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await trio.aclose_forcefully(stream)

    async with trio.open_nursery() as nursery:
        task_status.started(address)
        await trio.serve_listeners(handle, listeners, handler_nursery=nursery)


async def _read_request(stream: trio.SocketStream) -> tuple[str, str] | None:
    data = bytearray()
    while b"\r\n\r\n" not in data and b"\n\n" not in data:
        if len(data) > _MAX_REQUEST:
            await _respond(stream, 431, b"request too large\n", "text/plain")
            return None
        chunk = await stream.receive_some(4096)
        if not chunk:
            return None
        data += chunk
    line = bytes(data).split(b"\n", 1)[0].decode("latin-1").strip()
    parts = line.split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        await _respond(stream, 400, b"bad request\n", "text/plain")
        return None
    return parts[0], parts[1]


async def _respond(stream: trio.SocketStream, code: int, body: bytes, content_type: str) -> None:
    reason = {
        200: "OK",
        400: "Bad Request",
        404: "Not Found",
        405: "Method Not Allowed",
        431: "Request Header Fields Too Large",
    }.get(code, "Internal Server Error")
    head = (
        f"HTTP/1.1 {code} {reason}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode("latin-1")
    await stream.send_all(head + body)
