"""A client service that reconnects forever inside the caller's trio run."""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable

import attrs
import trio

from hanet.channel import ChannelConfig, StreamChannel

from ._bootstrap import ChannelInitializer, Connector

__all__ = ["ReconnectStatistics", "ReconnectingClient", "RetryPolicy"]

log = logging.getLogger("hanet.reconnect")


def _non_negative(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if value < 0:
        raise ValueError(f"{attribute.name} must be >= 0: {value}")


@attrs.frozen
class RetryPolicy:
    """How long to wait before each connection attempt.

    The n-th consecutive failure waits ``min(initial_delay * multiplier**n, max_delay)``, spread
    by +/- ``jitter`` (a fraction). After a connection that was established, the delay starts
    over from ``initial_delay`` (RocketMQ's slave waits a fixed 5 s: ``multiplier=1``).
    """

    initial_delay: float = attrs.field(default=1.0, validator=_non_negative)
    max_delay: float = attrs.field(default=30.0, validator=_non_negative)
    multiplier: float = attrs.field(default=2.0, validator=_non_negative)
    jitter: float = attrs.field(default=0.1, validator=_non_negative)

    def delay(self, failures: int, rng: random.Random) -> float:
        """The wait before the next attempt after ``failures`` consecutive failures."""
        base = min(self.initial_delay * self.multiplier ** max(failures - 1, 0), self.max_delay)
        if self.jitter:
            base *= 1.0 + rng.uniform(-self.jitter, self.jitter)
        return max(base, 0.0)


@attrs.frozen
class ReconnectStatistics:
    """Counters of a reconnecting client."""

    attempts: int
    connects: int
    failures: int
    connected: bool


@attrs.define(eq=False)
class ReconnectingClient:
    """Connect, run the channel until it closes, wait, connect again: forever.

    Every attempt is a new channel inside the same trio run and the caller's nursery: nothing of
    a closed connection survives it. ``on_connect(channel)`` runs when a channel is active and
    ``on_disconnect(channel)`` once it closed. Time comes from trio's clock, so tests drive it
    with ``MockClock``; jitter comes from ``rng``.

    Attributes:
        connector: opens the stream for each attempt (re-evaluated each time, so it may follow
            a master address learned from discovery).
        initializer: builds each new channel's pipeline.
        connect_timeout: seconds one attempt may take (a SYN to an unreachable host otherwise
            waits for the kernel's timeout, minutes); a timeout counts as a failed attempt.
    """

    connector: Connector
    initializer: ChannelInitializer
    policy: RetryPolicy = attrs.field(factory=RetryPolicy)
    config: ChannelConfig | None = None
    on_connect: Callable[[StreamChannel], None] | None = None
    on_disconnect: Callable[[StreamChannel], None] | None = None
    rng: random.Random = attrs.field(factory=random.Random)
    name: str = "client"
    connect_timeout: float = 10.0
    _attempts: int = 0
    _connects: int = 0
    _failures: int = 0
    _channel: StreamChannel | None = None

    @property
    def channel(self) -> StreamChannel | None:
        """The connected channel, if any."""
        return self._channel

    def statistics(self) -> ReconnectStatistics:
        return ReconnectStatistics(
            attempts=self._attempts,
            connects=self._connects,
            failures=self._failures,
            connected=self._channel is not None,
        )

    async def run(
        self,
        *,
        max_attempts: float = math.inf,
        task_status: trio.TaskStatus[ReconnectingClient] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Run until cancelled (or until ``max_attempts`` attempts were made and the last
        connection closed).

        Reports itself through ``task_status`` at once; wait for a connection with
        ``on_connect``.
        """
        task_status.started(self)
        consecutive_failures = 0
        while self._attempts < max_attempts:
            self._attempts += 1
            reason = "timed out"
            stream: trio.abc.Stream | None = None
            try:
                with trio.CancelScope(deadline=trio.current_time() + self.connect_timeout):
                    stream = await self.connector()
            except OSError as exc:
                reason = str(exc)
            if stream is None:
                self._failures += 1
                consecutive_failures += 1
                if self._attempts >= max_attempts:
                    break
                delay = self.policy.delay(consecutive_failures, self.rng)
                log.warning("%s: connect failed (%s); retrying in %.1f s", self.name, reason, delay)
                await trio.sleep(delay)
                continue
            consecutive_failures = 0
            self._connects += 1
            await self._run_one(stream)
            if self._attempts >= max_attempts:
                break
            delay = self.policy.delay(1, self.rng)
            log.warning("%s: disconnected; reconnecting in %.1f s", self.name, delay)
            await trio.sleep(delay)

    async def _run_one(self, stream: trio.abc.Stream) -> None:
        channel = StreamChannel(stream, self.config)
        try:
            self.initializer(channel)
        except BaseException:
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(stream)
            raise
        self._channel = channel
        connected = False

        def announce() -> None:
            nonlocal connected
            connected = True
            if self.on_connect is not None:
                self.on_connect(channel)

        try:
            await channel.run(on_active=announce)
        finally:
            self._channel = None
            if connected and self.on_disconnect is not None:
                self.on_disconnect(channel)
