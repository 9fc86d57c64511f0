"""ReconnectingClient and RetryPolicy in virtual time (autojump_clock + memory streams)."""

from __future__ import annotations

import itertools
import random

import pytest
import trio
import trio.testing

from hanet import (
    ChannelInboundHandler,
    HandlerContext,
    ReconnectingClient,
    RetryPolicy,
    StreamChannel,
)


class FlakyConnector:
    """Fails ``failures`` times, then hands out memory streams; records when it was called."""

    def __init__(self, failures: int | list[bool] = 0) -> None:
        # A list says, per attempt, whether it fails; an int fails the first N attempts.
        self.plan = failures
        self.calls: list[float] = []
        self.peers: list[trio.abc.Stream] = []
        self.start = trio.current_time()

    def fails(self, attempt: int) -> bool:
        if isinstance(self.plan, int):
            return attempt < self.plan
        return attempt < len(self.plan) and self.plan[attempt]

    async def __call__(self) -> trio.abc.Stream:
        attempt = len(self.calls)
        self.calls.append(trio.current_time() - self.start)
        await trio.lowlevel.checkpoint()
        if self.fails(attempt):
            raise ConnectionRefusedError(f"refused #{attempt}")
        ours, theirs = trio.testing.memory_stream_pair()
        self.peers.append(theirs)
        return ours


def void(_: object) -> None:
    pass


def gaps(times: list[float]) -> list[float]:
    return [round(b - a, 6) for a, b in itertools.pairwise(times)]


def test_policy_delays() -> None:
    rng = random.Random(1)
    policy = RetryPolicy(initial_delay=1, max_delay=10, multiplier=2, jitter=0)
    assert [policy.delay(n, rng) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]
    assert RetryPolicy(initial_delay=5, multiplier=1, jitter=0).delay(9, rng) == 5


def test_policy_jitter_stays_in_its_band_and_is_reproducible() -> None:
    policy = RetryPolicy(initial_delay=4, max_delay=100, multiplier=2, jitter=0.25)
    delays = [policy.delay(3, random.Random(seed)) for seed in range(200)]
    assert all(12 <= d <= 20 for d in delays)
    assert len(set(delays)) > 100
    assert policy.delay(3, random.Random(7)) == policy.delay(3, random.Random(7))


def test_policy_validation() -> None:
    with pytest.raises(ValueError):
        RetryPolicy(initial_delay=-1)
    with pytest.raises(ValueError):
        RetryPolicy(jitter=-0.1)


async def test_backoff_without_jitter(autojump_clock: trio.testing.MockClock) -> None:
    connector = FlakyConnector(failures=6)
    connected = trio.Event()
    client = ReconnectingClient(
        connector,
        lambda ch: None,
        policy=RetryPolicy(initial_delay=1, max_delay=10, multiplier=2, jitter=0),
        on_connect=lambda ch: connected.set(),
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.run)
        await connected.wait()
        assert gaps(connector.calls) == [1, 2, 4, 8, 10, 10]
        stats = client.statistics()
        assert (stats.attempts, stats.failures, stats.connects, stats.connected) == (7, 6, 1, True)
        assert client.channel is not None and client.channel.is_active
        nursery.cancel_scope.cancel()
    assert client.channel is None


async def test_backoff_with_seeded_jitter(autojump_clock: trio.testing.MockClock) -> None:
    policy = RetryPolicy(initial_delay=1, max_delay=30, multiplier=3, jitter=0.2)
    connector = FlakyConnector(failures=4)
    connected = trio.Event()
    client = ReconnectingClient(
        connector,
        lambda ch: None,
        policy=policy,
        rng=random.Random(42),
        on_connect=lambda ch: connected.set(),
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.run)
        await connected.wait()
        nursery.cancel_scope.cancel()
    rng = random.Random(42)
    expected = [round(policy.delay(n, rng), 6) for n in range(1, 5)]
    assert gaps(connector.calls) == pytest.approx(expected)
    for n, gap in enumerate(gaps(connector.calls), start=1):
        base = min(3 ** (n - 1), 30)
        assert 0.8 * base <= gap <= 1.2 * base


