"""The broker port: RocketMQ 4.9.8's remoting requests, one dispatch table for every broker
mode (a classic master or slave, a DLedger node).

Each connection's pipeline::

    frame-decoder -> codec -> connection (BrokerConnection) -> dispatch (RemotingDispatcher)

:class:`BrokerPort` builds the table (:attr:`BrokerPort.processors`, request code ->
processor) over a :class:`BrokerBackend`, the few things that differ between the modes: how
a send is stored (a classic broker writes its store at once and waits for the flush or the
slaves as its role says; a DLedger leader appends through Raft) and who refuses sends (a
slave, a DLedger follower). Everything else (pulls, offsets, consumer groups, the metadata a
slave copies, the status) is served the same way from the backend's store, offsets and
registry; queue locks (LOCK/UNLOCK_BATCH_MQ) by the port's :class:`QueueLocks`. Other
services add their processors to the table (:meth:`BrokerPort.register`: retries, delay
offsets, metrics) and hooks: :attr:`BrokerPort.rewrite` (a send's messages before they are
stored: delayed messages) and :attr:`BrokerPort.hold` (a PULL_MESSAGE with the suspend flag
that found nothing: long polling).

Sends (``_send.py``; SEND_MESSAGE 10, SEND_MESSAGE_V2 310, SEND_BATCH_MESSAGE 320) are checked
before anything is stored: the topic's name (SYSTEM_ERROR as RocketMQ), system topics no
producer may send to (NO_PERMISSION), the queue id against the topic's write queues
(SYSTEM_ERROR), the body and properties sizes (MESSAGE_ILLEGAL); a topic not known yet is
created with the producer's ``defaultTopicQueueNums`` queues, at most ``defaultTopicQueueNums``
of the broker (RocketMQ's ``autoCreateTopicEnable``). A batch is stored whole or not at all.
The answer carries the offset message id (comma-separated for a batch), the queue id and the
queue offset; a store that is waited for answers FLUSH_DISK_TIMEOUT (10), SLAVE_NOT_AVAILABLE
(11) or FLUSH_SLAVE_TIMEOUT (12) with the same fields (the message is stored either way).

Pulls answer RocketMQ's codes: SUCCESS (remark FOUND) with the records as stored as the body,
PULL_NOT_FOUND (19), PULL_RETRY_IMMEDIATELY (20: no message of the subscription's tags in
the range, or a slave asked past its data) and PULL_OFFSET_MOVED (21), always with
``suggestWhichBrokerId``, ``nextBeginOffset``, ``minOffset`` and ``maxOffset``. A commit
offset carried in a pull (``sysFlag`` bit 0x1) is recorded first, on slaves too.

Puts that must wait (``_connection.py``; SYNC_FLUSH, SYNC_MASTER) queue per connection in
arrival order, which is
also their order in the commit log; one task per connection settles them: it waits for the
oldest, then answers every later one already covered by the flushed / replicated offset
without waiting again. A connection with ``max_in_flight`` puts waiting, or whose answers
the client does not read, is not read from until that drains.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence

from hanet.channel import HandlerContext, StreamChannel
from hanet.protocol import (
    MAX_FRAME_LENGTH,
    PERM_READ,
    ConsumerListBody,
    ConsumerOffsetSerializeWrapper,
    GetConsumerListByGroupRequestHeader,
    GetEarliestMsgStoretimeRequestHeader,
    GetEarliestMsgStoretimeResponseHeader,
    GetMaxOffsetRequestHeader,
    GetMaxOffsetResponseHeader,
    GetMinOffsetRequestHeader,
    GetMinOffsetResponseHeader,
    HanetRequestCode,
    HeartbeatData,
    NotifyConsumerIdsChangedRequestHeader,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    RemotingCommand,
    RemotingDispatcher,
    RemotingHeaderError,
    RequestCode,
    RequestGuard,
    RequestProcessor,
    ResponseCode,
    SearchOffsetRequestHeader,
    SearchOffsetResponseHeader,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    ViewMessageRequestHeader,
    remoting_pipeline,
)
from hanet.store import CommitLogStore, Message, PutResult, PutStatus, StoreClosedError, StoreError

from ._admin import BrokerAdmin
from ._backend import BrokerBackend
from ._connection import BrokerConnection, connection_of
from ._consumers import ConsumerRegistry, ConsumerRegistryFull
from ._epochs import EpochService
from ._locks import QueueLocks
from ._log_read import read_log
from ._offsets import ConsumerOffsetsFull
from ._pull import GetMessageStatus, PullResult, serve_pull, subscription_filter
from ._query import query_message
from ._send import Sends
from ._topics import TopicTableFull, retry_topic

__all__ = [
    "SERVER_CHANNEL_MAX_IDLE",
    "BrokerPort",
    "HoldHook",
    "default_subscription_groups",
    "retry_topic",
]

log = logging.getLogger("hanet.broker")

_EMPTY = frozenset({GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, GetMessageStatus.NO_MESSAGE_IN_QUEUE})

SERVER_CHANNEL_MAX_IDLE = 120.0
"""Seconds a broker port connection may read nothing before it is closed (RocketMQ's
``serverChannelMaxIdleTimeSeconds``); clients heartbeat every 30 s or less."""

HoldHook = Callable[[HandlerContext, RemotingCommand, PullMessageRequestHeader, PullResult], bool]
"""Takes a PULL_MESSAGE with the suspend flag that found nothing (long polling); returns True
when it will answer the request itself later, False to have it answered now."""


class BrokerPort:
    """The broker port of a broker mode: its dispatch table and each connection's pipeline.

    Args:
        backend: the broker mode (see :class:`BrokerBackend`).
        max_frame_length: the largest frame accepted (16 MiB as RocketMQ).

    A message body is checked against the store's ``max_message_size``.
    """

    def __init__(
        self,
        backend: BrokerBackend,
        *,
        max_frame_length: int = MAX_FRAME_LENGTH,
    ) -> None:
        self.backend = backend
        self.max_frame_length = max_frame_length
        self.rewrite: Callable[[Message], Message] | None = None
        """Applied to each message of a send after its checks, before it is stored (the
        delay service turns a ``DELAY`` message into a scheduled one)."""
        self.hold: HoldHook | None = None
        """Takes a suspended PULL_MESSAGE that found nothing (long polling; None: such a
        pull is answered at once)."""
        self.sends = Sends(self)
        """The send processors."""
        self.locks = QueueLocks()
        """The consumer groups' queue locks (LOCK_BATCH_MQ / UNLOCK_BATCH_MQ: orderly
        consumers)."""
        self.notifications = 0
        """NOTIFY_CONSUMER_IDS_CHANGED requests sent."""
        self.admin = BrokerAdmin(self)
        """The admin requests (``mqadmin``'s; see :mod:`hanet.broker._admin`)."""
        self.epochs = EpochService(backend)
        """HANET_EPOCHS, and the slaves whose epochs diverged (the master's status)."""
        self.processors: dict[int, RequestProcessor] = {
            RequestCode.SEND_MESSAGE: self.sends.send_message,
            RequestCode.SEND_MESSAGE_V2: self.sends.send_message,
            RequestCode.SEND_BATCH_MESSAGE: self.sends.send_message,
            RequestCode.PULL_MESSAGE: self.pull_message,
            RequestCode.QUERY_CONSUMER_OFFSET: self.query_consumer_offset,
            RequestCode.UPDATE_CONSUMER_OFFSET: self.update_consumer_offset,
            RequestCode.GET_MAX_OFFSET: self.get_max_offset,
            RequestCode.GET_MIN_OFFSET: self.get_min_offset,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: self.search_offset_by_timestamp,
            RequestCode.GET_EARLIEST_MSG_STORETIME: self.get_earliest_msg_storetime,
            RequestCode.VIEW_MESSAGE_BY_ID: self.view_message_by_id,
            RequestCode.QUERY_MESSAGE: self.query_message,
            RequestCode.HEART_BEAT: self.admin.heart_beat,
            RequestCode.UNREGISTER_CLIENT: self.unregister_client,
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: self.get_consumer_list_by_group,
            RequestCode.GET_ALL_TOPIC_CONFIG: self.get_all_topic_config,
            RequestCode.GET_ALL_CONSUMER_OFFSET: self.get_all_consumer_offset,
            RequestCode.GET_ALL_DELAY_OFFSET: self.get_all_delay_offset,
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self.get_all_subscription_group,
            RequestCode.LOCK_BATCH_MQ: self.locks.lock_batch_mq,
            RequestCode.UNLOCK_BATCH_MQ: self.locks.unlock_batch_mq,
            HanetRequestCode.HANET_STATUS: self.hanet_status,
            HanetRequestCode.HANET_READ_LOG: lambda ctx, req: read_log(self.backend.store, req),
            HanetRequestCode.HANET_EPOCHS: self.epochs.serve,
        }
        """Request code -> processor: the one table every connection of the port uses."""
        self.processors.update(self.admin.processors())
        self._dispatcher = RemotingDispatcher(self.processors, port="the broker port")

    def answer_send(
        self,
        ctx: HandlerContext,
        request: RemotingCommand,
        results: Sequence[PutResult],
        queue_id: int,
        status: PutStatus,
        started: float,
    ) -> None:
        """Write a send's answer (not for a oneway send) and count it."""
        self.sends.answer_send(ctx, request, results, queue_id, status, started)

    def register(self, code: int, processor: RequestProcessor) -> None:
        """Serve ``code`` with ``processor`` (another service's requests: retries, locks)."""
        self.processors[int(code)] = processor

    def set_guard(self, guard: RequestGuard | None) -> None:
        """Check every request with ``guard`` before its processor (the ACL)."""
        self._dispatcher.guard = guard

    def initialize(self, channel: StreamChannel) -> None:
        """The pipeline of a broker port connection."""
        pipeline = channel.pipeline
        for name, handler in remoting_pipeline(self.max_frame_length):
            pipeline.add_last(handler, name)
        pipeline.add_last(BrokerConnection(self, channel), "connection")
        pipeline.add_last(self._dispatcher, "dispatch")

    # -- consumer groups --------------------------------------------------------------------

    def connection_closed(self, connection: BrokerConnection) -> None:
        """A connection closed: its consumers leave their groups, whose other members are
        told (RocketMQ's ``ClientHousekeepingService``)."""
        for group in self.backend.consumers.drop_channel(connection):
            log.info("group %s: the members on %s left (closed)", group, connection.peer)
            self.notify_group(group)

    def housekeeping(self) -> None:
        """Drop the consumers not heard from in time and tell their groups (call every
        few seconds)."""
        for group in self.backend.consumers.expire():
            log.info("group %s: members expired", group)
            self.notify_group(group)

    def notify_group(self, group: str) -> None:
        """Send NOTIFY_CONSUMER_IDS_CHANGED (oneway) to each live member of ``group``."""
        fields = NotifyConsumerIdsChangedRequestHeader(group).to_fields()
        for member in self.backend.consumers.channels(group):
            if isinstance(member, BrokerConnection) and member.channel.is_open:
                request = RemotingCommand.request(
                    RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, fields, oneway=True
                )
                member.channel.pipeline.write_and_flush(request)
                self.notifications += 1

    # -- sends ------------------------------------------------------------------------------

    # -- pulls ------------------------------------------------------------------------------

    def pull_message(self, ctx: HandlerContext, request: RemotingCommand) -> RemotingCommand | None:
        """PULL_MESSAGE: the records from the queue offset, the next offset, the queue's
        bounds and the member to pull from next; a commit offset carried in the pull is
        recorded first."""
        header = PullMessageRequestHeader.from_fields(request.fields)
        return self.serve_pull(ctx, request, header, allow_suspend=True)

    def serve_pull(
        self,
        ctx: HandlerContext,
        request: RemotingCommand,
        header: PullMessageRequestHeader,
        *,
        allow_suspend: bool,
    ) -> RemotingCommand | None:
        """Serve a decoded pull (the hold service calls this again, ``allow_suspend``
        False, when it wakes a held pull). None: the pull was handed to :attr:`hold`."""
        backend = self.backend
        topic = header.topic
        config = backend.topic_table.get(topic)
        if config is None:
            store_queues = backend.store.queues()
            if not any(t == topic for t, _ in store_queues):
                return request.response(
                    ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!"
                )
        elif not config.perm & PERM_READ:  # made write-only by an admin
            return request.response(
                ResponseCode.NO_PERMISSION, f"the topic[{topic}] pulling message is forbidden"
            )
        elif not 0 <= header.queue_id < max(config.read_queue_nums, 1):
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"queueId[{header.queue_id}] is illegal, topic:[{topic}] "
                f"topicConfig.readQueueNums:[{config.read_queue_nums}] "
                f"consumer:[{connection_of(ctx).peer}]",
            )
        # a queue whose offset an admin reset (INVOKE_BROKER_TO_RESET_OFFSET)
        moved = self.admin.moved_pull(request, header)
        if moved is not None:
            return moved
        if allow_suspend and header.has_commit_offset:
            self._commit(header.consumer_group, topic, header.queue_id, header.commit_offset)
        tags = None
        if header.expression_type in (None, "TAG"):
            tags = subscription_filter(header.subscription)
        try:
            result = serve_pull(
                backend.store,
                topic,
                header.queue_id,
                header.queue_offset,
                header.max_msg_nums,
                tags=tags,
                suggest=backend.suggest,
                joined=True,  # the answer's body: the one copy
            )
        except StoreError as exc:
            # A record that fails its checks is never served: answer, keep the connection.
            log.warning("pull of %s queue %d failed: %s", topic, header.queue_id, exc)
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        status = result.status
        fields = PullMessageResponseHeader(
            result.suggested, result.next_offset, result.min_offset, result.max_offset
        ).to_fields()
        if status is GetMessageStatus.FOUND:
            self.admin.messages_got += result.count  # GET_BROKER_RUNTIME_INFO's
            return request.response(ResponseCode.SUCCESS, "FOUND", fields, result.body)
        if status is GetMessageStatus.NO_MATCHED_MESSAGE:
            code = ResponseCode.PULL_RETRY_IMMEDIATELY
        elif status in (
            GetMessageStatus.NO_MATCHED_LOGIC_QUEUE,
            GetMessageStatus.NO_MESSAGE_IN_QUEUE,
        ):
            code = (
                ResponseCode.PULL_OFFSET_MOVED
                if header.queue_offset != 0
                else ResponseCode.PULL_NOT_FOUND
            )
        elif status is GetMessageStatus.OFFSET_OVERFLOW_ONE:
            code = ResponseCode.PULL_NOT_FOUND
        else:  # OFFSET_TOO_SMALL, OFFSET_OVERFLOW_BADLY
            code = ResponseCode.PULL_OFFSET_MOVED
        if code == ResponseCode.PULL_OFFSET_MOVED and backend.is_slave:
            # A slave may just be behind its master: the consumer retries, keeping its offset.
            code = ResponseCode.PULL_RETRY_IMMEDIATELY
        if (
            code == ResponseCode.PULL_NOT_FOUND
            and allow_suspend
            and header.suspend
            and self.hold is not None
            and self.hold(ctx, request, header, result)
        ):
            return None  # the hold service answers when a message arrives or time is up
        return request.response(code, status.value, fields)

    # -- offsets ----------------------------------------------------------------------------

    def _commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        if self.admin.stale_commit(group, topic, queue_id, offset):
            return  # the queue's offset was reset; its consumer has not pulled from there yet
        try:
            self.backend.offsets.commit(group, topic, queue_id, offset)
        except ConsumerOffsetsFull as exc:
            raise RemotingHeaderError(f"offset of group {group} not committed: {exc}") from None

    def query_consumer_offset(
        self, ctx: HandlerContext, request: RemotingCommand
    ) -> RemotingCommand:
        """QUERY_CONSUMER_OFFSET: the committed offset; for a group with none, 0 when the
        queue still starts at 0 and its first message is still in memory (as 4.9.8's
        ``ConsumerManageProcessor``), else QUERY_NOT_FOUND."""
        header = QueryConsumerOffsetRequestHeader.from_fields(request.fields)
        backend = self.backend
        offset = backend.offsets.query(header.consumer_group, header.topic, header.queue_id)
        if offset < 0:
            store = backend.store
            low = store.min_queue_offset(header.topic, header.queue_id)
            if low <= 0 and not self._first_on_disk(store, header.topic, header.queue_id):
                offset = 0
        if offset < 0:
            return request.response(
                ResponseCode.QUERY_NOT_FOUND,
                "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first",
            )
        fields = QueryConsumerOffsetResponseHeader(offset).to_fields()
        return request.response(ResponseCode.SUCCESS, None, fields)

    def _first_on_disk(self, store: CommitLogStore, topic: str, queue_id: int) -> bool:
        entry = store.consume_queue_entry(topic, queue_id, 0)
        if entry is None:
            return False
        return store.max_offset - entry[0] > self.backend.in_memory_limit()

    def update_consumer_offset(
        self, ctx: HandlerContext, request: RemotingCommand
    ) -> RemotingCommand:
        """UPDATE_CONSUMER_OFFSET (often oneway): record a group's offset of a queue (on
        masters and slaves alike: consumers commit to a slave while the master is down)."""
        header = UpdateConsumerOffsetRequestHeader.from_fields(request.fields)
        self._commit(header.consumer_group, header.topic, header.queue_id, header.commit_offset)
        return request.response(ResponseCode.SUCCESS)

    def get_max_offset(self, ctx: HandlerContext, request: RemotingCommand) -> RemotingCommand:
        """GET_MAX_OFFSET: the queue offset after the queue's last message (0: none)."""
        header = GetMaxOffsetRequestHeader.from_fields(request.fields)
        offset = self.backend.store.max_queue_offset(header.topic, header.queue_id)
        return request.response(fields=GetMaxOffsetResponseHeader(offset).to_fields())

    def get_min_offset(self, ctx: HandlerContext, request: RemotingCommand) -> RemotingCommand:
        """GET_MIN_OFFSET: the queue offset of the queue's first message still held."""
        header = GetMinOffsetRequestHeader.from_fields(request.fields)
        offset = self.backend.store.min_queue_offset(header.topic, header.queue_id)
        return request.response(fields=GetMinOffsetResponseHeader(offset).to_fields())

    def _store_time(self, store: CommitLogStore, topic: str, queue_id: int, offset: int) -> int:
        entry = store.consume_queue_entry(topic, queue_id, offset)
        if entry is None:
            return -1
        return store.read_record(entry[0]).store_timestamp

    def search_offset_by_timestamp(
        self, ctx: HandlerContext, request: RemotingCommand
    ) -> RemotingCommand:
        """SEARCH_OFFSET_BY_TIMESTAMP: the first queue offset whose message was stored at or
        after ``timestamp`` (the queue's max offset when none was; a binary search)."""
        header = SearchOffsetRequestHeader.from_fields(request.fields)
        store = self.backend.store
        low = store.min_queue_offset(header.topic, header.queue_id)
        high = store.max_queue_offset(header.topic, header.queue_id)
        while low < high:
            middle = (low + high) // 2
            if self._store_time(store, header.topic, header.queue_id, middle) < header.timestamp:
                low = middle + 1
            else:
                high = middle
        return request.response(fields=SearchOffsetResponseHeader(low).to_fields())

    def get_earliest_msg_storetime(
        self, ctx: HandlerContext, request: RemotingCommand
    ) -> RemotingCommand:
        """GET_EARLIEST_MSG_STORETIME: when the queue's first message still held was stored
        (-1: none)."""
        header = GetEarliestMsgStoretimeRequestHeader.from_fields(request.fields)
        store = self.backend.store
        low = store.min_queue_offset(header.topic, header.queue_id)
        stamp = self._store_time(store, header.topic, header.queue_id, low)
        return request.response(fields=GetEarliestMsgStoretimeResponseHeader(stamp).to_fields())

    def view_message_by_id(self, ctx: HandlerContext, request: RemotingCommand) -> RemotingCommand:
        """VIEW_MESSAGE_BY_ID: the record at a commit log offset, as stored."""
        header = ViewMessageRequestHeader.from_fields(request.fields)
        store = self.backend.store
        try:
            record = store.read_record(header.offset)
            size = record.size
            data = store.read(header.offset, size)
        except (StoreError, ValueError, IndexError):
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {header.offset}"
            )
        return request.response(ResponseCode.SUCCESS, None, None, data)

    def query_message(self, ctx: HandlerContext, request: RemotingCommand) -> RemotingCommand:
        """QUERY_MESSAGE: the messages of a topic with a key or unique id (``_query.py``)."""
        return query_message(self.backend.store, request)

    # -- clients ----------------------------------------------------------------------------

    def heart_beat(self, ctx: HandlerContext, request: RemotingCommand) -> RemotingCommand:
        """HEART_BEAT: the client's consumer groups (their retry topics created); a group it
        joins is told at once (NOTIFY_CONSUMER_IDS_CHANGED to every member)."""
        heartbeat = HeartbeatData.from_json(request.body)
        connection = connection_of(ctx)
        backend = self.backend
        for consumer in heartbeat.consumer_data_set:
            group = consumer.group_name
            try:
                backend.topic_table.ensure(retry_topic(group), 1)
                joined = backend.consumers.heartbeat(group, heartbeat.client_id, connection)
            except (ConsumerRegistryFull, TopicTableFull) as exc:
                log.warning(
                    "consumer %s refused (%s): %s", heartbeat.client_id, connection.peer, exc
                )
                return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
            if joined:
                log.info(
                    "consumer %s joined group %s (%s)", heartbeat.client_id, group, connection.peer
                )
                self.notify_group(group)
        return request.response(ResponseCode.SUCCESS)

    def unregister_client(self, ctx: HandlerContext, request: RemotingCommand) -> RemotingCommand:
        """UNREGISTER_CLIENT: the client leaves its consumer group at once (its other
        members are told); only over the connection it heartbeats on, as RocketMQ removes a
        member by its channel."""
        header = UnregisterClientRequestHeader.from_fields(request.fields)
        group = header.consumer_group
        connection = connection_of(ctx)
        if group and self.backend.consumers.unregister(group, header.client_id, connection):
            log.info("consumer %s left group %s", header.client_id, group)
            self.notify_group(group)
        return request.response(ResponseCode.SUCCESS)

    def get_consumer_list_by_group(
        self, ctx: HandlerContext, request: RemotingCommand
    ) -> RemotingCommand:
        """GET_CONSUMER_LIST_BY_GROUP: the client ids of the group's live members, sorted."""
        header = GetConsumerListByGroupRequestHeader.from_fields(request.fields)
        ids = self.backend.consumers.members(header.consumer_group)
        if not ids:
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {header.consumer_group}"
            )
        return request.response(body=ConsumerListBody(ids).to_json())

    # -- what a slave copies, the status ----------------------------------------------------

    def get_all_topic_config(
        self, ctx: HandlerContext, request: RemotingCommand
    ) -> RemotingCommand:
        """GET_ALL_TOPIC_CONFIG: the topic table (``TopicConfigSerializeWrapper``)."""
        return request.response(body=self.backend.topic_table.wrapper().encode())

    def get_all_consumer_offset(
        self, ctx: HandlerContext, request: RemotingCommand
    ) -> RemotingCommand:
        """GET_ALL_CONSUMER_OFFSET: every committed offset (``ConsumerOffsetSerializeWrapper``)."""
        table = self.backend.offsets.table()
        return request.response(body=ConsumerOffsetSerializeWrapper(table).to_json())

    def get_all_delay_offset(
        self, ctx: HandlerContext, request: RemotingCommand
    ) -> RemotingCommand:
        """GET_ALL_DELAY_OFFSET: the delay levels' progress (``delayOffset.json``)."""
        return request.response(body=self.backend.delay_offsets())

    def get_all_subscription_group(
        self, ctx: HandlerContext, request: RemotingCommand
    ) -> RemotingCommand:
        """GET_ALL_SUBSCRIPTIONGROUP_CONFIG: the consumer groups' settings."""
        return request.response(body=self.backend.subscription_groups().to_json())

    def hanet_status(self, ctx: HandlerContext, request: RemotingCommand) -> RemotingCommand:
        """HANET_STATUS (30001): the status document (:class:`~hanet.protocol.BrokerStatus`);
        SYSTEM_ERROR while the store is not open (a DLedger node starting or stopping)."""
        try:
            return request.response(body=self.backend.status().encode())
        except StoreClosedError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))


def default_subscription_groups(
    consumers: ConsumerRegistry, known: Mapping[str, SubscriptionGroupConfig] | None = None
) -> SubscriptionGroupWrapper:
    """The subscription groups of a broker that creates them on demand: every group it knows
    (with live members, or ``known``), with RocketMQ's defaults."""
    groups = dict(known or {})
    for group in consumers.groups():
        groups.setdefault(group, SubscriptionGroupConfig(group))
    return SubscriptionGroupWrapper(groups)
