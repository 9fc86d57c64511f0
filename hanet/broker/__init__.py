"""The broker service: a store, its replication role and the broker port, as one service.

:class:`Broker` runs a :class:`~hanet.store.CommitLogStore`, an :class:`~hanet.ha.HAMaster` or
:class:`~hanet.ha.HASlave`, and the broker port in the caller's nursery. The broker port speaks
RocketMQ 4.9.8's remoting protocol through :class:`BrokerPort`: one dispatch table keyed by
request code for every broker mode, over a :class:`BrokerBackend` (the classic
:class:`Broker`, or :class:`DLedgerBrokerService`, the broker port of a Raft node of
:mod:`hanet.dledger`). :func:`load_properties` reads a RocketMQ ``broker.conf`` onto a
:class:`~hanet.ha.BrokerConfig`. :class:`ConsumerOffsets` keeps the consumer groups' committed
offsets in ``<store>/config/consumerOffset.json`` (written with :func:`write_config_file`),
:class:`TopicTable` the topics in ``config/topics.json``; :class:`ConsumerRegistry` the live
members of each consumer group (heartbeats, expiry, their connections); :class:`SlaveSync` a
slave's copy of its master's metadata.

Beyond send and pull (each module's docstring says how the broker wires it):
:class:`PullHoldService` holds long-polling pulls (:attr:`BrokerPort.hold`);
:func:`delay_rewrite` (:attr:`BrokerPort.rewrite`) and :class:`ScheduleService` delay messages
on RocketMQ's 18 levels; :class:`SendBackProcessor` serves CONSUMER_SEND_MSG_BACK (``%RETRY%``
and ``%DLQ%`` topics); :class:`QueueLocks` serves LOCK/UNLOCK_BATCH_MQ for orderly consumers.
"""

