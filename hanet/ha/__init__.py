"""RocketMQ's classic master/slave replication (HA), composed from hanet's handlers.

:class:`HAMaster` serves slaves from a commit log store and answers SYNC puts;
:class:`HASlave` replicates a master into its own store and reconnects forever, all in the
caller's trio run.
"""

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
