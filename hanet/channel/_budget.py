"""MemoryBudget: a cap on the bytes a server's connections hold in unfinished frames.

A decoder that cumulates a frame split across reads (:class:`~hanet.handlers.ByteToMessageDecoder`
and every decoder built on it) keeps those bytes until the frame is complete. One peer that
starts a large frame and never finishes it holds up to the frame limit; many such peers hold
that many times over. A :class:`MemoryBudget` shared by the connections of one port caps the
total:

- Each decoder reports, after each read, how many bytes its cumulation holds
  (:meth:`BudgetAccount.update`); a frame that completes, and the close of the connection,
  give them back.
- A connection whose cumulation grows while the port's total is over :attr:`MemoryBudget.limit`
  stops reading (:meth:`Channel.hold_reads`, whatever ``auto_read`` says; back-pressure: its
  bytes wait in the kernel, then in the peer) until the total is below the limit again. A
  connection holding at most :attr:`MemoryBudget.reserve` bytes never waits, so small frames
  split across reads go on whatever others hold.
- While connections wait, one that has held more than the reserve for
  :attr:`MemoryBudget.hold_timeout` seconds without completing a frame is closed with a logged
  reason, the longest-holding first, until the total is below the limit: a budget filled by
  frames that never finish is freed again.

The budget is sans-IO (it reads the channels' clocks and sets their timers). A server puts it in
each channel's :attr:`~hanet.channel.Channel.attributes` under :data:`MEMORY_BUDGET` before the
pipeline is built (``hanet.boot.serve`` does, ``max_partial_bytes``); decoders find it there.
The total may pass the limit by at most one read (``ChannelConfig.read_size``) plus the reserve
per connection: the bytes of a read are in memory before a decoder can account for them.
"""

from __future__ import annotations

import logging

import attrs

from ._channel import Channel
from ._timers import TimerHandle

__all__ = [
    "DEFAULT_HOLD_TIMEOUT",
    "DEFAULT_MAX_PARTIAL_BYTES",
    "DEFAULT_PARTIAL_RESERVE",
    "MEMORY_BUDGET",
    "BudgetAccount",
    "BudgetStatistics",
    "MemoryBudget",
]

log = logging.getLogger("hanet.budget")

MEMORY_BUDGET = "hanet.memory_budget"
"""The :attr:`Channel.attributes` key of the channel's :class:`MemoryBudget`."""

DEFAULT_MAX_PARTIAL_BYTES = 64 * 1024 * 1024
"""A server port's default budget for unfinished frames: 64 MiB."""

DEFAULT_HOLD_TIMEOUT = 10.0
"""Seconds an unfinished frame may hold budget while other connections wait for it."""

DEFAULT_PARTIAL_RESERVE = 64 * 1024
"""Bytes of an unfinished frame a connection may always hold without waiting."""


@attrs.frozen
class BudgetStatistics:
    """A snapshot of a budget's counters."""

    limit: int
    held: int
    """Bytes held in unfinished frames now."""
    peak: int
    """The most ever held at once."""
    holders: int
    """Connections holding bytes now."""
    waiting: int
    """Connections that stopped reading for the budget, now."""
    waits: int
    """Times a connection stopped reading for the budget."""
    evicted: int
    """Connections closed because their unfinished frame held the budget too long."""


