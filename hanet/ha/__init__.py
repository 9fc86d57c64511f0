"""RocketMQ's classic master/slave replication (HA), composed from hanet's handlers.

:class:`HAMaster` serves slaves from a commit log store and answers SYNC puts;
:class:`HASlave` replicates a master into its own store and reconnects forever, all in the
caller's trio run. :class:`Broker` composes a store, one of them and the broker port (the
request/response protocol of :mod:`hanet.client`).
"""

from ._broker import Broker, BrokerAddresses
from ._config import (
    BrokerConfig,
    BrokerRole,
    ConfigError,
    FlushDiskType,
    apply_properties,
    load_properties,
    parse_host_port,
)
from ._master import HAMaster
from ._slave import HASlave
from ._status import MasterStatus, SlaveConnectionStatus, SlaveStatus
from ._sync import ReplicaWaiters

__all__ = [
    "Broker",
    "BrokerAddresses",
    "BrokerConfig",
    "BrokerRole",
    "ConfigError",
    "FlushDiskType",
    "HAMaster",
    "HASlave",
    "MasterStatus",
    "ReplicaWaiters",
    "SlaveConnectionStatus",
    "SlaveStatus",
    "apply_properties",
    "load_properties",
    "parse_host_port",
]
