"""Handlers of RocketMQ's classic master/slave replication (HA) protocol.

Slave pipeline: ``IdleStateHandler(20, 5)`` -> :func:`transfer_frame_decoder` ->
:class:`TransferFrameDecoder` -> :class:`OffsetVerifier` -> :class:`CommitLogReplayHandler` ->
:class:`OffsetReporter`. Master pipeline (per slave): :class:`OffsetReportDecoder` ->
``IdleStateHandler(reader_idle=20)`` (after the decoder: only complete reports count as reads)
-> the master's ack handler, with :class:`TransferFrameEncoder` for what it pushes. They talk
to the commit log through :class:`ReplicaLog`.
"""

from ._codec import (
    HEADER_SIZE,
    REPORT_SIZE,
    OffsetReport,
    OffsetReportDecoder,
    TransferFrame,
    TransferFrameDecoder,
    TransferFrameEncoder,
    transfer_frame_decoder,
)
from ._replica import CommitLogReplayHandler, OffsetReporter, OffsetVerifier, ReplicaLog

__all__ = [
    "HEADER_SIZE",
    "REPORT_SIZE",
    "CommitLogReplayHandler",
    "OffsetReport",
    "OffsetReportDecoder",
    "OffsetReporter",
    "OffsetVerifier",
    "ReplicaLog",
    "TransferFrame",
    "TransferFrameDecoder",
    "TransferFrameEncoder",
    "transfer_frame_decoder",
]
