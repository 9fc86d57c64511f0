"""The name server (``hanet namesrv``): brokers register, clients look up topic routes.

It speaks RocketMQ 4.9.8's remoting protocol (:mod:`hanet.protocol`), so RocketMQ's own
brokers, clients and ``mqadmin`` use it as they use RocketMQ's name server.

- :mod:`~hanet.namesrv._registry`: :class:`Registry`, the sans-IO table of live brokers
  (RocketMQ's ``RouteInfoManager``): registration, renewal, expiry, the connection a broker
  registered over, routes, the cluster, topic lists, and the master a slave follows.
- :mod:`~hanet.namesrv._trust`: :class:`BrokerTrust`, whose a registration is (a certificate
  name under mutual TLS, a remote IP on plain TCP) and which certificates may register.
- :mod:`~hanet.namesrv._kvconfig`: :class:`KVConfig`, the key/value configuration.
- :mod:`~hanet.namesrv._server`: :class:`NameServer`, the registry served through a
  :class:`~hanet.protocol.RemotingDispatcher`, expiring registrations every 10 s.

Brokers register every 30 s; a registration not renewed for 120 s expires, and one whose
connection closes leaves at once. The client side is :class:`hanet.client.NameServerClient`.
"""

from ._kvconfig import MAX_KV_PAIRS, NAMESPACE_ORDER_TOPIC_CONFIG, KVConfig, KVConfigFullError
from ._registry import (
    DEFAULT_EXPIRE_AFTER,
    MAX_BROKERS,
    MAX_PER_IDENTITY,
    MAX_QUEUES,
    MAX_TOPICS,
    BrokerKey,
    LiveBroker,
    RegistrationError,
    RegistrationQuotaError,
    RegistrationRefused,
    Registry,
    registration_problem,
)
from ._server import DEFAULT_PORT, IDLE_TIMEOUT, SCAN_INTERVAL, TOPIC_NOT_EXIST_HINT, NameServer
from ._trust import BrokerTrust

__all__ = [
    "DEFAULT_EXPIRE_AFTER",
    "DEFAULT_PORT",
    "IDLE_TIMEOUT",
    "MAX_BROKERS",
    "MAX_KV_PAIRS",
    "MAX_PER_IDENTITY",
    "MAX_QUEUES",
    "MAX_TOPICS",
    "NAMESPACE_ORDER_TOPIC_CONFIG",
    "SCAN_INTERVAL",
    "TOPIC_NOT_EXIST_HINT",
    "BrokerKey",
    "BrokerTrust",
    "KVConfig",
    "KVConfigFullError",
    "LiveBroker",
    "NameServer",
    "RegistrationError",
    "RegistrationQuotaError",
    "RegistrationRefused",
    "Registry",
    "registration_problem",
]
