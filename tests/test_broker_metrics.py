"""Prometheus metrics of a broker: the exposition and its HTTP endpoint."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import attrs
import pytest
import trio
from broker_support import config, connect, send

from hanet.broker import Broker, BrokerAddresses, BrokerMetrics, serve_metrics
from hanet.protocol import BrokerStatus, HanetRequestCode, MasterLink, RemotingCommand, SlaveInfo

STATUS = BrokerStatus(
    role="SYNC_MASTER",
    broker_address="127.0.0.1:10911",
    ha_address="127.0.0.1:10912",
    min_offset=0,
    max_offset=5000,
    flushed_offset=5000,
    dispatched_offset=4000,
    puts=10,
    mapped_files=1,
    dispatch_error=None,
    uptime=3.0,
    replicated_offset=4500,
    slaves=(SlaveInfo("127.0.0.1:5555", "transferring", 0, 4500, 5000, 500, 4500, 10.0),),
)


def sample(text: str, line_start: str) -> float:
    (line,) = [line for line in text.splitlines() if line.startswith(line_start)]
    return float(line.rsplit(" ", 1)[1])


def test_exposition_has_counters_and_status_gauges() -> None:
    current: list[BrokerStatus | None] = [STATUS]
    metrics = BrokerMetrics(lambda: current[0])
    metrics.observe_put(["PUT_OK", "PUT_OK", "FLUSH_SLAVE_TIMEOUT"], 0.004)
    metrics.connection_event("broker", "opened")
    text = metrics.exposition().decode()
    assert sample(text, 'hanet_puts_total{status="PUT_OK"}') == 2
    assert sample(text, 'hanet_puts_total{status="FLUSH_SLAVE_TIMEOUT"}') == 1
    assert sample(text, "hanet_put_latency_seconds_count") == 1
    assert sample(text, 'hanet_put_latency_seconds_bucket{le="0.005"}') == 1
    assert sample(text, 'hanet_commitlog_offset{kind="max"}') == 5000
    assert sample(text, "hanet_dispatch_lag_bytes") == 1000
    assert sample(text, 'hanet_slave_lag_bytes{slave="127.0.0.1:5555"}') == 500
    assert sample(text, 'hanet_slave_state{slave="127.0.0.1:5555",state="transferring"}') == 1
    assert sample(text, 'hanet_connection_events_total{event="opened",port="broker"}') == 1
    current[0] = None  # not running: only the counters
    assert "hanet_commitlog_offset" not in metrics.exposition().decode()


def test_a_slave_shows_its_master_link() -> None:
    link = MasterLink("127.0.0.1:10912", True, 3, 4, None)
    slave = attrs.evolve(STATUS, role="SLAVE", slaves=(), master=link, replicated_offset=None)
    metrics = BrokerMetrics(lambda: slave)
    text = metrics.exposition().decode()
    assert sample(text, "hanet_master_connected") == 1
    assert sample(text, "hanet_master_connects_total") == 3


async def http_get(port: int, request: bytes) -> bytes:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(request)
    out = bytearray()
    with trio.fail_after(5):
        while chunk := await stream.receive_some(65536):
            out += chunk
    return bytes(out)


async def test_http_endpoint() -> None:
    metrics = BrokerMetrics(lambda: STATUS)
    async with trio.open_nursery() as nursery:
        _host, port = await nursery.start(partial(serve_metrics, metrics, "127.0.0.1", 0))
        ok = await http_get(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        head, _, body = ok.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK")
        assert b"text/plain; version=0.0.4" in head
        assert b"hanet_commitlog_offset" in body
        assert (await http_get(port, b"GET /nope HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 404")
        assert (await http_get(port, b"POST /metrics HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 405")
        assert (await http_get(port, b"garbage\r\n\r\n")).startswith(b"HTTP/1.1 400")
        assert (await http_get(port, b"G" * 10000)).startswith(b"HTTP/1.1 431")
        nursery.cancel_scope.cancel()


async def test_a_status_that_fails_is_answered_500_and_the_endpoint_stays(
    caplog: pytest.LogCaptureFixture,
) -> None:
    failing = [False]

    def status() -> BrokerStatus:
        if failing[0]:
            raise RuntimeError("boom")
        return STATUS

    metrics = BrokerMetrics(status)
    failing[0] = True
    async with trio.open_nursery() as nursery:
        _host, port = await nursery.start(partial(serve_metrics, metrics, "127.0.0.1", 0))
        answer = await http_get(port, b"GET /metrics HTTP/1.1\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 500 Internal Server Error")
        assert "boom" in caplog.text
        failing[0] = False
        assert (await http_get(port, b"GET /metrics HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 200")
        nursery.cancel_scope.cancel()


def test_put_statuses_are_counted_per_status() -> None:
    metrics = BrokerMetrics(lambda: STATUS)
    metrics.observe_put(["PUT_OK", "PUT_OK", "MESSAGE_ILLEGAL", "PUT_OK"], 0.001)
    text = metrics.exposition().decode()
    assert sample(text, 'hanet_puts_total{status="PUT_OK"}') == 3
    assert sample(text, 'hanet_puts_total{status="MESSAGE_ILLEGAL"}') == 1


def test_puts_counted_together_show_as_counted_one_by_one() -> None:
    together, one_by_one = BrokerMetrics(lambda: STATUS), BrokerMetrics(lambda: STATUS)
    for seconds in (0.0004, 0.02, 7.0):
        together.observe_puts_ok(5, seconds)
        for _ in range(5):
            one_by_one.observe_put(["PUT_OK"], seconds)
    lines = [together.exposition().decode(), one_by_one.exposition().decode()]
    kept = [[x for x in t.splitlines() if "_created" not in x and "_sum" not in x] for t in lines]
    assert kept[0] == kept[1]
    sums = [sample(text, "hanet_put_latency_seconds_sum") for text in lines]
    assert sums[0] == pytest.approx(sums[1])  # (a product, not a running sum)
    assert sample(lines[0], 'hanet_puts_total{status="PUT_OK"}') == 15


async def test_a_running_broker_serves_metrics_that_move(tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        broker = Broker(config(tmp_path, metrics_listen="127.0.0.1:0"))
        addresses: BrokerAddresses = await nursery.start(broker.run)
        assert addresses.metrics is not None and addresses.broker is not None
        port = addresses.metrics[1]

        async def scrape() -> str:
            reply = await http_get(port, b"GET /metrics HTTP/1.1\r\n\r\n")
            return reply.partition(b"\r\n\r\n")[2].decode()

        before = await scrape()
        assert sample(before, 'hanet_commitlog_offset{kind="max"}') == 0
        async with connect(addresses.broker) as client:
            for i in range(5):
                await send(client, "T", b"m%d" % i)
            await send(client, "T", b"x" * (5 << 20))  # over the maximum body size
        after = await scrape()
        assert sample(after, 'hanet_puts_total{status="PUT_OK"}') == 5
        assert sample(after, 'hanet_puts_total{status="MESSAGE_ILLEGAL"}') == 1
        assert sample(after, "hanet_put_latency_seconds_count") == 6
        assert sample(after, 'hanet_commitlog_offset{kind="max"}') > 0
        assert sample(after, 'hanet_connection_events_total{event="opened",port="broker"}') == 1
        async with connect(addresses.broker) as client:  # the same text on the broker port
            answer = await client.invoke_checked(
                RemotingCommand.request(HanetRequestCode.HANET_METRICS)
            )
        assert sample(bytes(answer.body).decode(), 'hanet_puts_total{status="PUT_OK"}') == 5
        nursery.cancel_scope.cancel()
