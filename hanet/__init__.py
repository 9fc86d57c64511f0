"""hanet: Netty's handler pipeline on trio's structured concurrency.

Handlers are synchronous, sans-IO callbacks; a :class:`StreamChannel` drives a pipeline of them
over any trio stream; :func:`serve`, :func:`connect` and :class:`ReconnectingClient` start
channels inside the caller's nursery; :class:`hanet.testing.EmbeddedChannel` runs handlers with
no network at all.
"""

from ._bootstrap import (
    ChannelInitializer,
    Connector,
    Server,
    ServerStatistics,
    connect,
    run_channel,
    serve,
    serve_listeners,
    tcp_connector,
)
from ._channel import Channel, ChannelConfig, ChannelStatistics
from ._context import HandlerContext
from ._errors import ChannelClosedError, ChannelPipelineError, HanetError
from ._future import WriteFuture
from ._handler import (
    ChannelDuplexHandler,
    ChannelHandler,
    ChannelInboundHandler,
    ChannelOutboundHandler,
)
from ._outbound import WaterMarks
from ._pipeline import Pipeline
from ._reconnect import ReconnectingClient, ReconnectStatistics, RetryPolicy
from ._stream_channel import StreamChannel
from ._timers import TimerHandle

__all__ = [
    "Channel",
    "ChannelClosedError",
    "ChannelConfig",
    "ChannelDuplexHandler",
    "ChannelHandler",
    "ChannelInboundHandler",
    "ChannelInitializer",
    "ChannelOutboundHandler",
    "ChannelPipelineError",
    "ChannelStatistics",
    "Connector",
    "HandlerContext",
    "HanetError",
    "Pipeline",
    "ReconnectStatistics",
    "ReconnectingClient",
    "RetryPolicy",
    "Server",
    "ServerStatistics",
    "StreamChannel",
    "TimerHandle",
    "WaterMarks",
    "WriteFuture",
    "connect",
    "run_channel",
    "serve",
    "serve_listeners",
    "tcp_connector",
]