class BudgetAccount:
    """One decoder's share of a :class:`MemoryBudget` (made by :meth:`MemoryBudget.account`)."""

    __slots__ = ("_timer", "budget", "channel", "closed", "held", "paused", "since")

    def __init__(self, budget: MemoryBudget, channel: Channel) -> None:
        self.budget = budget
        self.channel = channel
        self.held = 0
        self.since = 0.0  # when the current unfinished frame started holding
        self.paused = False
        self.closed = False
        self._timer: TimerHandle | None = None

    def update(self, held: int, progress: bool = False) -> None:
        """The decoder now holds ``held`` bytes (``progress``: it completed a frame since the
        last update). Stops the channel's reads when it grew past the budget."""
        if self.closed:
            return
        budget = self.budget
        before = self.held
        if held and (progress or not before):
            self.since = self.channel.now()
        if held == before:
            return
        self.held = held
        budget._add(self, held - before)
        if held > before:
            if held > budget.reserve and budget._held > budget.limit:
                self._pause()
        elif budget._waiting and budget._held < budget.limit:
            budget._resume_all()

    def close(self) -> None:
        """Give everything back (the channel closed or the decoder left). Idempotent."""
        if self.closed:
            return
        self.closed = True
        budget = self.budget
        if self.paused:
            budget._waiting.pop(self, None)
            self._resume()
        if self.held:
            held, self.held = self.held, 0
            budget._add(self, -held)
        if budget._waiting and budget._held < budget.limit:
            budget._resume_all()

    # -- waiting -----------------------------------------------------------------------------

    def _pause(self) -> None:
        if self.paused:
            return
        budget = self.budget
        self.paused = True
        budget._waiting[self] = None
        budget._waits += 1
        channel = self.channel
        channel.hold_reads(self)
        if not budget._exhausted:
            budget._exhausted = True
            log.warning(
                "%s: unfinished frames hold %d bytes, over the budget of %d "
                "(max_partial_bytes): connections that need more stop reading until they "
                "are freed; one holding it over %g s while others wait is closed",
                budget.name,
                budget._held,
                budget.limit,
                budget.hold_timeout,
            )
        self._timer = channel.schedule(budget.check_interval, self._check)

    def _resume(self) -> None:
        self.paused = False
        self._cancel_timer()
        self.channel.release_reads(self)

    def _check(self) -> None:
        self._timer = None
        if not self.paused:
            return
        budget = self.budget
        budget.enforce(self.channel.now())
        if self.paused:
            self._timer = self.channel.schedule(budget.check_interval, self._check)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _evict(self, now: float) -> None:
        budget = self.budget
        held, age = self.held, now - self.since
        budget._evicted += 1
        log.warning(
            "%s: %s: closing it: its unfinished frame held %d bytes for %.1f s while the "
            "port's budget of %d bytes for unfinished frames was exhausted",
            budget.name,
            self.channel,
            held,
            age,
            budget.limit,
        )
        self.close()
        self.channel.close_nowait(
            f"unfinished frame held {held} bytes for {age:.1f} s of an exhausted budget"
        )

    def __repr__(self) -> str:
        state = " waiting" if self.paused else ""
        return f"<BudgetAccount {self.channel} {self.held} bytes{state}>"


@attrs.define(eq=False)
class MemoryBudget:
    """The bytes all connections of a port may hold in unfinished frames (see the module).

    Attributes:
        limit: bytes (> 0) past which a connection that needs more stops reading.
        hold_timeout: seconds an unfinished frame may hold more than ``reserve`` bytes while
            others wait, before its connection is closed.
        reserve: bytes a connection may always hold without waiting.
        name: which port, in the log.
    """

    limit: int = DEFAULT_MAX_PARTIAL_BYTES
    hold_timeout: float = DEFAULT_HOLD_TIMEOUT
    reserve: int = DEFAULT_PARTIAL_RESERVE
    name: str = "server"
    _held: int = 0
    _peak: int = 0
    _holders: dict[BudgetAccount, None] = attrs.field(factory=dict)
    _waiting: dict[BudgetAccount, None] = attrs.field(factory=dict)
    _waits: int = 0
    _evicted: int = 0
    _exhausted: bool = False

    def __attrs_post_init__(self) -> None:
        if self.limit < 1:
            raise ValueError(f"a memory budget must be >= 1 byte: {self.limit}")
        if not self.hold_timeout > 0:
            raise ValueError(f"hold_timeout must be > 0: {self.hold_timeout}")
        if self.reserve < 0:
            raise ValueError(f"reserve must be >= 0: {self.reserve}")

    @property
    def held(self) -> int:
        """Bytes held in unfinished frames now."""
        return self._held

    @property
    def check_interval(self) -> float:
        """How often a waiting connection checks for frames held too long."""
        return self.hold_timeout / 4

    def account(self, channel: Channel) -> BudgetAccount:
        """A new share of this budget for a decoder of ``channel``."""
        return BudgetAccount(self, channel)

    def statistics(self) -> BudgetStatistics:
        return BudgetStatistics(
            limit=self.limit,
            held=self._held,
            peak=self._peak,
            holders=len(self._holders),
            waiting=len(self._waiting),
            waits=self._waits,
            evicted=self._evicted,
        )

    def enforce(self, now: float) -> int:
        """While connections wait and the total is over the limit: close the connection whose
        unfinished frame has held more than the reserve the longest, if that is over
        ``hold_timeout``. Returns how many were closed."""
        closed = 0
        while self._waiting and self._held > self.limit:
            stale = [
                a
                for a in self._holders
                if a.held > self.reserve and now - a.since >= self.hold_timeout
            ]
            if not stale:
                break
            min(stale, key=lambda a: a.since)._evict(now)
            closed += 1
        return closed

    def _add(self, account: BudgetAccount, delta: int) -> None:
        self._held += delta
        self._peak = max(self._peak, self._held)
        if account.held:
            self._holders[account] = None
        else:
            self._holders.pop(account, None)

    def _resume_all(self) -> None:
        waiting = list(self._waiting)
        self._waiting.clear()
        if self._exhausted:
            self._exhausted = False
            log.warning(
                "%s: unfinished frames hold %d bytes, under the budget of %d again: "
                "%d waiting connection(s) read again",
                self.name,
                self._held,
                self.limit,
                len(waiting),
            )
        for account in waiting:
            account._resume()
