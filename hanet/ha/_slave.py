"""The HA slave: connect to the master, verify, replay, report; reconnect forever."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import trio

from hanet.boot import Connector, ReconnectingClient, RetryPolicy, tcp_connector
from hanet.channel import ChannelHandler, StreamChannel, format_address, parse_address
from hanet.errors import ConfigError
from hanet.handlers import IdleStateHandler
from hanet.handlers.ha import (
    CommitLogReplayHandler,
    OffsetReporter,
    OffsetVerifier,
    TransferFrameDecoder,
    transfer_frame_decoder,
)
from hanet.store import CommitLogStore, StopReason
from hanet.store.lowlevel import RecordScanner, fsync_directory, list_mapped_files

from ._config import BrokerConfig
from ._epochs import DivergencePolicy, EpochGate, EpochSource
from ._status import SlaveStatus

__all__ = ["HASlave"]

log = logging.getLogger("hanet.ha.slave")

# The master closed right after our report, without a frame, this many times in a row with the
# same offset: it refuses that offset (a diverged slave, or the wrong master).
_REFUSALS_TO_REPORT = 2
# A refused slave reconnects every few seconds: its ERROR is repeated at most this often.
_REFUSAL_LOG_INTERVAL = 60.0


class HASlave:
    """Replicate a master's commit log into ``store`` (RocketMQ's ``HAClient``).

    Each connection's pipeline: ``IdleStateHandler(reader_idle=housekeeping,
    writer_idle=heartbeat)`` -> transfer frame decoder -> ``TransferFrameDecoder`` ->
    ``OffsetVerifier`` -> ``CommitLogReplayHandler`` -> ``OffsetReporter`` -> the handlers
    ``extra_handlers()`` returns (metrics, logging, ... of one's own). The replay handler only
    validates and copies (``append_raw(..., dispatch=False)``); the consume queues are built
    behind the reports by a dispatcher task that :meth:`run` starts, one batch per report
    (the store's ``dispatched_offset`` says how far; consumers of this slave see a message
    once it is dispatched). Reconnects every
    ``reconnect_interval`` seconds, forever, inside the caller's trio run: every connection is
    a new channel in the same nursery, nothing of a closed one survives it.

    Two dead ends are recognised:

    - The master closes the connection right after our report, without sending a single
      frame, twice in a row for the same offset: it refuses that offset (hanet's master does
      so when the slave is ahead of it, after the master lost or truncated data, or behind its
      oldest data; the classic protocol has no error message, so the master's log and status
      are the authoritative word). Logged as an ERROR (then once a minute) and shown in
      :meth:`status` (``diverged``, ``refused_offset``); the slave keeps reconnecting, so it
      follows again once the master has the data. The way out is :meth:`truncate_store` or
      :meth:`empty_store` (``hanet slave --truncate-to`` / ``--resync``).
    - The master's commit log files are not the size of this slave's (``--mapped-file-size``):
      a configuration error, so :meth:`run` stops with a :class:`hanet.errors.ConfigError`
      saying so instead of reconnecting.

    The master's address may be unknown at start (a slave that learns it from the name
    server): the slave then waits, connecting nowhere, until :meth:`set_master_address` gives
    it one; a later change drops the current connection and connects to the new address at
    once.

    Args:
        store: the slave's store (opened with the SLAVE role).
        config: ``ha_master_address`` (unless ``connector`` is given; None: wait for
            :meth:`set_master_address`) and the intervals.
        connector: opens the stream to the master (default: TCP to the master's address).
        extra_handlers: called per connection; its handlers go at the end of the pipeline and
            see every applied :class:`hanet.handlers.ha.TransferFrame`.
        on_connect: called each time a connection to the master is made (a broker syncs its
            metadata then).
        epoch_source: asks the master for its epoch history before each connection (see
            :class:`EpochGate`; None: no epoch check, as a RocketMQ 4.9.8 slave).
    """

    def __init__(
        self,
        store: CommitLogStore,
        config: BrokerConfig,
        connector: Connector | None = None,
        extra_handlers: Callable[[], Sequence[ChannelHandler]] | None = None,
        on_connect: Callable[[], None] | None = None,
        epoch_source: EpochSource | None = None,
    ) -> None:
        self.store = store
        self.config = config
        self._tls = config.client_tls()
        self._fixed_connector = connector is not None
        self.master_address: str | None
        """The master's HA address (``host:port``), None while unknown."""
        if connector is None:
            if config.ha_master_address:
                self.master_address = format_address(config.ha_master_host_port)
            else:
                self.master_address = None
            connector = self._connect_to_master
        else:
            self.master_address = config.ha_master_address or "(custom connector)"
        self.epochs: EpochGate | None = None
        """The epoch check before each connection (None without an ``epoch_source``)."""
        if epoch_source is not None:
            self.epochs = EpochGate(
                store, epoch_source, DivergencePolicy(config.ha_divergence), self.truncate_store
            )
            connector = self._gated(connector, self.epochs)
        self._on_connect = on_connect
        self._address_known = trio.Event()
        self._client_scope: trio.CancelScope | None = None
        self._extra = extra_handlers
        self._last_reason: str | None = None
        self._verifier: OffsetVerifier | None = None
        self._reporter: OffsetReporter | None = None
        self._refused_offset: int | None = None
        self._refusals = 0
        self._refusal_logged: float | None = None
        self._fatal: str | None = None
        self._cancel: trio.CancelScope | None = None
        self._dispatch_wanted: trio.Event | None = None  # set while the dispatcher runs
        self._client = ReconnectingClient(
            connector,
            self.initialize,
            policy=RetryPolicy(
                initial_delay=config.reconnect_interval,
                max_delay=config.reconnect_interval,
                multiplier=1.0,
                jitter=0.0,
            ),
            on_connect=self._connected,
            on_disconnect=self._disconnected,
            name=f"slave of {self.master_address}",
        )

    async def _connect_to_master(self) -> trio.abc.Stream:
        address = self.master_address
        assert address is not None  # run() waits until it is known
        host, port = parse_address(address)
        return await tcp_connector(host, port, tls=self._tls)()

    @staticmethod
    def _gated(connector: Connector, gate: EpochGate) -> Connector:
        async def connect() -> trio.abc.Stream:
            await gate.check()  # refuses (an OSError) or truncates before any HA byte
            return await connector()

        return connect

    def set_master_address(self, address: str) -> bool:
        """Follow the master at ``address`` (``host:port`` of its HA port) from now on; returns
        whether it changed. A change drops the current connection and connects to the new
        address at once.

        Raises:
            ConfigError: ``address`` is not ``host:port``.
            RuntimeError: the slave was given its own connector.
        """
        if self._fixed_connector:
            raise RuntimeError("this slave connects through its own connector")
        address = format_address(parse_address(address))
        if address == self.master_address:
            return False
        log.info("master HA address: %s -> %s", self.master_address or "(unknown)", address)
        self.master_address = address
        self._client.name = f"slave of {address}"
        self._refused_offset, self._refusals = None, 0
        if self._client_scope is not None:
            self._client_scope.cancel()
        self._address_known.set()
        return True

    def initialize(self, channel: StreamChannel) -> None:
        """Build one connection's pipeline (the channel initializer)."""
        config = self.config
        pipeline = channel.pipeline
        pipeline.add_last(
            IdleStateHandler(
                reader_idle=config.ha_housekeeping_interval,
                writer_idle=config.ha_send_heartbeat_interval,
            ),
            "idle",
        )
        pipeline.add_last(transfer_frame_decoder(config.ha_transfer_batch_size), "frame-decoder")
        pipeline.add_last(TransferFrameDecoder(), "transfer-decoder")
        self._verifier = OffsetVerifier(self.store)
        self._reporter = OffsetReporter(self.store, on_report=self._reported)
        pipeline.add_last(self._verifier, "offset-verifier")
        replay = CommitLogReplayHandler(
            self.store,
            file_size=self.store.config.mapped_file_size,
            on_file_size_mismatch=self._stop,
            defer_dispatch=True,
        )
        pipeline.add_last(replay, "replay")
        pipeline.add_last(self._reporter, "reporter")
        if self._extra is not None:
            for handler in self._extra():
                pipeline.add_last(handler)

    def _reported(self) -> None:
        """After each report: wake the dispatcher (or, without one, dispatch now)."""
        if self.epochs is not None:
            self.epochs.advance()
        wanted = self._dispatch_wanted
        if wanted is not None:
            wanted.set()
        elif not self.store.closed:
            self.store.dispatch()

    async def _dispatcher(self) -> None:
        """Dispatch the records appended since the last report into the consume queues, in
        one batch each time a report went out (RocketMQ's ReputMessageService): validation,
        the copy into the commit log and the report come first, off this path."""
        store = self.store
        self._dispatch_wanted = trio.Event()
        try:
            while True:
                await self._dispatch_wanted.wait()
                # One scheduling round: the writer sends the report before we dispatch.
                await trio.lowlevel.checkpoint()
                self._dispatch_wanted = trio.Event()  # reports from now on wake us again
                if not store.closed:
                    store.dispatch()
        finally:
            self._dispatch_wanted = None
            if not store.closed:
                store.dispatch()  # what the last reports left

    def _connected(self, channel: StreamChannel) -> None:
        log.info(
            "connected to master %s; reporting max offset %d",
            self.master_address,
            self.store.validated_offset,
        )
        if self._on_connect is not None:
            self._on_connect()

    def _disconnected(self, channel: StreamChannel) -> None:
        reason = channel.close_reason or "closed"
        self._last_reason = channel.close_reason
        log.info(
            "disconnected from master %s (%s); max offset %d",
            self.master_address,
            reason,
            self.store.max_offset,
        )
        self._check_refusal(reason)

    def _check_refusal(self, reason: str) -> None:
        """Count the connections the master closed right after our report, without a frame."""
        verifier, reporter = self._verifier, self._reporter
        reported = None if reporter is None else reporter.last_offset
        by_master = reason.startswith(("peer closed", "connection lost"))
        if verifier is None or verifier.frames or reported is None or not by_master:
            self._refused_offset, self._refusals = None, 0
            return
        if reported == self._refused_offset:
            self._refusals += 1
        else:
            self._refused_offset, self._refusals = reported, 1
        if self._refusals < _REFUSALS_TO_REPORT:
            return
        now = trio.current_time()
        if self._refusals == _REFUSALS_TO_REPORT or (
            self._refusal_logged is not None and now - self._refusal_logged >= _REFUSAL_LOG_INTERVAL
        ):
            self._refusal_logged = now
            log.error(
                "master %s closed the connection right after our report of offset %d, %d times "
                "in a row, without sending anything: it refuses that offset. Is this slave ahead "
                "of the master (the master lost or truncated data), behind its oldest data, or "
                "connected to the wrong master? The master's log and status say which, with its "
                "offsets. If this slave is ahead, it holds data the master lost: keep it (make "
                "this slave the master, or give the master its commit log) unless that data was "
                "never acknowledged; only then, to follow the master, run `hanet slave "
                "--truncate-to OFFSET` (the master's max offset, if the master took no puts since "
                "it lost data) or `hanet slave --resync` (both throw data away)",
                self.master_address,
                reported,
                self._refusals,
            )

    def _stop(self, reason: str) -> None:
        """Stop for good (a configuration error): :meth:`run` raises it as a ConfigError."""
        if self._fatal is None:
            self._fatal = reason
        if self._cancel is not None:
            self._cancel.cancel()

    async def run(
        self, *, task_status: trio.TaskStatus[HASlave] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Replicate until cancelled; reports itself at once (connecting goes on in the
        background).

        Raises:
            ConfigError: the master's commit log files are not the size of this slave's; the
                message says what was seen (also in :meth:`status` as ``error``).
        """
        task_status.started(self)
        with trio.CancelScope() as scope:
            self._cancel = scope
            if self._fatal is None:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._dispatcher)
                    await self._follow()
        self._cancel = None
        if self._fatal is not None:
            log.error("slave of %s stopped: %s", self.master_address, self._fatal)
            raise ConfigError(self._fatal)

    async def _follow(self) -> None:
        """Replicate from the master's current address; start over when it changes."""
        while True:
            if self.master_address is None:
                log.info("slave: waiting for the master's HA address (from the name server)")
                self._address_known = trio.Event()
                await self._address_known.wait()
                continue
            with trio.CancelScope() as self._client_scope:
                await self._client.run()
            self._client_scope = None

    @property
    def channel(self) -> StreamChannel | None:
        """The current connection to the master, if any."""
        return self._client.channel

    def status(self) -> SlaveStatus:
        stats = self._client.statistics()
        return SlaveStatus(
            master_address=self.master_address or "",
            connected=stats.connected,
            max_offset=self.store.max_offset,
            connects=stats.connects,
            attempts=stats.attempts,
            last_close_reason=self._last_reason,
            diverged=self._refusals >= _REFUSALS_TO_REPORT,
            refused_offset=self._refused_offset if self._refusals else None,
            refusals=self._refusals,
            error=self._fatal,
            epoch_diverged_at=None if self.epochs is None else self.epochs.diverged_at,
            epoch_check=None if self.epochs is None else self.epochs.note,
        )

    # -- the operator's way out of a divergence ------------------------------------------------

    @staticmethod
    def truncate_store(store: CommitLogStore, offset: int) -> str:
        """Make ``offset`` the end of a slave's commit log (``hanet slave --truncate-to``), so
        that it follows a master whose log ends there; returns what was done, in one line.

        ``offset`` must be a record boundary of the slave's log: its end, a file start, the
        start of a record or of a file's blank tail. Truncating to 0 empties the store
        (:meth:`empty_store`). Only right when the master's log is a prefix of the slave's
        (the master lost or cut its tail and took no puts since): the protocol never compares
        the bytes before the offset a slave reports.

        Raises:
            ValueError: ``offset`` is not a record boundary inside the slave's data.
        """
        low, high = store.min_offset, store.max_offset
        if offset == 0:
            return HASlave.empty_store(store)
        if offset > high:
            raise ValueError(
                f"cannot truncate to {offset}: this slave's commit log ends at {high} already"
            )
        if offset < low:
            raise ValueError(
                f"cannot truncate to {offset}: this slave's commit log starts at {low} "
                "(use --resync to start over)"
            )
        if offset == high:
            return f"the commit log already ends at {offset}: nothing to truncate"
        problem = HASlave._boundary_problem(store, offset)
        if problem is not None:
            raise ValueError(f"cannot truncate to {offset}: {problem}")
        aside = keep_aside(store, offset)
        store.truncate_to(offset)
        return (
            f"truncated the commit log from {high} to {offset} ({high - offset} bytes cut, kept "
            f"in {aside}); replication resumes from there"
        )

    @staticmethod
    def _boundary_problem(store: CommitLogStore, offset: int) -> str | None:
        size = store.config.mapped_file_size
        start = max(offset - offset % size, store.min_offset)
        if offset == start:
            return None
        data = bytearray()
        while start + len(data) < offset:
            chunk = store.read(start + len(data), offset - start - len(data))
            if not chunk:  # pragma: no cover - offset is inside the data
                break
            data += chunk
        scanner = RecordScanner(bytes(data), base_offset=start, check_physical_offset=True)
        for _ in scanner:
            pass
        stop = scanner.stop
        reached = start + scanner.position
        if reached == offset and stop is not None and stop.reason is StopReason.END:
            return None
        if stop is not None and stop.reason is StopReason.BLANK and stop.offset == offset:
            return None  # pragma: no cover - a blank is only seen past the offset
        if stop is not None and stop.reason is StopReason.INCOMPLETE:
            return f"it is inside the record at {reached}, not a record boundary"
        return f"it is not a record boundary (the records from {start} stop at {reached})"

    @staticmethod
    def empty_store(store: CommitLogStore) -> str:
        """Drop a slave's whole commit log and consume queues (``hanet slave --resync``): it
        starts over as a new slave (the master's last file, or all of it with ``full_sync``);
        returns what was done, in one line. Close and reopen the store before replicating
        into it."""
        low, high = store.min_offset, store.max_offset
        if not store.commit_log.files:
            return "the commit log is empty already: a full sync follows"
        aside = keep_aside(store, low)
        store.truncate_to(low)  # drops every consume queue entry
        store.commit_log.delete_all()
        return (
            f"deleted the commit log [{low}, {high}) ({high - low} bytes, kept in {aside}) and "
            "its consume queues: the slave starts over as a new one"
        )


_COPY_CHUNK = 1024 * 1024  # a file's tail is copied aside in pieces, not read whole


def keep_aside(store: CommitLogStore, offset: int) -> Path:
    """Keep the commit log bytes from ``offset`` on before a truncation drops them, into
    ``<store>/cut/<time>-<offset>/`` (named as in ``commitlog/``): files wholly past it are
    hard-linked (no copy), the written part of the file holding ``offset`` is copied from there
    (``<its name>.from-<offset>``: it is zeroed in place, a link would see that). A truncation
    on the operator's word is then undoable by hand: nothing acknowledged is thrown away for
    good. Returns the directory."""
    directory = store.root / "cut" / f"{time.strftime('%Y%m%dT%H%M%S')}-{offset}"
    directory.mkdir(parents=True, exist_ok=True)
    size = store.config.mapped_file_size
    for start, path in list_mapped_files(store.root / "commitlog"):
        if start > offset:  # deleted by the truncation: a link keeps it
            os.link(path, directory / path.name)
        elif start + size > offset:  # zeroed in place from the offset on: a copy
            left = max(min(start + size, store.max_offset) - offset, 0)
            with (
                path.open("rb") as source,
                (directory / f"{path.name}.from-{offset}").open("wb") as target,
            ):
                source.seek(offset - start)
                while left and (chunk := source.read(min(left, _COPY_CHUNK))):
                    target.write(chunk)
                    left -= len(chunk)
                target.flush()
                os.fsync(target.fileno())  # on disk before the truncation zeroes the original
    fsync_directory(directory)
    return directory
