"""The broker: a store, its replication role and the broker port, as one service.

:class:`Broker` runs a :class:`~hanet.store.CommitLogStore`, an :class:`~hanet.ha.HAMaster` or
:class:`~hanet.ha.HASlave`, and the broker port (the :mod:`hanet.protocol` request/response
protocol; one :class:`RequestHandler` per connection) in the caller's nursery.
:func:`load_properties` reads a RocketMQ ``broker.conf`` onto a :class:`~hanet.ha.BrokerConfig`.
:class:`ConsumerOffsets` keeps the consumer groups' committed offsets in
``<store>/config/consumerOffset.json`` (written with :func:`write_config_file`);
:class:`ConsumerRegistry` the live members of each consumer group (heartbeats, expiry).
:class:`DLedgerBrokerService` is the broker port of a Raft node (:mod:`hanet.dledger`); both
modes check puts with :func:`refusal` and serve pulls with :func:`serve_pull`.
"""

from ._admission import message_properties, refusal
from ._broker import Broker, BrokerAddresses
from ._config_files import ConfigFileError, read_config_file, write_config_file
from ._consumers import (
    CONSUMER_EXPIRY,
    MAX_CONSUMER_GROUPS,
    MAX_GROUP_MEMBERS,
    ConsumerRegistry,
    ConsumerRegistryFull,
)
from ._dledger import DEFAULT_QUEUES, DLedgerBrokerService
from ._handler import RequestHandler, RequestService
from ._metrics import BrokerMetrics, serve_metrics
from ._offsets import (
    MAX_OFFSET_ENTRIES,
    MAX_QUEUE_ID,
    MAX_QUEUE_OFFSETS,
    OFFSETS_FILE,
    ConsumerOffsets,
    ConsumerOffsetsFull,
)
from ._properties import apply_properties, load_properties, parse_properties
from ._pull import MAX_PULL_BYTES, serve_pull, suggest_broker_id
from ._registration import NameServerRegistrar
from ._slave_sync import TOPICS_FILE, SlaveSync, load_topics

__all__ = [
    "CONSUMER_EXPIRY",
    "DEFAULT_QUEUES",
    "MAX_CONSUMER_GROUPS",
    "MAX_GROUP_MEMBERS",
    "MAX_OFFSET_ENTRIES",
    "MAX_PULL_BYTES",
    "MAX_QUEUE_ID",
    "MAX_QUEUE_OFFSETS",
    "OFFSETS_FILE",
    "TOPICS_FILE",
    "Broker",
    "BrokerAddresses",
    "BrokerMetrics",
    "ConfigFileError",
    "ConsumerOffsets",
    "ConsumerOffsetsFull",
    "ConsumerRegistry",
    "ConsumerRegistryFull",
    "DLedgerBrokerService",
    "NameServerRegistrar",
    "RequestHandler",
    "RequestService",
    "SlaveSync",
    "apply_properties",
    "load_properties",
    "load_topics",
    "message_properties",
    "parse_properties",
    "read_config_file",
    "refusal",
    "serve_metrics",
    "serve_pull",
    "suggest_broker_id",
    "write_config_file",
]
