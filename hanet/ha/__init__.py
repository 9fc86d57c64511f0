"""RocketMQ's classic master/slave replication (HA), composed from hanet's handlers.

:class:`HAMaster` serves slaves from a commit log store and answers SYNC puts through
:class:`ReplicaWaiters`; :class:`HASlave` replicates a master into its own store and reconnects
forever, all in the caller's trio run. :class:`BrokerConfig` holds their settings with
RocketMQ's defaults. The broker service that puts a broker port in front of them is
:mod:`hanet.broker`.
"""

from ._config import BrokerConfig, BrokerRole
from ._epochs import (
    DivergencePolicy,
    EpochGate,
    EpochSource,
    SlaveDivergedError,
    start_master_term,
)
from ._master import HAMaster
from ._slave import HASlave
from ._status import MasterStatus, SlaveConnectionStatus, SlaveStatus
from ._sync import ReplicaWaiters

__all__ = [
    "BrokerConfig",
    "BrokerRole",
    "DivergencePolicy",
    "EpochGate",
    "EpochSource",
    "HAMaster",
    "HASlave",
    "MasterStatus",
    "ReplicaWaiters",
    "SlaveConnectionStatus",
    "SlaveDivergedError",
    "SlaveStatus",
    "start_master_term",
]