async def test_delay_resets_after_a_successful_connect(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # fail, fail, fail, connect (closed by the peer), fail, fail, connect
    connector = FlakyConnector([True, True, True, False, True, True, False])
    connects: list[StreamChannel] = []
    second = trio.Event()

    def on_connect(channel: StreamChannel) -> None:
        connects.append(channel)
        if len(connects) == 2:
            second.set()

    client = ReconnectingClient(
        connector,
        lambda ch: None,
        policy=RetryPolicy(initial_delay=1, max_delay=60, multiplier=2, jitter=0),
        on_connect=on_connect,
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.run)
        await trio.sleep(100)
        assert len(connects) == 1
        await connector.peers[0].aclose()  # the server goes away at t=100+7
        await second.wait()
        nursery.cancel_scope.cancel()
    # 1, 2, 4 before the first connect; after it the backoff starts over at 1: 1, 1, 2.
    assert gaps(connector.calls) == [1, 2, 4, pytest.approx(100 - 7 + 1, abs=1e-6), 1, 2]


async def test_hooks_run_once_per_connection(autojump_clock: trio.testing.MockClock) -> None:
    events: list[str] = []

    class Life(ChannelInboundHandler):
        def channel_active(self, ctx: HandlerContext) -> None:
            events.append(f"active {ctx.channel.id}")

        def channel_inactive(self, ctx: HandlerContext) -> None:
            events.append(f"inactive {ctx.channel.id}")

    def init(channel: StreamChannel) -> None:
        channel.pipeline.add_last(Life())  # a fresh, non-sharable handler per connection

    connector = FlakyConnector()
    client = ReconnectingClient(
        connector,
        init,
        policy=RetryPolicy(initial_delay=5, multiplier=1, jitter=0),
        on_connect=lambda ch: events.append(f"connect {ch.id}"),
        on_disconnect=lambda ch: events.append(f"disconnect {ch.id}"),
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.run)
        for _ in range(3):
            await trio.sleep(1)
            channel = client.channel
            assert channel is not None
            await channel.close()
            await trio.sleep(4.5)  # reconnects 5 s after the close
        await trio.sleep(1)
        nursery.cancel_scope.cancel()
    ids = sorted({int(e.split()[1]) for e in events})
    assert len(ids) == 4
    expected: list[str] = []
    for i in ids:
        expected += [f"active {i}", f"connect {i}", f"inactive {i}", f"disconnect {i}"]
    assert events == expected
    assert client.statistics().connects == 4


async def test_data_flows_on_each_connection(autojump_clock: trio.testing.MockClock) -> None:
    got: list[bytes] = []

    class Hello(ChannelInboundHandler):
        def channel_active(self, ctx: HandlerContext) -> None:
            ctx.write_and_flush(b"hello %d" % ctx.channel.id)

    connector = FlakyConnector()
    client = ReconnectingClient(
        connector,
        lambda ch: void(ch.pipeline.add_last(Hello())),
        policy=RetryPolicy(initial_delay=1, jitter=0),
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.run)
        for i in range(3):
            await trio.sleep(0.5)
            peer = connector.peers[i]
            got.append(bytes(await peer.receive_some()))
            await peer.aclose()
            await trio.sleep(1)
        nursery.cancel_scope.cancel()
    assert len(got) == 3 and all(g.startswith(b"hello ") for g in got)
    assert len(set(got)) == 3


async def test_max_attempts(autojump_clock: trio.testing.MockClock) -> None:
    connector = FlakyConnector(failures=100)
    client = ReconnectingClient(
        connector, lambda ch: None, policy=RetryPolicy(initial_delay=1, jitter=0)
    )
    start = trio.current_time()
    await client.run(max_attempts=3)
    assert len(connector.calls) == 3
    assert trio.current_time() - start == pytest.approx(3)  # no sleep after the last attempt
    assert client.statistics().failures == 3


async def test_connect_timeout_counts_as_failure(autojump_clock: trio.testing.MockClock) -> None:
    calls: list[float] = []

    async def black_hole() -> trio.abc.Stream:
        calls.append(trio.current_time())
        await trio.sleep_forever()
        raise AssertionError  # pragma: no cover

    client = ReconnectingClient(
        black_hole,
        lambda ch: None,
        policy=RetryPolicy(initial_delay=1, jitter=0, multiplier=1),
        connect_timeout=3,
    )
    await client.run(max_attempts=3)
    assert gaps(calls) == [4, 4]
    assert client.statistics().failures == 3


async def test_initializer_error_propagates_and_closes_the_stream(
    autojump_clock: trio.testing.MockClock,
) -> None:
    connector = FlakyConnector()

    def bad_init(channel: StreamChannel) -> None:
        raise RuntimeError("bug in initializer")

    client = ReconnectingClient(connector, bad_init)
    with pytest.raises(RuntimeError, match="bug in initializer"):
        await client.run()
    assert await connector.peers[0].receive_some() == b""


async def test_cancellation_closes_the_channel_and_calls_on_disconnect(
    autojump_clock: trio.testing.MockClock,
) -> None:
    disconnected: list[StreamChannel] = []
    connector = FlakyConnector()
    client = ReconnectingClient(connector, lambda ch: None, on_disconnect=disconnected.append)
    with trio.move_on_after(10):
        await client.run()
    assert len(disconnected) == 1
    assert not disconnected[0].is_open
    assert await connector.peers[0].receive_some() == b""
