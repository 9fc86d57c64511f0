"""The broker: a store, its replication role and the broker port, as one service.

:class:`Broker` runs a :class:`~hanet.store.CommitLogStore`, an :class:`~hanet.ha.HAMaster` or
:class:`~hanet.ha.HASlave`, and the broker port (the :mod:`hanet.protocol` request/response
protocol; one :class:`RequestHandler` per connection) in the caller's nursery.
:func:`load_properties` reads a RocketMQ ``broker.conf`` onto a :class:`~hanet.ha.BrokerConfig`.
"""

from ._broker import MAX_PULL_BYTES, Broker, BrokerAddresses
from ._handler import RequestHandler, RequestService
from ._metrics import BrokerMetrics, serve_metrics
from ._properties import apply_properties, load_properties, parse_properties

__all__ = [
    "MAX_PULL_BYTES",
    "Broker",
    "BrokerAddresses",
    "BrokerMetrics",
    "RequestHandler",
    "RequestService",
    "apply_properties",
    "load_properties",
    "parse_properties",
    "serve_metrics",
]
