"""The HA slave: connect to the master, verify, replay, report; reconnect forever."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import trio

from handlers import IdleStateHandler
from handlers.ha import (
    CommitLogReplayHandler,
    OffsetReporter,
    OffsetVerifier,
    TransferFrameDecoder,
    transfer_frame_decoder,
)
from hanet.boot import Connector, ReconnectingClient, RetryPolicy, tcp_connector
from hanet.channel import ChannelHandler, StreamChannel
from hanet.store import CommitLogStore

from ._config import BrokerConfig
from ._status import SlaveStatus

__all__ = ["HASlave"]

log = logging.getLogger("hanet.ha.slave")


class HASlave:
    """Replicate a master's commit log into ``store`` (RocketMQ's ``HAClient``).

    Each connection's pipeline: ``IdleStateHandler(reader_idle=housekeeping,
    writer_idle=heartbeat)`` -> transfer frame decoder -> ``TransferFrameDecoder`` ->
    ``OffsetVerifier`` -> ``CommitLogReplayHandler`` -> ``OffsetReporter`` -> the handlers
    ``extra_handlers()`` returns (metrics, logging, ... of one's own). Reconnects every
    ``reconnect_interval`` seconds, forever, inside the caller's trio run: every connection is
    a new channel in the same nursery, nothing of a closed one survives it.

    Args:
        store: the slave's store (opened with the SLAVE role).
        config: ``ha_master_address`` (unless ``connector`` is given) and the intervals.
        connector: opens the stream to the master (default: TCP to ``ha_master_address``).
        extra_handlers: called per connection; its handlers go at the end of the pipeline and
            see every applied :class:`handlers.ha.TransferFrame`.
    """

    def __init__(
        self,
        store: CommitLogStore,
        config: BrokerConfig,
        connector: Connector | None = None,
        extra_handlers: Callable[[], Sequence[ChannelHandler]] | None = None,
    ) -> None:
        self.store = store
        self.config = config
        if connector is None:
            host, port = config.ha_master_host_port
            connector = tcp_connector(host, port)
            self.master_address = f"{host}:{port}"
        else:
            self.master_address = config.ha_master_address or "(custom connector)"
        self._extra = extra_handlers
        self._last_reason: str | None = None
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
        pipeline.add_last(OffsetVerifier(self.store), "offset-verifier")
        pipeline.add_last(CommitLogReplayHandler(self.store), "replay")
        pipeline.add_last(OffsetReporter(self.store), "reporter")
        if self._extra is not None:
            for handler in self._extra():
                pipeline.add_last(handler)

    def _connected(self, channel: StreamChannel) -> None:
        log.info(
            "connected to master %s; reporting max offset %d",
            self.master_address,
            self.store.validated_offset,
        )

    def _disconnected(self, channel: StreamChannel) -> None:
        self._last_reason = channel.close_reason
        log.info(
            "disconnected from master %s (%s); max offset %d",
            self.master_address,
            channel.close_reason or "closed",
            self.store.max_offset,
        )

    async def run(
        self, *, task_status: trio.TaskStatus[HASlave] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Replicate until cancelled; reports itself at once (connecting goes on in the
        background)."""
        task_status.started(self)
        await self._client.run()

    @property
    def channel(self) -> StreamChannel | None:
        """The current connection to the master, if any."""
        return self._client.channel

    def status(self) -> SlaveStatus:
        stats = self._client.statistics()
        return SlaveStatus(
            master_address=self.master_address,
            connected=stats.connected,
            max_offset=self.store.max_offset,
            connects=stats.connects,
            attempts=stats.attempts,
            last_close_reason=self._last_reason,
        )
