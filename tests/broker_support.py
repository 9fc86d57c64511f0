"""What the broker tests share: a small broker configuration, a broker running for a block,
a remoting test client (RocketMQ's requests made with :mod:`hanet.protocol`'s headers over a
:class:`~hanet.client.RemotingConnection`), and a fake name server that records what brokers
register."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import trio

from hanet.boot import serve_on
from hanet.broker import Broker, BrokerAddresses
from hanet.channel import HandlerContext, StreamChannel
from hanet.client import NameServerClient, RemotingConnection
from hanet.ha import BrokerConfig
from hanet.namesrv import NameServer
from hanet.protocol import (
    MASTER_ID,
    BrokerRegistration,
    BrokerStatus,
    ConsumerData,
    ConsumerListBody,
    HanetRequestCode,
    HeartbeatData,
    PullMessageResponseHeader,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    RegisterBrokerBody,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponse,
    RemotingCommand,
    RemotingDispatcher,
    RequestCode,
    ResponseCode,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
    SubscriptionData,
    UnregisterBrokerRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    properties_to_string,
    pull_message_request,
    remoting_pipeline,
)
from hanet.store import (
    CommitLogStore,
    Message,
    MessageRecord,
    PutResult,
    StoreConfig,
    scan_records,
)

FILE = 64 * 1024
"""The tests' commit log file size."""


SMALL_STORE = StoreConfig(mapped_file_size=256 * 1024, consume_queue_file_size=20 * 1024)
"""A store of small files for the in-process broker tests."""


def small_store(tmp_path: Path) -> Iterator[CommitLogStore]:
    """A :data:`SMALL_STORE` store in ``tmp_path/store``, open for the test: make it a
    module's fixture with ``store = pytest.fixture(small_store, name="store")``."""
    with CommitLogStore.open(tmp_path / "store", SMALL_STORE) as opened:
        yield opened


def config(root: Path, **changes: Any) -> BrokerConfig:
    """A broker on ``root`` with any free ports and small commit log files."""
    return BrokerConfig(
        store_path_root_dir=root,
        listen_port=0,
        ha_listen_port=0,
        mapped_file_size_commit_log=FILE,
        **changes,
    )


@asynccontextmanager
async def running(
    cfg: BrokerConfig, **kwargs: Any
) -> AsyncIterator[tuple[Broker, BrokerAddresses]]:
    """A broker serving for the block: it and its addresses."""
    async with trio.open_nursery() as nursery:
        broker = Broker(cfg, **kwargs)
        addresses: BrokerAddresses = await nursery.start(broker.run)
        yield broker, addresses
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def registered_master(
    root: Path, topic: str, queues: int, **kwargs: Any
) -> AsyncIterator[tuple[str, str, Broker]]:
    """A name server and a master on ``root`` holding ``topic`` (``queues`` queues),
    registered: the name server's address, the broker's, and the broker."""
    async with trio.open_nursery() as nursery:
        server = NameServer(("127.0.0.1", 0))
        names_address = await nursery.start(server.run)
        async with running(config(root), **kwargs) as (broker, addresses):
            broker_address, ha = fmt(addresses.broker), fmt(addresses.ha)
            held_topics = ((topic, queues),)
            registration = BrokerRegistration(
                "DefaultCluster", "broker-a", 0, "ASYNC_MASTER", broker_address, ha, held_topics
            )
            # Registered over a connection held open: the name server drops a broker whose
            # connection closes.
            async with NameServerClient([names_address]).connection(names_address) as held:
                await held.register_broker(registration)
                yield fmt(names_address), broker_address, broker
        nursery.cancel_scope.cancel()


def broker_status(**changes: Any) -> BrokerStatus:
    """A status document: an idle broker's (no address, nothing stored, up one second), with
    ``changes``."""
    idle = BrokerStatus(
        role="ASYNC_MASTER",
        broker_address=None,
        ha_address=None,
        min_offset=0,
        max_offset=0,
        flushed_offset=0,
        dispatched_offset=0,
        puts=0,
        mapped_files=0,
        dispatch_error=None,
        uptime=1.0,
    )
    return attrs.evolve(idle, **changes)


def fmt(address: tuple[str, int] | None) -> str:
    """``host:port``."""
    assert address is not None
    return f"{address[0]}:{address[1]}"


