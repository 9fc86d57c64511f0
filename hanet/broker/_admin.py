"""The admin requests of the broker port (RocketMQ 4.9.8's ``AdminBrokerProcessor``: what
``mqadmin`` and ``hanet admin`` send), served from the broker's store, topics, offsets and
consumer groups.

Served:

- GET_BROKER_RUNTIME_INFO (28): a ``KVTable`` of RocketMQ's runtime keys (version, put and
  get totals and rates, commit log offsets and disk use, earliest message time, ...).
- GET_TOPIC_STATS_INFO (202): each write queue's min and max offsets and last store time.
- GET_CONSUME_STATS (208): a group's broker and consumer offsets per queue (of one topic, or
  every topic it committed offsets of), as RocketMQ computes them.
- GET_CONSUMER_CONNECTION_LIST (203) / GET_PRODUCER_CONNECTION_LIST (204): a group's live
  members as their heartbeats named them (client id, address, language, version) and, for
  consumers, the group's subscriptions; a group without members answers CONSUMER_NOT_ONLINE
  (SYSTEM_ERROR for producers), as RocketMQ.
- UPDATE_AND_CREATE_TOPIC (17), DELETE_TOPIC_IN_BROKER (215): the topic table (the name server
  hears of it at once); a deleted topic's consume queue files are deleted too (the commit log
  keeps its records). A system topic or an illegal name is refused SYSTEM_ERROR.
- UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200), DELETE_SUBSCRIPTIONGROUP (207, its offsets too
  with ``removeOffset``): the groups' settings, in ``config/subscriptionGroup.json``.
- INVOKE_BROKER_TO_RESET_OFFSET (222): RocketMQ's ``Broker2Client.resetOffset``: per write
  queue the offset of the first message stored at or after the timestamp (without ``isForce``
  only where that is below the committed offset), sent as RESET_CONSUMER_CLIENT_OFFSET (220,
  oneway) to every live member's connection; no live member answers CONSUMER_NOT_ONLINE
  (``mqadmin`` then commits the offsets itself). Beyond 4.9.8, hanet also commits the new
  offsets at once and, until each queue's consumer pulls from its new offset (for at most
  :data:`RESET_HOLD` seconds), answers that group's pulls of the queue PULL_OFFSET_MOVED with
  the new offset as ``nextBeginOffset`` and drops its older commits: a client that ignores
  RESET_CONSUMER_CLIENT_OFFSET (npm ``ali-ons`` does) is moved too.
- GET_BROKER_CONFIG (26): the settings as ``key=value`` lines under RocketMQ's names.
  UPDATE_BROKER_CONFIG (25): only :data:`LIVE_SETTINGS` change on a running broker; any other
  key is refused NO_PERMISSION naming it (edit ``broker.conf`` and restart), nothing changed.

Modifications are refused on a slave (SYSTEM_ERROR, RocketMQ's remark). HEART_BEAT passes
through :meth:`BrokerAdmin.heart_beat` first, which notes each member's address, language,
version and subscriptions (the connection lists) and the producer groups.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from hanet.channel import HandlerContext
from hanet.errors import ConfigError
from hanet.ha import BrokerConfig
from hanet.protocol import (
    PERM_INHERIT,
    PERM_READ,
    PERM_WRITE,
    ROCKETMQ_VERSION,
    ConsumerConnection,
    ConsumeStats,
    CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    DeleteTopicRequestHeader,
    GetBrokerConfigResponseHeader,
    GetConsumerConnectionListRequestHeader,
    GetConsumeStatsRequestHeader,
    GetProducerConnectionListRequestHeader,
    GetTopicStatsInfoRequestHeader,
    HeartbeatData,
    KVTable,
    LanguageCode,
    MessageQueue,
    OffsetWrapper,
    ProducerConnection,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    RemotingCommand,
    RemotingHeaderError,
    RequestCode,
    RequestProcessor,
    ResetOffsetBody,
    ResetOffsetRequestHeader,
    ResponseCode,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
    TopicConfig,
    TopicOffset,
    TopicStatsTable,
    load_body,
    properties_to_text,
    reset_offset_body_for_c,
    text_to_properties,
)
from hanet.store import CommitLogStore
from hanet.store.lowlevel import topic_problem

from ._clients import MAX_PRODUCER_GROUPS, ClientInfo, ClientTable, client_language
from ._config_files import read_config_file, write_config_file
from ._connection import connection_of
from ._offsets import ConsumerOffsetsFull
from ._properties import _PROPERTIES, apply_properties
from ._slave_sync import SUBSCRIPTION_GROUPS_FILE
from ._topics import TopicTableFull

if TYPE_CHECKING:
    from ._port import BrokerPort

__all__ = [
    "LIVE_SETTINGS",
    "MAX_PRODUCER_GROUPS",
    "RESET_HOLD",
    "SYSTEM_TOPICS",
    "BrokerAdmin",
]

log = logging.getLogger("hanet.broker")

SYSTEM_TOPICS = frozenset(
    {
        "TBW102",
        "SCHEDULE_TOPIC_XXXX",
        "BenchmarkTest",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRACE_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
    }
)
"""Topics no admin may create or delete (RocketMQ's ``TopicValidator.SYSTEM_TOPIC_SET``; names
starting ``rmq_sys_`` too)."""

LIVE_SETTINGS = frozenset(
    {
        "slaveReadEnable",
        "whichBrokerWhenConsumeSlowly",
        "accessMessageInMemoryMaxRatio",
        "defaultTopicQueueNums",
        "registerNameServerPeriod",
    }
)
"""The settings UPDATE_BROKER_CONFIG changes on a running broker (the others are read once,
when the broker starts)."""

RESET_HOLD = 120.0
"""Seconds a reset offset waits for its queue's consumer to pull (see the module docstring)."""

