"""The name server (``hanet namesrv``): brokers register, clients look up topic routes.

- :mod:`~hanet.namesrv._registry`: :class:`Registry`, the sans-IO table of live brokers
  (RocketMQ's ``RouteInfoManager``): registration, renewal, expiry, routes, the cluster, and
  the master a slave of the same broker name follows.
- :mod:`~hanet.namesrv._server`: :class:`NameServer`, the registry served on the broker port's
  framing (:mod:`hanet.protocol`), expiring registrations every 10 s.

Brokers register every 30 s; a registration not renewed for 120 s expires. The client side is
:class:`hanet.client.NameServerClient`.
"""

from ._registry import (
    DEFAULT_EXPIRE_AFTER,
    MASTER_ROLES,
    MAX_BROKERS,
    MAX_QUEUES,
    MAX_TOPICS,
    ROLES,
    RegisterAnswer,
    RegistrationError,
    Registry,
    registration_problem,
)
from ._server import DEFAULT_PORT, SCAN_INTERVAL, NameServer

__all__ = [
    "DEFAULT_EXPIRE_AFTER",
    "DEFAULT_PORT",
    "MASTER_ROLES",
    "MAX_BROKERS",
    "MAX_QUEUES",
    "MAX_TOPICS",
    "ROLES",
    "SCAN_INTERVAL",
    "NameServer",
    "RegisterAnswer",
    "RegistrationError",
    "Registry",
    "registration_problem",
]
