"""RocketMQ's classic master/slave replication (HA), composed from hanet's handlers.

:class:`HAMaster` serves slaves from a commit log store and answers SYNC puts through
:class:`ReplicaWaiters`; :class:`HASlave` replicates a master into its own store and reconnects
forever, all in the caller's trio run. :class:`BrokerConfig` holds their settings with
RocketMQ's defaults. The broker service that puts a broker port in front of them is
:mod:`hanet.broker`. :class:`PushValidator` is the master's sans-IO judgement of which
commit log bytes it may push to a slave, from where.
"""

from ._config import BrokerConfig, BrokerRole
from ._epochs import (
    TERM_RETRY_INTERVAL,
    DivergencePolicy,
    EpochGate,
    EpochSource,
    SlaveDivergedError,
    format_epochs,
    record_master_term_later,
    start_master_term,
)
from ._master import HAMaster
from ._push import PushValidator
from ._slave import HASlave
from ._status import MasterStatus, SlaveConnectionStatus, SlaveStatus
from ._sync import ReplicaWaiters

__all__ = [
    "TERM_RETRY_INTERVAL",
    "BrokerConfig",
    "BrokerRole",
    "DivergencePolicy",
    "EpochGate",
    "EpochSource",
    "HAMaster",
    "HASlave",
    "MasterStatus",
    "PushValidator",
    "ReplicaWaiters",
    "SlaveConnectionStatus",
    "SlaveDivergedError",
    "SlaveStatus",
    "format_epochs",
    "record_master_term_later",
    "start_master_term",
]
