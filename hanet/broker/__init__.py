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
Beyond send and pull (each module's docstring says how the broker wires it):
:class:`PullHoldService` holds long-polling pulls; :func:`delay_rewrite` and
:class:`ScheduleService` delay messages on RocketMQ's 18 levels; :class:`SendBackProcessor`
serves CONSUMER_SEND_MSG_BACK (``%RETRY%`` and ``%DLQ%`` topics); :class:`QueueLocks` serves
LOCK/UNLOCK_BATCH_MQ for orderly consumers.
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
from ._hold import (
    CHECK_INTERVAL,
    MAX_HELD_PULLS,
    MAX_SUSPEND,
    HoldStatistics,
    PullHoldService,
    Repull,
)
from ._locks import LOCK_MAX_LIVE_TIME, MAX_LOCKS, LockStatistics, QueueLocks
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
from ._retry import (
    DLQ_GROUP_TOPIC_PREFIX,
    DLQ_QUEUE_NUMS,
    RETRY_GROUP_TOPIC_PREFIX,
    SendBackProcessor,
    dlq_topic,
    redirect_retry_send,
    retry_topic,
)
from ._schedule import (
    DELAY_LEVELS,
    DELAY_OFFSET_FILE,
    MAX_DELAY_LEVEL,
    MESSAGE_DELAY_LEVEL,
    RETRY_PAUSE,
    SCHEDULE_TOPIC,
    DelayLevelError,
    ScheduleService,
    ScheduleStatistics,
    decode_offsets,
    delay_level,
    delay_rewrite,
    encode_offsets,
    parse_delay_levels,
    timeup,
)
from ._slave_sync import TOPICS_FILE, SlaveSync, load_topics

__all__ = [
    "CHECK_INTERVAL",
    "CONSUMER_EXPIRY",
    "DEFAULT_QUEUES",
    "DELAY_LEVELS",
    "DELAY_OFFSET_FILE",
    "DLQ_GROUP_TOPIC_PREFIX",
    "DLQ_QUEUE_NUMS",
    "LOCK_MAX_LIVE_TIME",
    "MAX_CONSUMER_GROUPS",
    "MAX_DELAY_LEVEL",
    "MAX_GROUP_MEMBERS",
    "MAX_HELD_PULLS",
    "MAX_LOCKS",
    "MAX_OFFSET_ENTRIES",
    "MAX_PULL_BYTES",
    "MAX_QUEUE_ID",
    "MAX_QUEUE_OFFSETS",
    "MAX_SUSPEND",
    "MESSAGE_DELAY_LEVEL",
    "OFFSETS_FILE",
    "RETRY_GROUP_TOPIC_PREFIX",
    "RETRY_PAUSE",
    "SCHEDULE_TOPIC",
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
    "DelayLevelError",
    "HoldStatistics",
    "LockStatistics",
    "NameServerRegistrar",
    "PullHoldService",
    "QueueLocks",
    "Repull",
    "RequestHandler",
    "RequestService",
    "ScheduleService",
    "ScheduleStatistics",
    "SendBackProcessor",
    "SlaveSync",
    "apply_properties",
    "decode_offsets",
    "delay_level",
    "delay_rewrite",
    "dlq_topic",
    "encode_offsets",
    "load_properties",
    "load_topics",
    "message_properties",
    "parse_delay_levels",
    "parse_properties",
    "read_config_file",
    "redirect_retry_send",
    "refusal",
    "retry_topic",
    "serve_metrics",
    "serve_pull",
    "suggest_broker_id",
    "timeup",
    "write_config_file",
]