async def put(broker: Broker, topic: str, body: bytes, queue_id: int = 0) -> PutResult:
    """Put one message in-process, as a send of a producer does (the topic created on the
    way)."""
    broker.topic_table.create_for_send(topic, broker.config.default_topic_queue_nums)
    (result,) = await broker.put([Message(topic, body, queue_id)])
    return result


def send_header(
    topic: str,
    queue_id: int = -1,
    *,
    properties: dict[str, str] | None = None,
    queues: int = 4,
    group: str = "test-producer",
) -> SendMessageRequestHeader:
    """A producer's send header (``queue_id`` -1: the broker picks the queue)."""
    return SendMessageRequestHeader(
        producer_group=group,
        topic=topic,
        default_topic="TBW102",
        default_topic_queue_nums=queues,
        queue_id=queue_id,
        sys_flag=0,
        born_timestamp=1_700_000_000_000,
        flag=0,
        properties=properties_to_string(properties) if properties else None,
    )


def send_request(
    topic: str,
    body: bytes = b"x",
    queue_id: int = -1,
    *,
    properties: dict[str, str] | None = None,
    code: int = RequestCode.SEND_MESSAGE_V2,
    queues: int = 4,
) -> RemotingCommand:
    """SEND_MESSAGE_V2 (or ``code``) of one message."""
    header = send_header(topic, queue_id, properties=properties, queues=queues)
    return RemotingCommand.request(code, header.encode(code), body)


@attrs.frozen
class Sent:
    """A send's answer."""

    code: int
    remark: str | None
    header: SendMessageResponseHeader | None


async def send(
    conn: RemotingConnection,
    topic: str,
    body: bytes = b"x",
    queue_id: int = -1,
    *,
    properties: dict[str, str] | None = None,
    code: int = RequestCode.SEND_MESSAGE_V2,
) -> Sent:
    """Send one message; its answer's code, remark and header (None unless stored)."""
    answer = await conn.invoke(
        send_request(topic, body, queue_id, properties=properties, code=code)
    )
    header = None
    if "msgId" in answer.fields:
        header = SendMessageResponseHeader.from_fields(answer.fields)
    return Sent(answer.code, answer.remark, header)


@attrs.frozen
class Pulled:
    """A pull's answer: its code, header and records."""

    code: int
    remark: str | None
    header: PullMessageResponseHeader | None
    records: list[MessageRecord]


def pull_request(
    topic: str,
    queue_id: int,
    offset: int = 0,
    *,
    group: str = "test-consumer",
    max_messages: int = 32,
    commit_offset: int | None = None,
    suspend_ms: int = 0,
    subscription: str = "*",
) -> RemotingCommand:
    """PULL_MESSAGE of ``topic``'s queue from ``offset`` (``suspend_ms`` 0: not held)."""
    suspend = suspend_ms or None
    return pull_message_request(
        group,
        topic,
        queue_id,
        offset,
        max_messages,
        commit_offset=commit_offset,
        suspend_ms=suspend,
        subscription=subscription,
    )


async def pull(
    conn: RemotingConnection, topic: str, queue_id: int, offset: int = 0, **kwargs: Any
) -> Pulled:
    """Pull ``topic``'s queue from ``offset``; the records decoded."""
    answer = await conn.invoke(pull_request(topic, queue_id, offset, **kwargs))
    header = None
    if "nextBeginOffset" in answer.fields:
        header = PullMessageResponseHeader.from_fields(answer.fields)
    records = list(scan_records(bytes(answer.body))) if answer.code == ResponseCode.SUCCESS else []
    return Pulled(answer.code, answer.remark, header, records)


async def status(conn: RemotingConnection) -> BrokerStatus:
    """The broker's status document (HANET_STATUS)."""
    answer = await conn.invoke_checked(RemotingCommand.request(HanetRequestCode.HANET_STATUS))
    return BrokerStatus.decode(answer.body)


async def commit(
    conn: RemotingConnection, group: str, topic: str, queue_id: int, offset: int
) -> RemotingCommand:
    """UPDATE_CONSUMER_OFFSET; the answer."""
    header = UpdateConsumerOffsetRequestHeader(group, topic, queue_id, offset)
    return await conn.invoke(
        RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, header.to_fields())
    )