_RW = PERM_READ | PERM_WRITE

_SLAVE_REFUSAL = (
    "Can't modify topic or subscription group from slave broker, "
    "please execute it from master broker."
)


def _system_topic(topic: str) -> bool:
    return topic in SYSTEM_TOPICS or topic.startswith("rmq_sys_")


def _setting_text(value: Any, convert: Any) -> str:
    """A setting's value as ``broker.conf`` writes it (durations in milliseconds)."""
    if value is None:
        return ""
    if getattr(convert, "__name__", "") == "_ms":
        return str(round(value * 1000))
    if isinstance(value, bool):
        return "true" if value else "false"
    if hasattr(value, "value") and not isinstance(value, int):
        return str(value.value)
    return str(value)


class BrokerAdmin:
    """The admin processors of a :class:`~hanet.broker.BrokerPort` (see the module
    docstring). The broker gives it its settings with :meth:`attach`."""

    def __init__(self, port: BrokerPort) -> None:
        self.port = port
        self.config: BrokerConfig | None = None
        """The broker's settings (None: a DLedger node's port, which has none)."""
        self.reconfigure: Callable[[BrokerConfig], None] | None = None
        """Applies changed live settings to the running broker."""
        self.broker_name = "broker-a"
        self.groups: dict[str, SubscriptionGroupConfig] = {}
        """Consumer group settings created or changed by UPDATE_AND_CREATE_SUBSCRIPTIONGROUP."""
        self.groups_path: Path | None = None
        self._groups_version = 0
        self.clients = ClientTable()
        """Who the clients are, as their heartbeats named them (the connection lists)."""
        self._resets: dict[tuple[str, str, int], tuple[int, float]] = {}
        self._started_ms = int(time.time() * 1000)
        self._config_version = 0
        self.resets_sent = 0
        """RESET_CONSUMER_CLIENT_OFFSET requests sent to consumers."""
        self.messages_got = 0
        """Messages served by pulls since the broker started."""
        self.wake_pulls: Callable[[str, int], None] | None = None
        """Answers the pulls held (long polling) on a topic's queue now: a reset queue's
        consumer hears of its new offset without waiting for its held pull to time out."""

    def attach(self, config: BrokerConfig, reconfigure: Callable[[BrokerConfig], None]) -> None:
        """Serve ``config``'s broker: its name, its settings (``reconfigure`` applies a live
        change) and the groups of ``config/subscriptionGroup.json`` (loaded now).

        Raises:
            ConfigFileError: the file and its ``.bak`` are unusable.
        """
        self.config = config
        self.reconfigure = reconfigure
        self.broker_name = config.broker_name
        self.groups_path = config.store_path_root_dir / SUBSCRIPTION_GROUPS_FILE
        wrapper = read_config_file(self.groups_path, _groups_of)
        if wrapper is not None:
            self.groups = dict(wrapper.groups)
            self._groups_version = wrapper.counter

    def processors(self) -> dict[int, RequestProcessor]:
        """Request code -> processor, for the broker port's table."""
        return {
            RequestCode.GET_BROKER_RUNTIME_INFO: self.get_broker_runtime_info,
            RequestCode.GET_TOPIC_STATS_INFO: self.get_topic_stats_info,
            RequestCode.GET_CONSUME_STATS: self.get_consume_stats,
            RequestCode.GET_CONSUMER_CONNECTION_LIST: self.get_consumer_connection_list,
            RequestCode.GET_PRODUCER_CONNECTION_LIST: self.get_producer_connection_list,
            RequestCode.UPDATE_AND_CREATE_TOPIC: self.update_and_create_topic,
            RequestCode.DELETE_TOPIC_IN_BROKER: self.delete_topic,
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: self.update_subscription_group,
            RequestCode.DELETE_SUBSCRIPTIONGROUP: self.delete_subscription_group,
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: self.reset_offset,
            RequestCode.GET_BROKER_CONFIG: self.get_broker_config,
            RequestCode.UPDATE_BROKER_CONFIG: self.update_broker_config,
        }

    @property
    def _store(self) -> CommitLogStore:
        return self.port.backend.store

    # -- clients ----------------------------------------------------------------------------

    def heart_beat(self, ctx: HandlerContext, request: RemotingCommand) -> RemotingCommand:
        """HEART_BEAT: note who the client is (the connection lists), then the port's own."""
        answer = self.port.heart_beat(ctx, request)
        if answer.code != ResponseCode.SUCCESS:
            return answer
        heartbeat = HeartbeatData.from_json(request.body)  # decoded by the port already
        now = trio.current_time()
        channel = connection_of(ctx)
        client = ClientInfo(
            heartbeat.client_id,
            channel.peer,
            client_language(request.language),
            request.version,
            channel,
            now,
        )
        self.clients.heard(heartbeat, client, self.port.backend.consumers.expiry)
        return answer

    def _members(self, group: str) -> list[ClientInfo]:
        """The live members of ``group`` (the consumer registry's), as their heartbeats named
        them."""
        return self.clients.consumers(group, self.port.backend.consumers.members(group))

    def get_consumer_connection_list(
        self, ctx: HandlerContext, request: RemotingCommand
    ) -> RemotingCommand:
        """GET_CONSUMER_CONNECTION_LIST: the group's live members and subscriptions."""
        header = GetConsumerConnectionListRequestHeader.from_fields(request.fields)
        group = header.consumer_group
        members = self._members(group)
        data = self.clients.subscription(group)
        if not members or data is None:
            return request.response(
                ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online"
            )
        body = ConsumerConnection(
            tuple(sorted(c.connection() for c in members)),
            {s.topic: s for s in data.subscription_data_set},
            data.consume_type,
            data.message_model,
            data.consume_from_where,
        )
        return request.response(body=body.encode())

    def get_producer_connection_list(
        self, ctx: HandlerContext, request: RemotingCommand
    ) -> RemotingCommand:
        """GET_PRODUCER_CONNECTION_LIST: the producer group's live members."""
        header = GetProducerConnectionListRequestHeader.from_fields(request.fields)
        members = self.clients.producers(
            header.producer_group, trio.current_time(), self.port.backend.consumers.expiry
        )
        if not members:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"the producer group[{header.producer_group}] not exist",
            )
        body = ProducerConnection(tuple(sorted(c.connection() for c in members)))
        return request.response(body=body.encode())

    # -- statistics ---------------------------------------------------------------------------

    def _last_store_time(self, topic: str, queue_id: int, offset: int) -> int:
        store = self._store
        entry = store.consume_queue_entry(topic, queue_id, offset)
        if entry is None:
            return 0
        try:
            return store.read_record(entry[0]).store_timestamp
        except (ValueError, IndexError, OSError, RuntimeError):
            return 0

    def get_topic_stats_info(
        self, ctx: HandlerContext, request: RemotingCommand
    ) -> RemotingCommand:
        """GET_TOPIC_STATS_INFO: each write queue's bounds and last store time."""
        header = GetTopicStatsInfoRequestHeader.from_fields(request.fields)
        topic = header.topic
        config = self.port.backend.topic_table.get(topic)
        if config is None:
            return request.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        store = self._store
        table = {}
        for queue_id in range(config.write_queue_nums):
            low = max(store.min_queue_offset(topic, queue_id), 0)
            high = max(store.max_queue_offset(topic, queue_id), 0)
            stamp = self._last_store_time(topic, queue_id, high - 1) if high > 0 else 0
            table[MessageQueue(topic, self.broker_name, queue_id)] = TopicOffset(low, high, stamp)
        return request.response(body=TopicStatsTable(table).encode())

    def consume_stats(self, group: str, topic: str | None = None) -> ConsumeStats:
        """``group``'s progress per queue (GET_CONSUME_STATS's body, as RocketMQ computes
        it)."""
        backend = self.port.backend
        offsets = backend.offsets.table()
        topics = [topic] if topic else sorted({t for t, g in offsets if g == group})
        data = self.clients.subscription(group)
        subscribed = {s.topic for s in data.subscription_data_set} if data is not None else set()
        live = bool(self._members(group))
        store = self._store
        table: dict[MessageQueue, OffsetWrapper] = {}
        for name in topics:
            config = backend.topic_table.get(name)
            if config is None:
                continue
            if live and subscribed and name not in subscribed:
                continue
            for queue_id in range(config.read_queue_nums):
                broker_offset = max(store.max_queue_offset(name, queue_id), 0)
                consumer_offset = max(backend.offsets.query(group, name, queue_id), 0)
                stamp = 0
                if consumer_offset > 0:
                    stamp = self._last_store_time(name, queue_id, consumer_offset - 1)
                table[MessageQueue(name, self.broker_name, queue_id)] = OffsetWrapper(
                    broker_offset, consumer_offset, stamp
                )
        return ConsumeStats(table, 0.0)

    def get_consume_stats(self, ctx: HandlerContext, request: RemotingCommand) -> RemotingCommand:
        """GET_CONSUME_STATS: the group's broker and consumer offsets per queue."""
        header = GetConsumeStatsRequestHeader.from_fields(request.fields)
        stats = self.consume_stats(header.consumer_group, header.topic)
        return request.response(body=stats.encode())

    def consumer_lag(self) -> Iterator[tuple[str, str, int, int, int]]:
        """``(group, topic, queue id, broker offset, consumer offset)`` of every committed
        offset (the Prometheus consumer lag)."""
        backend = self.port.backend
        store = self._store
        for (topic, group), queues in sorted(backend.offsets.table().items()):
            for queue_id, offset in sorted(queues.items()):
                high = max(store.max_queue_offset(topic, queue_id), 0)
                yield group, topic, queue_id, high, max(offset, 0)

    def runtime_info(self) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO's table (RocketMQ's keys, hanet's values: the put and get
        totals count since the broker started, the rates are their averages since then, the
        thread pool queues are 0: hanet has none)."""
        store = self._store
        stats = store.statistics()
        now_ms = int(time.time() * 1000)
        uptime = max((now_ms - self._started_ms) / 1000.0, 0.001)
        puts = stats.puts
        tps = f"{puts / uptime:.2f}"
        gets = self.messages_got
        get_tps = f"{gets / uptime:.2f}"
        earliest = 0
        if store.max_offset > store.min_offset:
            try:
                earliest = store.read_record(store.min_offset).store_timestamp
            except (ValueError, IndexError, OSError, RuntimeError):
                earliest = 0
        ratio = stats.disk_used_ratio
        seconds = int(uptime)
        info = {
            "brokerVersionDesc": "V4_9_8",
            "brokerVersion": str(ROCKETMQ_VERSION),
            "bootTimestamp": str(self._started_ms),
            "runtime": (
                f"[ {seconds // 86400} days, {seconds // 3600 % 24} hours, "
                f"{seconds // 60 % 60} minutes, {seconds % 60} seconds ]"
            ),
            "msgPutTotalTodayNow": str(puts),
            "msgPutTotalTodayMorning": "0",
            "msgPutTotalYesterdayMorning": "0",
            "msgGetTotalTodayNow": str(gets),
            "msgGetTotalTodayMorning": "0",
            "msgGetTotalYesterdayMorning": "0",
            "putTps": f"{tps} {tps} {tps}",
            "getTransferedTps": f"{get_tps} {get_tps} {get_tps}",
            "sendThreadPoolQueueSize": "0",
            "sendThreadPoolQueueHeadWaitTimeMills": "0",
            "pullThreadPoolQueueSize": "0",
            "pullThreadPoolQueueHeadWaitTimeMills": "0",
            "pageCacheLockTimeMills": "0",
            "commitLogMinOffset": str(store.min_offset),
            "commitLogMaxOffset": str(store.max_offset),
            "dispatchBehindBytes": str(max(store.max_offset - store.dispatched_offset, 0)),
            "remainHowManyDataToFlush": str(max(store.max_offset - store.flushed_offset, 0)),
            "earliestMessageTimeStamp": str(earliest),
            "startAcceptSendRequestTimeStamp": "0",
            "brokerRole": "SLAVE" if self.port.backend.is_slave else "MASTER",
        }
        if ratio is not None:
            info["commitLogDiskRatio"] = f"{ratio:.2f}"
        return info

    def get_broker_runtime_info(
        self, ctx: HandlerContext, request: RemotingCommand
    ) -> RemotingCommand:
        """GET_BROKER_RUNTIME_INFO: the runtime table (``KVTable``)."""
        return request.response(body=KVTable(self.runtime_info()).encode())

    # -- topics -------------------------------------------------------------------------------

    def _topic_refusal(self, topic: str) -> str | None:
        problem = topic_problem(topic)
        if problem is not None:
            return f"The specified topic is illegal: {problem}"
        if _system_topic(topic):
            return f"The topic[{topic}] is conflict with system topic."
        return None

    def update_and_create_topic(
        self, ctx: HandlerContext, request: RemotingCommand
    ) -> RemotingCommand:
        """UPDATE_AND_CREATE_TOPIC: create the topic or set its queues and permission (the
        name servers are told at once)."""
        if self.port.backend.is_slave:
            return request.response(ResponseCode.SYSTEM_ERROR, _SLAVE_REFUSAL)
        header = CreateTopicRequestHeader.from_fields(request.fields)
        refusal = self._topic_refusal(header.topic)
        if refusal is None:
            for what, queues in (
                ("readQueueNums", header.read_queue_nums),
                ("writeQueueNums", header.write_queue_nums),
            ):
                if not 1 <= queues <= 1024:
                    refusal = f"{what} {queues} is outside 1 to 1024"
            if header.perm & ~(PERM_READ | PERM_WRITE | PERM_INHERIT) or header.perm < 0:
                refusal = f"perm {header.perm} is not a combination of 2 (write) and 4 (read)"
        if refusal is not None:
            return request.response(ResponseCode.SYSTEM_ERROR, refusal)
        config = TopicConfig(
            header.topic,
            header.read_queue_nums,
            header.write_queue_nums,
            header.perm,
            topic_sys_flag=header.topic_sys_flag or 0,
            order=header.order,
        )
        try:
            self.port.backend.topic_table.update(config)
        except TopicTableFull as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        log.info("topic %s created or updated by %s", header.topic, connection_of(ctx).peer)
        return request.response()

    def set_topics(self) -> tuple[TopicConfig, ...]:
        """The topic configs a registration must carry as they are (read and write queues
        apart, a permission other than read and write, an order flag: what an admin sets);
        the others register by their queue count."""
        table = self.port.backend.topic_table
        configs = (table.get(name) for name in table.names())
        return tuple(
            c
            for c in configs
            if c is not None
            and (c.read_queue_nums != c.write_queue_nums or c.perm != _RW or c.order)
        )

    def delete_topic(self, ctx: HandlerContext, request: RemotingCommand) -> RemotingCommand | None:
        """DELETE_TOPIC_IN_BROKER: forget the topic and delete its consume queues (answered
        once they are gone)."""
        if self.port.backend.is_slave:
            return request.response(ResponseCode.SYSTEM_ERROR, _SLAVE_REFUSAL)
        header = DeleteTopicRequestHeader.from_fields(request.fields)
        refusal = self._topic_refusal(header.topic)
        if refusal is not None:
            return request.response(ResponseCode.SYSTEM_ERROR, refusal)
        self.port.backend.topic_table.delete(header.topic)
        log.info("topic %s deleted by %s", header.topic, connection_of(ctx).peer)
        ctx.spawn(self._delete_queues, ctx, request, header.topic)
        return None

    async def _delete_queues(
        self, ctx: HandlerContext, request: RemotingCommand, topic: str
    ) -> None:
        try:
            removed = await self._store.delete_topic_queues(topic)
        except OSError as exc:
            ctx.write_and_flush(request.response(ResponseCode.SYSTEM_ERROR, str(exc)))
            return
        log.info("topic %s: %d consume queues deleted", topic, removed)
        ctx.write_and_flush(request.response())

    # -- subscription groups ----------------------------------------------------------------

    def subscription_groups(self, known: SubscriptionGroupWrapper) -> SubscriptionGroupWrapper:
        """``known`` with the groups created or changed here (GET_ALL_SUBSCRIPTIONGROUP_CONFIG)."""
        if not self.groups:
            return known
        groups = {**known.groups, **self.groups}
        return SubscriptionGroupWrapper(groups, known.counter + self._groups_version)

    def _persist_groups(self) -> None:
        self._groups_version += 1
        if self.groups_path is None:
            return
        document = SubscriptionGroupWrapper(dict(self.groups), self._groups_version).document()
        try:  # a small file, written on an admin's request only
            write_config_file(self.groups_path, document)
        except OSError as exc:
            log.warning("cannot write %s: %s", self.groups_path, exc)

    def update_subscription_group(
        self, ctx: HandlerContext, request: RemotingCommand
    ) -> RemotingCommand:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: a group's settings (``SubscriptionGroupConfig``
        body)."""
        if self.port.backend.is_slave:
            return request.response(ResponseCode.SYSTEM_ERROR, _SLAVE_REFUSAL)
        config = SubscriptionGroupConfig.from_json(load_body(request.body, "subscription group"))
        if not config.group_name:
            return request.response(ResponseCode.SYSTEM_ERROR, "the group name is empty")
        if config.group_name not in self.groups and len(self.groups) >= MAX_PRODUCER_GROUPS:
            return request.response(ResponseCode.SYSTEM_ERROR, "too many subscription groups")
        self.groups[config.group_name] = config
        self._persist_groups()
        log.info("subscription group %s set by %s", config.group_name, connection_of(ctx).peer)
        return request.response()

    def delete_subscription_group(
        self, ctx: HandlerContext, request: RemotingCommand
    ) -> RemotingCommand:
        """DELETE_SUBSCRIPTIONGROUP: forget a group's settings (and offsets)."""
        if self.port.backend.is_slave:
            return request.response(ResponseCode.SYSTEM_ERROR, _SLAVE_REFUSAL)
        header = DeleteSubscriptionGroupRequestHeader.from_fields(request.fields)
        if self.groups.pop(header.group_name, None) is not None:
            self._persist_groups()
        if header.remove_offset:
            offsets = self.port.backend.offsets
            removed = offsets.remove_group(header.group_name)
            log.info("group %s: offsets of %d topics removed", header.group_name, removed)
        log.info("subscription group %s deleted", header.group_name)
        return request.response()

    # -- offset reset -------------------------------------------------------------------------

    def reset_offset(self, ctx: HandlerContext, request: RemotingCommand) -> RemotingCommand:
        """INVOKE_BROKER_TO_RESET_OFFSET (see the module docstring)."""
        header = ResetOffsetRequestHeader.from_fields(request.fields)
        backend = self.port.backend
        topic, group = header.topic, header.group
        config = backend.topic_table.get(topic)
        if config is None:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"[reset-offset] reset offset failed, no topic in this broker. topic={topic}",
            )
        store = self._store
        table: dict[MessageQueue, int] = {}
        for queue_id in range(config.write_queue_nums):
            committed = backend.offsets.query(group, topic, queue_id)
            if committed == -1:
                return request.response(
                    ResponseCode.SYSTEM_ERROR, f"THe consumer group <{group}> not exist"
                )
            if header.timestamp == -1:
                target = store.max_queue_offset(topic, queue_id)
            else:
                target = self.offset_by_time(store, topic, queue_id, header.timestamp)
            target = max(target, 0)
            chosen = target if header.is_force or target < committed else committed
            table[MessageQueue(topic, self.broker_name, queue_id)] = chosen
        members = [c for c in self._members(group) if c.is_open()]
        if not members:
            return request.response(
                ResponseCode.CONSUMER_NOT_ONLINE,
                f"Consumer not online, so can not reset offset, Group: {group} Topic: {topic} "
                f"Timestamp: {header.timestamp}",
            )
        encoded = ResetOffsetBody(table).encode()
        pushed_fields = ResetOffsetRequestHeader(
            topic, group, header.timestamp, header.is_force
        ).to_fields()
        # RocketMQ's broker writes the C++ clients' shape when the reset is asked in CPP
        c_shape = request.language in (LanguageCode.CPP, "CPP")
        pushed = reset_offset_body_for_c(table) if c_shape else encoded
        for member in members:
            push = RemotingCommand.request(
                RequestCode.RESET_CONSUMER_CLIENT_OFFSET, pushed_fields, pushed, oneway=True
            )
            channel = getattr(member.channel, "channel", None)
            if channel is not None:
                channel.pipeline.write_and_flush(push)
                self.resets_sent += 1
        deadline = trio.current_time() + RESET_HOLD
        for queue, offset in table.items():
            try:
                backend.offsets.commit(group, topic, queue.queue_id, offset)
            except ConsumerOffsetsFull as exc:
                log.warning("reset of %s@%s: %s", topic, group, exc)
            self._resets[(group, topic, queue.queue_id)] = (offset, deadline)
            if self.wake_pulls is not None:
                self.wake_pulls(topic, queue.queue_id)
        log.info(
            "[reset-offset] %s@%s to %d by %s: %d members told",
            topic,
            group,
            header.timestamp,
            connection_of(ctx).peer,
            len(members),
        )
        return request.response(body=encoded)

    @staticmethod
    def offset_by_time(store: CommitLogStore, topic: str, queue_id: int, timestamp: int) -> int:
        """The first queue offset whose message was stored at or after ``timestamp`` (the
        queue's max offset when none was)."""
        low = store.min_queue_offset(topic, queue_id)
        high = store.max_queue_offset(topic, queue_id)
        while low < high:
            middle = (low + high) // 2
            entry = store.consume_queue_entry(topic, queue_id, middle)
            stamp = -1 if entry is None else store.read_record(entry[0]).store_timestamp
            if stamp < timestamp:
                low = middle + 1
            else:
                high = middle
        return low

    def _pending(self, group: str, topic: str, queue_id: int) -> int | None:
        key = (group, topic, queue_id)
        held = self._resets.get(key)
        if held is None:
            return None
        offset, deadline = held
        if trio.current_time() > deadline:
            del self._resets[key]
            return None
        return offset

    def moved_pull(
        self, request: RemotingCommand, header: PullMessageRequestHeader
    ) -> RemotingCommand | None:
        """A pull of a queue whose offset was reset: PULL_OFFSET_MOVED to the new offset
        (once), or None to serve it as usual (a pull from the new offset ends the reset)."""
        if not self._resets:
            return None
        key = (header.consumer_group, header.topic, header.queue_id)
        offset = self._pending(*key)
        if offset is None:
            return None
        del self._resets[key]
        if header.queue_offset == offset:
            return None
        store = self._store
        fields = PullMessageResponseHeader(
            0,
            offset,
            store.min_queue_offset(header.topic, header.queue_id),
            store.max_queue_offset(header.topic, header.queue_id),
        ).to_fields()
        log.info(
            "%s@%s queue %d: pull at %d moved to the reset offset %d",
            header.topic,
            header.consumer_group,
            header.queue_id,
            header.queue_offset,
            offset,
        )
        return request.response(ResponseCode.PULL_OFFSET_MOVED, "OFFSET_RESET", fields)

    def stale_commit(self, group: str, topic: str, queue_id: int, offset: int) -> bool:
        """Whether a commit must be dropped: the queue's offset was reset and its consumer
        has not pulled from there yet."""
        if not self._resets:
            return False
        pending = self._pending(group, topic, queue_id)
        return pending is not None and pending != offset

    # -- settings -----------------------------------------------------------------------------

    def settings(self) -> list[tuple[str, str]]:
        """The broker's settings under RocketMQ's names, sorted."""
        config = self.config
        if config is None:
            return []
        out = []
        for key, (name, convert) in sorted(_PROPERTIES.items()):
            out.append((key, _setting_text(getattr(config, name), convert)))
        out.append(("brokerRole", config.broker_role.value))
        return sorted(dict(out).items())

    def get_broker_config(self, ctx: HandlerContext, request: RemotingCommand) -> RemotingCommand:
        """GET_BROKER_CONFIG: the settings as ``key=value`` lines, and their version."""
        version = f'{{"counter":{self._config_version},"timestamp":{self._started_ms}}}'
        return request.response(
            fields=GetBrokerConfigResponseHeader(version).to_fields(),
            body=properties_to_text(self.settings()),
        )

    def update_broker_config(
        self, ctx: HandlerContext, request: RemotingCommand
    ) -> RemotingCommand:
        """UPDATE_BROKER_CONFIG: change :data:`LIVE_SETTINGS`; anything else is refused."""
        config = self.config
        if config is None or self.reconfigure is None:
            return request.response(
                ResponseCode.SYSTEM_ERROR, "this broker's settings cannot change while it runs"
            )
        try:
            values = text_to_properties(request.body)
        except RemotingHeaderError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        if not values:
            return request.response()
        refused = sorted(key for key in values if key not in LIVE_SETTINGS)
        if refused:
            return request.response(
                ResponseCode.NO_PERMISSION,
                f"Can not update {', '.join(refused)} while the broker runs: only "
                f"{', '.join(sorted(LIVE_SETTINGS))} change live; edit broker.conf and restart "
                "for the others (nothing was changed)",
            )
        try:
            updated = apply_properties(values, config, "UPDATE_BROKER_CONFIG")
        except ConfigError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        self.reconfigure(updated)
        self.config = updated
        self._config_version += 1
        log.info(
            "settings changed by %s: %s",
            connection_of(ctx).peer,
            ", ".join(f"{k}={v}" for k, v in sorted(values.items())),
        )
        return request.response()


def _groups_of(document: dict[str, Any]) -> SubscriptionGroupWrapper:
    try:
        return SubscriptionGroupWrapper.from_json(json.dumps(document))
    except RemotingHeaderError as exc:
        raise ValueError(str(exc)) from exc
