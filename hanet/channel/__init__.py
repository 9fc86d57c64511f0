"""The framework core: channels, pipelines, handler contexts and the handler base classes.

Handlers are synchronous, sans-IO callbacks (Netty's ``ChannelInboundHandler`` /
``ChannelOutboundHandler``) that a :class:`Pipeline` calls in order; a :class:`StreamChannel`
drives a pipeline over any trio stream (one reader task, one writer task draining the
coalescing :class:`~hanet.channel.WaterMarks`-bounded outbound buffer, timer tasks), and an
:class:`EmbeddedChannel` drives one with no network and a manual clock. Nothing here knows
about handlers, stores or services above it.
"""

from ._address import format_address, parse_address
from ._budget import (
    DEFAULT_HOLD_TIMEOUT,
    DEFAULT_MAX_PARTIAL_BYTES,
    DEFAULT_PARTIAL_RESERVE,
    MEMORY_BUDGET,
    BudgetAccount,
    BudgetStatistics,
    MemoryBudget,
)
from ._channel import Channel, ChannelConfig, ChannelStatistics
from ._context import HandlerContext
from ._embedded import EmbeddedChannel
from ._errors import ChannelClosedError, ChannelGroupError, ChannelPipelineError
from ._future import ChannelFuture, WriteFuture, combine_futures
from ._group import ChannelGroup, ChannelGroupFuture, ChannelMatcher
from ._handler import (
    ChannelDuplexHandler,
    ChannelHandler,
    ChannelInboundHandler,
    ChannelOutboundHandler,
)
from ._outbound import FileRegion, OutboundBuffer, ReadOnlyBuffer, WaterMarks, message_size
from ._pipeline import Pipeline
from ._stream_channel import StreamChannel
from ._timers import TimerHandle, TimerQueue

__all__ = [
    "DEFAULT_HOLD_TIMEOUT",
    "DEFAULT_MAX_PARTIAL_BYTES",
    "DEFAULT_PARTIAL_RESERVE",
    "MEMORY_BUDGET",
    "BudgetAccount",
    "BudgetStatistics",
    "Channel",
    "ChannelClosedError",
    "ChannelConfig",
    "ChannelDuplexHandler",
    "ChannelFuture",
    "ChannelGroup",
    "ChannelGroupError",
    "ChannelGroupFuture",
    "ChannelHandler",
    "ChannelInboundHandler",
    "ChannelMatcher",
    "ChannelOutboundHandler",
    "ChannelPipelineError",
    "ChannelStatistics",
    "EmbeddedChannel",
    "FileRegion",
    "HandlerContext",
    "MemoryBudget",
    "OutboundBuffer",
    "Pipeline",
    "ReadOnlyBuffer",
    "StreamChannel",
    "TimerHandle",
    "TimerQueue",
    "WaterMarks",
    "WriteFuture",
    "combine_futures",
    "format_address",
    "message_size",
    "parse_address",
]
