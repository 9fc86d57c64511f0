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

import importlib
from typing import TYPE_CHECKING, Any

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

_BOOT = frozenset(
    {
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
    }
)


def _home(name: str) -> str:
    if name == "HanetError":
        return "hanet.errors"
    return "hanet.boot" if name in _BOOT else "hanet.channel"


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'hanet' has no attribute {name!r}")
    value = getattr(importlib.import_module(_home(name)), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
