"""Bootstraps: start channels inside the caller's nursery.

:func:`serve` accepts connections and runs a :class:`~hanet.channel.StreamChannel` per
connection; :func:`connect` / :func:`run_channel` open one; :class:`ReconnectingClient` keeps a
connection up with a :class:`RetryPolicy`, each attempt a new connection in the same trio run.
:class:`TlsConfig` and :class:`AllowList` decide who may connect to a server (TLS, mutual TLS,
source networks); a server holds at most ``max_connections`` connections
(:func:`default_max_connections`), closes idle ones after ``idle_timeout`` and backs off
when accept runs out of descriptors (:data:`CAPACITY_ERRNOS`), and caps the bytes its
connections hold in unfinished frames (``max_partial_bytes``, :func:`partial_budget`).
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
    serve_on,
    tcp_connector,
)
from ._limits import ACCEPT_BACKOFF, CAPACITY_ERRNOS, default_max_connections, partial_budget
from ._reconnect import ReconnectingClient, ReconnectStatistics, RetryPolicy
from ._security import (
    HANDSHAKE_TIMEOUT,
    AllowList,
    TlsConfig,
    TlsHandshakeError,
    certificate_names,
    open_tls_stream,
    peer_address,
    peer_identity,
    secure_stream,
)
from ._signals import STOP_SIGNALS, run_until_stopped

__all__ = [
    "ACCEPT_BACKOFF",
    "CAPACITY_ERRNOS",
    "HANDSHAKE_TIMEOUT",
    "STOP_SIGNALS",
    "AllowList",
    "ChannelInitializer",
    "Connector",
    "ReconnectStatistics",
    "ReconnectingClient",
    "RetryPolicy",
    "Server",
    "ServerStatistics",
    "TlsConfig",
    "TlsHandshakeError",
    "certificate_names",
    "connect",
    "default_max_connections",
    "open_tls_stream",
    "partial_budget",
    "peer_address",
    "peer_identity",
    "run_channel",
    "run_until_stopped",
    "secure_stream",
    "serve",
    "serve_listeners",
    "serve_on",
    "tcp_connector",
]
