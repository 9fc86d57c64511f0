"""Bootstraps: start channels inside the caller's nursery.

:func:`serve` accepts connections and runs a :class:`~hanet.channel.StreamChannel` per
connection; :func:`connect` / :func:`run_channel` open one; :class:`ReconnectingClient` keeps a
connection up with a :class:`RetryPolicy`, each attempt a new connection in the same trio run.
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
from ._reconnect import ReconnectingClient, ReconnectStatistics, RetryPolicy

__all__ = [
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
    "tcp_connector",
]
