"""CONSUMER_SEND_MSG_BACK: a failed message goes to %RETRY%<group> delayed by the schedule
rewrite, or to %DLQ%<group> after max reconsume times (RocketMQ 4.9.8's consumerSendMsgBack),
against a store in a temporary directory, through the dispatch table on an EmbeddedChannel."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio
from broker_support import SMALL_STORE, connect, pull, running, send, small_store
from broker_support import config as broker_config

from hanet.broker import (
    DELAY_LEVELS,
    DELAY_OFFSETS_FILE,
    SCHEDULE_TOPIC,
    PullHoldService,
    QueueLocks,
    ScheduleService,
    SendBackProcessor,
    delay_rewrite,
    dlq_topic,
    redirect_retry_send,
    retry_topic,
)
from hanet.channel import HandlerContext
from hanet.protocol import (
    ConsumerSendMsgBackRequestHeader,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueue,
    PullMessageRequestHeader,
    RemotingCodec,
    RemotingCommand,
    RemotingDispatcher,
    RequestCode,
    RequestProcessor,
    ResponseCode,
    SubscriptionGroupConfig,
    decode_command,
    encode_command,
)
from hanet.store import (
    CommitLogStore,
    Message,
    MessageRecord,
    PutResult,
    PutStatus,
    StoreConfig,
    StoreRole,
)
from hanet.testing import EmbeddedChannel

store = pytest.fixture(small_store, name="store")


def _channel(processor: SendBackProcessor) -> EmbeddedChannel:
    table: dict[int, RequestProcessor] = {RequestCode.CONSUMER_SEND_MSG_BACK: processor}
    return EmbeddedChannel(RemotingCodec(), RemotingDispatcher(table, port="test"))


def _send_back(
    channel: EmbeddedChannel,
    offset: int,
    *,
    delay_level: int = 0,
    max_times: int | None = None,
    version: int = 409,
    group: str = "g",
) -> RemotingCommand:
    header = ConsumerSendMsgBackRequestHeader(
        offset=offset,
        group=group,
        delay_level=delay_level,
        origin_msg_id="ignored",
        origin_topic="orders",
        unit_mode=False,
        max_reconsume_times=max_times,
    )
    request = RemotingCommand.request(
        RequestCode.CONSUMER_SEND_MSG_BACK, header.to_fields(), opaque=11
    )
    channel.write_inbound(encode_command(_with_version(request, version))[4:])
    out = bytearray()
    while (chunk := channel.read_outbound()) is not None:
        out += chunk
    answer = decode_command(bytes(out)[4:])
    assert answer.is_response and answer.opaque == 11
    return answer


def _with_version(request: RemotingCommand, version: int) -> RemotingCommand:
    return RemotingCommand(
        request.code,
        version=version,
        opaque=request.opaque,
        ext_fields=request.ext_fields,
        body=request.body,
    )


def _original(store: CommitLogStore, reconsume_times: int = 0) -> PutResult:
    properties = {"TAGS": "t1", "UNIQ_KEY": "AC110001000018B4AAC2", "KEYS": "k"}
    message = Message(
        "orders", b"payload", queue_id=2, properties=properties, reconsume_times=reconsume_times
    )
    result = store.put(message)
    assert result.ok
    return result


def _only(store: CommitLogStore, topic: str, queue_id: int) -> MessageRecord:
    records = store.get_messages(topic, queue_id, 0, 100)
    assert len(records) == 1, records
    return records[0]


def test_a_failed_message_waits_on_the_schedule_topic_for_its_retry_topic(
    store: CommitLogStore,
) -> None:
    topics: list[tuple[str, int]] = []
    channel = _channel(SendBackProcessor(store, store.put, on_topic=lambda *a: topics.append(a)))
    original = _original(store)
    answer = _send_back(channel, original.wrote_offset)
    assert answer.code == ResponseCode.SUCCESS and answer.remark is None
    assert topics == [(retry_topic("g"), 1)]
    waiting = _only(store, SCHEDULE_TOPIC, 2)  # level 3 + 0 reconsumes -> queue 2
    props = waiting.properties
    assert props["REAL_TOPIC"] == "%RETRY%g" and props["REAL_QID"] == "0"
    assert props["RETRY_TOPIC"] == "orders"
    assert props["ORIGIN_MESSAGE_ID"] == original.msg_id
    assert props["DELAY"] == "3" and props["WAIT"] == "false"
    assert props["UNIQ_KEY"] == "AC110001000018B4AAC2" and props["TAGS"] == "t1"
    assert waiting.reconsume_times == 1 and waiting.body == b"payload"
    assert store.max_queue_offset(retry_topic("g"), 0) == 0


def test_a_retry_of_a_retry_backs_off_and_keeps_its_origin(
    store: CommitLogStore, tmp_path: Path
) -> None:
    channel = _channel(SendBackProcessor(store, store.put))
    original = _original(store)
    assert _send_back(channel, original.wrote_offset).code == ResponseCode.SUCCESS
    delivered = ScheduleService(store, store.put, tmp_path / "delay.json", now_ms=lambda: 2**50)
    assert delivered.deliver_due(3) is None
    retry = _only(store, retry_topic("g"), 0)
    assert "DELAY" not in retry.properties and retry.reconsume_times == 1
    assert _send_back(channel, retry.physical_offset).code == ResponseCode.SUCCESS
    again = _only(store, SCHEDULE_TOPIC, 3)  # level 3 + 1
    assert again.properties["DELAY"] == "4" and again.reconsume_times == 2
    assert again.properties["RETRY_TOPIC"] == "orders"
    assert again.properties["ORIGIN_MESSAGE_ID"] == original.msg_id


def test_an_explicit_delay_level_is_kept(store: CommitLogStore) -> None:
    channel = _channel(SendBackProcessor(store, store.put))
    answer = _send_back(channel, _original(store).wrote_offset, delay_level=7)
    assert answer.code == ResponseCode.SUCCESS
    assert _only(store, SCHEDULE_TOPIC, 6).properties["DELAY"] == "7"


def test_max_reconsume_times_sends_to_the_dlq_at_once(store: CommitLogStore) -> None:
    topics: list[tuple[str, int]] = []
    channel = _channel(SendBackProcessor(store, store.put, on_topic=lambda *a: topics.append(a)))
    answer = _send_back(channel, _original(store, reconsume_times=16).wrote_offset)
    assert answer.code == ResponseCode.SUCCESS
    dead = _only(store, dlq_topic("g"), 0)
    assert dead.properties["DELAY"] == "0" and dead.properties["RETRY_TOPIC"] == "orders"
    assert dead.reconsume_times == 17
    assert topics == [(dlq_topic("g"), 1)]
    assert store.max_queue_offset(SCHEDULE_TOPIC, 2) == 0


def test_the_consumers_max_reconsume_times_counts_from_version_3_4_9(
    store: CommitLogStore,
) -> None:
    channel = _channel(SendBackProcessor(store, store.put))
    offset = _original(store, reconsume_times=3).wrote_offset
    assert _send_back(channel, offset, max_times=3, version=100).code == ResponseCode.SUCCESS
    assert store.max_queue_offset(dlq_topic("g"), 0) == 0  # old client: the group's 16
    assert _send_back(channel, offset, max_times=3).code == ResponseCode.SUCCESS
    assert store.max_queue_offset(dlq_topic("g"), 0) == 1


def test_a_negative_delay_level_means_the_dlq(store: CommitLogStore) -> None:
    channel = _channel(SendBackProcessor(store, store.put))
    assert _send_back(channel, _original(store).wrote_offset, delay_level=-1).code == 0
    assert _only(store, dlq_topic("g"), 0).reconsume_times == 1


def test_the_group_settings_apply(store: CommitLogStore) -> None:
    groups = {"g": SubscriptionGroupConfig("g", retry_max_times=2)}
    processor = SendBackProcessor(store, store.put, group_config=groups.get)
    channel = _channel(processor)
    offset = _original(store, reconsume_times=2).wrote_offset
    assert _send_back(channel, offset).code == ResponseCode.SUCCESS
    assert store.max_queue_offset(dlq_topic("g"), 0) == 1
    answer = _send_back(channel, offset, group="missing")
    assert answer.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
    assert answer.remark and "missing" in answer.remark
    groups["g"] = SubscriptionGroupConfig("g", retry_queue_nums=0)
    before = store.max_offset
    assert _send_back(channel, offset).code == ResponseCode.SUCCESS  # dropped, as RocketMQ
    assert store.max_offset == before


def test_a_broker_without_write_permission_refuses(store: CommitLogStore) -> None:
    processor = SendBackProcessor(store, store.put, writable=lambda: False, broker_ip="10.0.0.9")
    answer = _send_back(_channel(processor), _original(store).wrote_offset)
    assert answer.code == ResponseCode.NO_PERMISSION
    assert answer.remark == "the broker[10.0.0.9] sending message is forbidden"


@pytest.mark.parametrize("offset", [12345, 3, -1, 10**12])
def test_no_message_at_the_offset_is_a_system_error(store: CommitLogStore, offset: int) -> None:
    _original(store)
    before = store.max_offset
    answer = _send_back(_channel(SendBackProcessor(store, store.put)), offset)
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert answer.remark == f"look message by offset failed, {offset}"
    assert store.max_offset == before


def test_a_refused_put_answers_its_status(store: CommitLogStore) -> None:
    def refuse(message: Message) -> PutResult:
        return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, detail="a slave store refuses puts")

    answer = _send_back(_channel(SendBackProcessor(store, refuse)), _original(store).wrote_offset)
    assert answer.code == ResponseCode.SYSTEM_ERROR and answer.remark == "SERVICE_NOT_AVAILABLE"


def test_a_slave_store_answers_service_not_available(tmp_path: Path) -> None:
    with CommitLogStore.open(tmp_path / "m", SMALL_STORE) as master:
        original = _original(master)
        data = master.read(0, master.max_offset)
    slave_config = StoreConfig(
        mapped_file_size=SMALL_STORE.mapped_file_size,
        consume_queue_file_size=SMALL_STORE.consume_queue_file_size,
        role=StoreRole.SLAVE,
    )
    with CommitLogStore.open(tmp_path / "s", slave_config) as slave:
        slave.append_raw(0, data)
        answer = _send_back(_channel(SendBackProcessor(slave, slave.put)), original.wrote_offset)
    assert answer.code == ResponseCode.SYSTEM_ERROR and answer.remark == "SERVICE_NOT_AVAILABLE"


@pytest.mark.parametrize(
    "fields",
    [{"group": "g", "delayLevel": "0"}, {"offset": "x", "group": "g", "delayLevel": "0"}],
)
def test_a_bad_header_is_a_system_error(store: CommitLogStore, fields: dict[str, str]) -> None:
    channel = _channel(SendBackProcessor(store, store.put))
    request = RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, fields, opaque=4)
    channel.write_inbound(encode_command(request)[4:])
    out = bytearray()
    while (chunk := channel.read_outbound()) is not None:
        out += chunk
    answer = decode_command(bytes(out)[4:])
    assert answer.code == ResponseCode.SYSTEM_ERROR and "offset" in (answer.remark or "")
    assert channel.is_active


def test_a_producers_send_to_the_retry_topic_goes_to_the_dlq_after_max_times() -> None:
    fresh = Message(
        retry_topic("g"), b"x", queue_id=0, properties={"DELAY": "5"}, reconsume_times=3
    )
    assert redirect_retry_send(fresh) is fresh
    assert redirect_retry_send(fresh, header_max=3, version=100) is fresh  # before 3.4.9
    dead = redirect_retry_send(fresh, header_max=3)
    assert (dead.topic, dead.queue_id, dead.properties["DELAY"]) == (dlq_topic("g"), 0, "0")
    assert redirect_retry_send(fresh, group_max=2, version=100).topic == dlq_topic("g")
    other = Message("orders", b"x", reconsume_times=99)
    assert redirect_retry_send(other) is other


# -- wired into a running broker, over loopback TCP -------------------------------------------


async def test_wired_into_a_running_broker_over_tcp(tmp_path: Path) -> None:
    """The wiring of the module docstrings, on a real Broker's BrokerPort: a delayed send
    reaches a long-polling consumer when due; its send-back comes again on %RETRY%G; an
    orderly consumer locks a queue."""
    async with running(broker_config(tmp_path)) as (broker, addresses):
        store = broker.store

        def repull(ctx: HandlerContext, request: RemotingCommand) -> RemotingCommand | None:
            header = PullMessageRequestHeader.from_fields(request.fields)
            return broker.port.serve_pull(ctx, request, header, allow_suspend=False)

        holds = PullHoldService(repull, store.max_queue_offset)

        def put_internal(message: Message) -> PutResult:
            return broker.put_now([message])[0]

        fast = tuple(100 for _ in DELAY_LEVELS)  # every level 100 ms
        schedule = ScheduleService(store, put_internal, tmp_path / DELAY_OFFSETS_FILE, levels=fast)
        locks = QueueLocks()
        sendback = SendBackProcessor(store, put_internal, on_topic=broker.topic_table.ensure)
        broker.port.rewrite = delay_rewrite
        broker.port.hold = holds.hold
        broker.stored_listeners.append(holds.notify_put)
        broker.port.register(RequestCode.CONSUMER_SEND_MSG_BACK, sendback)
        broker.port.register(RequestCode.LOCK_BATCH_MQ, locks.lock_batch_mq)
        broker.port.register(RequestCode.UNLOCK_BATCH_MQ, locks.unlock_batch_mq)
        broker.port.register(RequestCode.GET_ALL_DELAY_OFFSET, schedule.get_all_delay_offset)
        async with trio.open_nursery() as services:
            await services.start(holds.run)
            await services.start(schedule.run)
            async with connect(addresses.broker) as conn:
                sent = await send(conn, "T", b"later", 2, properties={"DELAY": "1"})
                assert sent.code == ResponseCode.SUCCESS
                assert store.max_queue_offset("T", 2) == 0
                with trio.fail_after(5):
                    got = await pull(conn, "T", 2, 0, suspend_ms=15_000)
                assert got.code == ResponseCode.SUCCESS
                (record,) = got.records
                assert record.body == b"later" and "DELAY" not in record.properties

                header = ConsumerSendMsgBackRequestHeader(
                    offset=record.physical_offset, group="G", delay_level=0
                )
                back = await conn.invoke(
                    RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, header.to_fields())
                )
                assert back.code == ResponseCode.SUCCESS, back.remark
                assert broker.topic_table.get(retry_topic("G")) is not None
                with trio.fail_after(5):
                    retried = await pull(conn, retry_topic("G"), 0, 0, suspend_ms=15_000)
                (again,) = retried.records
                assert again.properties["RETRY_TOPIC"] == "T" and again.reconsume_times == 1

                mq = MessageQueue("T", "broker-a", 2)
                body = LockBatchRequestBody("G", "client-1", frozenset({mq})).to_json()
                locked = await conn.invoke(
                    RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, body=body)
                )
                assert LockBatchResponseBody.from_json(locked.body).lock_ok_mq_set == {mq}
                offsets = await conn.invoke(
                    RemotingCommand.request(RequestCode.GET_ALL_DELAY_OFFSET)
                )
                assert json.loads(bytes(offsets.body)) == {"offsetTable": {"1": 1, "3": 1}}
            services.cancel_scope.cancel()