async def query(conn: RemotingConnection, group: str, topic: str, queue_id: int) -> int | None:
    """QUERY_CONSUMER_OFFSET: the offset, None when QUERY_NOT_FOUND."""
    header = QueryConsumerOffsetRequestHeader(group, topic, queue_id)
    answer = await conn.invoke(
        RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET, header.to_fields())
    )
    if answer.code == ResponseCode.QUERY_NOT_FOUND:
        return None
    assert answer.code == ResponseCode.SUCCESS, answer
    return QueryConsumerOffsetResponseHeader.from_fields(answer.fields).offset


def heartbeat_request(client_id: str, *groups: str, topic: str = "T") -> RemotingCommand:
    """HEART_BEAT of a client in consumer ``groups`` subscribing to ``topic``."""
    body = HeartbeatData(
        client_id,
        consumer_data_set=tuple(
            ConsumerData(g, subscription_data_set=(SubscriptionData(topic),)) for g in groups
        ),
    )
    return RemotingCommand.request(RequestCode.HEART_BEAT, body=body.to_json())


async def members(conn: RemotingConnection, group: str) -> tuple[str, ...]:
    """GET_CONSUMER_LIST_BY_GROUP (empty when the broker has none)."""
    answer = await conn.invoke(
        RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
    )
    if answer.code != ResponseCode.SUCCESS:
        return ()
    return ConsumerListBody.from_json(answer.body).consumer_id_list


def connect(address: tuple[str, int] | None, **kwargs: Any) -> Any:
    """A :class:`RemotingConnection` to ``address`` for the block."""
    assert address is not None
    return RemotingConnection.connect(address[0], address[1], **kwargs)


@attrs.define
class FakeNameServer:
    """Answers REGISTER_BROKER with ``master`` (broker address, HA address) for slaves, and
    records every registration (as :class:`BrokerRegistration`) and unregistration."""

    master: tuple[str, str] | None = None
    registrations: list[BrokerRegistration] = attrs.Factory(list)
    unregistered: list[tuple[str, int]] = attrs.Factory(list)

    def initialize(self, channel: StreamChannel) -> None:
        for name, handler in remoting_pipeline():
            channel.pipeline.add_last(handler, name)
        processors: dict[int, Any] = {
            RequestCode.REGISTER_BROKER: self._register,
            RequestCode.UNREGISTER_BROKER: self._unregister,
        }
        channel.pipeline.add_last(RemotingDispatcher(processors, port="fake name server"))

    def _register(self, ctx: HandlerContext, request: RemotingCommand) -> RemotingCommand:
        header = RegisterBrokerRequestHeader.from_fields(request.fields)
        body = RegisterBrokerBody.decode_body(request.body, header.compressed)
        wrapper = body.topic_config_serialize_wrapper
        topics = tuple(
            sorted(
                (n, max(c.read_queue_nums, c.write_queue_nums))
                for n, c in wrapper.topic_config_table.items()
            )
        )
        role = "SLAVE" if header.broker_id != MASTER_ID else "MASTER"
        self.registrations.append(
            BrokerRegistration(
                cluster=header.cluster_name,
                broker_name=header.broker_name,
                broker_id=header.broker_id,
                role=role,
                broker_address=header.broker_addr,
                ha_address=header.ha_server_addr,
                topics=topics,
                data_version=wrapper.data_version,
            )
        )
        master = self.master if header.broker_id != MASTER_ID else None
        answer = RegisterBrokerResponse(*(master or (None, None)))
        return request.response(fields=answer.header().to_fields())

    def _unregister(self, ctx: HandlerContext, request: RemotingCommand) -> RemotingCommand:
        header = UnregisterBrokerRequestHeader.from_fields(request.fields)
        self.unregistered.append((header.broker_name, header.broker_id))
        return request.response()


@asynccontextmanager
async def name_server() -> AsyncIterator[tuple[FakeNameServer, str]]:
    """A :class:`FakeNameServer` on loopback for the block: it and its ``host:port``."""
    server = FakeNameServer()
    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        address = fmt(listeners[0].socket.getsockname())
        await nursery.start(partial(serve_on, server.initialize, listeners))
        yield server, address
        nursery.cancel_scope.cancel()