from ._acl import ACL_FILE, BrokerAcl, acl_file_path
from ._admin import LIVE_SETTINGS, RESET_HOLD, SYSTEM_TOPICS, BrokerAdmin
from ._backend import BrokerBackend
from ._broker import Broker, BrokerAddresses
from ._clients import ClientInfo, ClientTable, client_language
from ._config_files import ConfigFileError, read_config_file, write_config_file
from ._connection import DEFAULT_MAX_IN_FLIGHT, BrokerConnection
from ._consumers import (
    CONSUMER_EXPIRY,
    MAX_CONSUMER_GROUPS,
    MAX_GROUP_MEMBERS,
    ConsumerRegistry,
    ConsumerRegistryFull,
)
from ._dledger import DEFAULT_QUEUES, DLedgerBrokerService, dledger_broker_id
from ._epochs import MAX_HISTORY_BODY, EpochService, fetch_epochs
from ._hold import (
    CHECK_INTERVAL,
    MAX_HELD_PULLS,
    MAX_SUSPEND,
    HoldStatistics,
    PullHoldService,
    Repull,
)
from ._locks import LOCK_MAX_LIVE_TIME, MAX_LOCKS, LockStatistics, QueueLocks
from ._log_read import MAX_READ_BYTES, SEEK_BYTES, read_log
from ._metrics import BrokerMetrics, ConsumerLagCollector, MetricsListenError, serve_metrics
from ._offsets import (
    MAX_OFFSET_ENTRIES,
    MAX_QUEUE_ID,
    MAX_QUEUE_OFFSETS,
    OFFSETS_FILE,
    ConsumerOffsets,
    ConsumerOffsetsFull,
)
from ._port import SERVER_CHANNEL_MAX_IDLE, BrokerPort, HoldHook, retry_topic
from ._properties import apply_properties, load_properties, parse_properties
from ._pull import (
    MAX_PULL_BYTES,
    MAX_PULL_MESSAGES,
    GetMessageStatus,
    PullResult,
    serve_pull,
    subscription_filter,
    suggest_broker_id,
)
from ._query import QUERY_ANSWER_BUDGET
from ._registration import NameServerRegistrar
from ._repair import RepairError, auto_repair, repair_damage, repair_store
from ._retry import (
    DLQ_GROUP_TOPIC_PREFIX,
    DLQ_QUEUE_NUMS,
    RETRY_GROUP_TOPIC_PREFIX,
    SendBackProcessor,
    dlq_topic,
    redirect_retry_send,
)
from ._schedule import (
    DELAY_LEVELS,
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
from ._send import NOT_ALLOWED_SEND_TOPICS, send_answer, stored_answer
from ._slave_sync import DELAY_OFFSETS_FILE, SUBSCRIPTION_GROUPS_FILE, SlaveSync
from ._topics import MAX_TOPICS, TOPICS_FILE, TopicTable, TopicTableFull

__all__ = [
    "ACL_FILE",
    "CHECK_INTERVAL",
    "CONSUMER_EXPIRY",
    "DEFAULT_MAX_IN_FLIGHT",
    "DEFAULT_QUEUES",
    "DELAY_LEVELS",
    "DELAY_OFFSETS_FILE",
    "DLQ_GROUP_TOPIC_PREFIX",
    "DLQ_QUEUE_NUMS",
    "LIVE_SETTINGS",
    "LOCK_MAX_LIVE_TIME",
    "MAX_CONSUMER_GROUPS",
    "MAX_DELAY_LEVEL",
    "MAX_GROUP_MEMBERS",
    "MAX_HELD_PULLS",
    "MAX_HISTORY_BODY",
    "MAX_LOCKS",
    "MAX_OFFSET_ENTRIES",
    "MAX_PULL_BYTES",
    "MAX_PULL_MESSAGES",
    "MAX_QUEUE_ID",
    "MAX_QUEUE_OFFSETS",
    "MAX_READ_BYTES",
    "MAX_SUSPEND",
    "MAX_TOPICS",
    "MESSAGE_DELAY_LEVEL",
    "NOT_ALLOWED_SEND_TOPICS",
    "OFFSETS_FILE",
    "QUERY_ANSWER_BUDGET",
    "RESET_HOLD",
    "RETRY_GROUP_TOPIC_PREFIX",
    "RETRY_PAUSE",
    "SCHEDULE_TOPIC",
    "SEEK_BYTES",
    "SERVER_CHANNEL_MAX_IDLE",
    "SUBSCRIPTION_GROUPS_FILE",
    "SYSTEM_TOPICS",
    "TOPICS_FILE",
    "Broker",
    "BrokerAcl",
    "BrokerAddresses",
    "BrokerAdmin",
    "BrokerBackend",
    "BrokerConnection",
    "BrokerMetrics",
    "BrokerPort",
    "ClientInfo",
    "ClientTable",
    "ConfigFileError",
    "ConsumerLagCollector",
    "ConsumerOffsets",
    "ConsumerOffsetsFull",
    "ConsumerRegistry",
    "ConsumerRegistryFull",
    "DLedgerBrokerService",
    "DelayLevelError",
    "EpochService",
    "GetMessageStatus",
    "HoldHook",
    "HoldStatistics",
    "LockStatistics",
    "MetricsListenError",
    "NameServerRegistrar",
    "PullHoldService",
    "PullResult",
    "QueueLocks",
    "RepairError",
    "Repull",
    "ScheduleService",
    "ScheduleStatistics",
    "SendBackProcessor",
    "SlaveSync",
    "TopicTable",
    "TopicTableFull",
    "acl_file_path",
    "apply_properties",
    "auto_repair",
    "client_language",
    "decode_offsets",
    "delay_level",
    "delay_rewrite",
    "dledger_broker_id",
    "dlq_topic",
    "encode_offsets",
    "fetch_epochs",
    "load_properties",
    "parse_delay_levels",
    "parse_properties",
    "read_config_file",
    "read_log",
    "redirect_retry_send",
    "repair_damage",
    "repair_store",
    "retry_topic",
    "send_answer",
    "serve_metrics",
    "serve_pull",
    "stored_answer",
    "subscription_filter",
    "suggest_broker_id",
    "timeup",
    "write_config_file",
]
