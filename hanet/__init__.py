"""hanet: Netty's handler pipeline on trio's structured concurrency.

Handlers are synchronous, sans-IO callbacks; a :class:`StreamChannel` drives a pipeline of them
over any trio stream; :func:`serve`, :func:`connect` and :class:`ReconnectingClient` start
channels inside the caller's nursery; :class:`hanet.testing.EmbeddedChannel` runs handlers with
no network at all.

The names below come from :mod:`hanet.channel` (the core) and :mod:`hanet.boot` (the
bootstraps) and are loaded on first use, so ``import hanet.store`` or ``import hanet.spark``
loads no networking code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hanet.lazy import lazy_exports

if TYPE_CHECKING:
    from hanet.boot import (
        ChannelInitializer,
        Connector,
        ReconnectingClient,
        ReconnectStatistics,
        RetryPolicy,
        Server,
        ServerStatistics,
        connect,
        run_channel,
        serve,
        serve_listeners,
        serve_on,
        tcp_connector,
    )
    from hanet.channel import (
        Channel,
        ChannelClosedError,
        ChannelConfig,
        ChannelDuplexHandler,
        ChannelFuture,
        ChannelGroup,
        ChannelGroupError,
        ChannelGroupFuture,
        ChannelHandler,
        ChannelInboundHandler,
        ChannelOutboundHandler,
        ChannelPipelineError,
        ChannelStatistics,
        HandlerContext,
        Pipeline,
        StreamChannel,
        TimerHandle,
        WaterMarks,
        WriteFuture,
    )
    from hanet.errors import HanetError

__all__ = [
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
    "serve_on",
    "tcp_connector",
]

_BOOT = (
    "ChannelInitializer",
    "Connector",
    "ReconnectStatistics",
    "ReconnectingClient",
    "RetryPolicy",
    "Server",
    "ServerStatistics",
    "connect",
    "run_channel",
    "serve",
    "serve_listeners",
    "serve_on",
    "tcp_connector",
)
_HOMES = {name: "hanet.boot" if name in _BOOT else "hanet.channel" for name in __all__}
_HOMES["HanetError"] = "hanet.errors"

__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
