"""The Broker service's port over loopback TCP, in-process (real sockets, real time), driven
with RocketMQ's requests through a RemotingConnection."""

from __future__ import annotations

import json
import logging
import struct
from pathlib import Path

import attrs
import pytest
import trio
from broker_support import (
    FILE,
    config,
    connect,
    pull,
    running,
    send,
    send_request,
    status,
)

from hanet.broker import Broker
from hanet.client import RemotingConnection
from hanet.errors import ConfigError
from hanet.ha import BrokerRole
from hanet.protocol import (
    BatchMessage,
    MessageId,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    SendMessageResponseHeader,
    ViewMessageRequestHeader,
    decode_command,
    encode_batch,
    encode_command,
)
from hanet.store import (
    BROKER_INDEX_FLUSH_INTERVAL,
    FlushDiskType,
    StoreLockedError,
    decode_record,
)
from hanet.testing import wait_until

FIXTURES = Path(__file__).parent / "fixtures" / "remoting" / "java"


async def test_send_pull_status(tmp_path: Path) -> None:
    async with running(config(tmp_path)) as (broker, addresses), connect(addresses.broker) as c:
        props = {"TAGS": "TagA", "KEYS": "k1 k2", "p": "v"}
        sent = await send(c, "TopicTest", b"Hello", 3, properties=props)
        assert sent.code == ResponseCode.SUCCESS and sent.header is not None
        assert (sent.header.queue_id, sent.header.queue_offset) == (3, 0)
        msg_id = MessageId.parse(sent.header.msg_id)
        assert (msg_id.offset, msg_id.port) == (0, addresses.broker[1])  # type: ignore[index]
        pulled = await pull(c, "TopicTest", 3)
        assert (pulled.code, pulled.remark) == (ResponseCode.SUCCESS, "FOUND")
        assert pulled.header is not None
        assert (pulled.header.next_begin_offset, pulled.header.min_offset) == (1, 0)
        assert (pulled.header.max_offset, pulled.header.suggest_which_broker_id) == (1, 0)
        (record,) = pulled.records
        assert record.body == b"Hello"
        assert record.properties == {**props, "CLUSTER": "DefaultCluster"}
        assert record.msg_id == sent.header.msg_id
        assert record.born_address.startswith("127.0.0.1:")
        assert record.store_address == f"127.0.0.1:{addresses.broker[1]}"  # type: ignore[index]
        doc = await status(c)
        assert doc.role == "ASYNC_MASTER"
        assert doc.max_offset == record.physical_offset + record.size
        assert doc.puts == 1
        now = broker.status()  # one snapshot: two calls may differ in uptime
        assert now == attrs.evolve(doc, uptime=now.uptime)
        # VIEW_MESSAGE_BY_ID: the record as stored, by the offset in its id.
        view = ViewMessageRequestHeader(msg_id.offset).to_fields()
        answer = await c.invoke(RemotingCommand.request(RequestCode.VIEW_MESSAGE_BY_ID, view))
        assert decode_record(bytes(answer.body)) == record
        missing = ViewMessageRequestHeader(1 << 40).to_fields()
        answer = await c.invoke(RemotingCommand.request(RequestCode.VIEW_MESSAGE_BY_ID, missing))
        assert answer.code == ResponseCode.SYSTEM_ERROR and "can not find" in str(answer.remark)


async def test_the_captured_java_send_is_answered_in_rocketmq_s_shape(tmp_path: Path) -> None:
    data = (FIXTURES / "02-broker-produce-consume__SEND_MESSAGE_V2__request.bin").read_bytes()
    request = decode_command(data[4:])
    captured = json.loads(
        (FIXTURES / "02-broker-produce-consume__SEND_MESSAGE_V2__response_SUCCESS.json").read_text()
    )
    async with running(config(tmp_path)) as (_, addresses), connect(addresses.broker) as c:
        answer = await c.invoke(request)
        assert answer.code == ResponseCode.SUCCESS
        assert set(answer.fields) == set(captured["header"]["extFields"])
        header = SendMessageResponseHeader.from_fields(answer.fields)
        assert (header.queue_id, header.queue_offset) == (3, 0)
        pulled = await pull(c, "CapTopic", 3)
        (record,) = pulled.records
        assert record.body == b"Hello RocketMQ 0"
        assert (
            record.properties["UNIQ_KEY"]
            == "FD00000000000000000000000000000262974E0E2F2A7F2D020E0000"
        )
        assert record.born_timestamp == 1795624856079


async def test_sends_by_every_code_and_a_batch(tmp_path: Path) -> None:
    async with running(config(tmp_path)) as (broker, addresses), connect(addresses.broker) as c:
        v1 = await send(c, "T", b"v1", 0, code=RequestCode.SEND_MESSAGE)
        v2 = await send(c, "T", b"v2", 0, code=RequestCode.SEND_MESSAGE_V2)
        assert v1.header is not None and v2.header is not None
        assert (v1.header.queue_offset, v2.header.queue_offset) == (0, 1)
        batch = [BatchMessage(b"b%d" % i, {"UNIQ_KEY": f"U{i}"}) for i in range(5)]
        request = send_request("T", encode_batch(batch), 1, code=RequestCode.SEND_BATCH_MESSAGE)
        answer = await c.invoke(request)
        assert answer.code == ResponseCode.SUCCESS
        header = SendMessageResponseHeader.from_fields(answer.fields)
        ids = header.msg_id.split(",")
        assert len(ids) == 5 and (header.queue_id, header.queue_offset) == (1, 0)
        pulled = await pull(c, "T", 1)
        assert [r.body for r in pulled.records] == [b"b%d" % i for i in range(5)]
        assert [r.msg_id for r in pulled.records] == ids
        assert pulled.records[2].properties["UNIQ_KEY"] == "U2"
        # A oneway send is stored and not answered.
        await c.invoke_oneway(send_request("T", b"oneway", 2))
        await wait_until(lambda: _true(broker.store.max_queue_offset("T", 2) == 1))


async def _true(value: bool) -> bool:
    await trio.lowlevel.checkpoint()
    return value


async def test_queues_round_robin_per_topic_and_topics_are_created(tmp_path: Path) -> None:
    cfg = config(tmp_path, default_topic_queue_nums=3)
    async with running(cfg) as (broker, addresses), connect(addresses.broker) as c:
        a = [(await send(c, "A", b"x")).header for _ in range(5)]
        b = [(await send(c, "B", b"x")).header for _ in range(2)]
        assert [h.queue_id for h in a if h] == [0, 1, 2, 0, 1]
        assert [h.queue_id for h in b if h] == [0, 1]
        # A producer asking for fewer queues gets fewer; at most the broker's default.
        few = await c.invoke(send_request("C", queue_id=0, queues=2))
        assert few.code == ResponseCode.SUCCESS
        # TBW102: the topic whose route RocketMQ's producers borrow for a topic not created
        # yet (a master registers it as RocketMQ's autoCreateTopicEnable does).
        assert broker.topic_table.queue_counts() == {"A": 3, "B": 3, "C": 2, "TBW102": 3}
        refused = await send(c, "C", b"x", 2)
        assert refused.code == ResponseCode.SYSTEM_ERROR and "queueId[2]" in str(refused.remark)
    # The topics are in config/topics.json, RocketMQ's shape.
    doc = json.loads((tmp_path / "config" / "topics.json").read_text())
    assert doc["topicConfigTable"]["C"]["writeQueueNums"] == 2


async def test_many_concurrent_requests_pipelined_over_one_connection(tmp_path: Path) -> None:
    sent = []
    async with running(config(tmp_path)) as (_, addresses), connect(addresses.broker) as c:

        async def one(i: int) -> None:
            sent.append(await send(c, "T", b"%d" % i, 0))

        async with trio.open_nursery() as nursery:
            for i in range(300):
                nursery.start_soon(one, i)
    assert all(s.code == ResponseCode.SUCCESS for s in sent)
    assert sorted(s.header.queue_offset for s in sent if s.header) == list(range(300))


async def test_pull_codes_and_bounds(tmp_path: Path) -> None:
    async with running(config(tmp_path)) as (_, addresses), connect(addresses.broker) as c:
        unknown = await pull(c, "T", 0)
        assert unknown.code == ResponseCode.TOPIC_NOT_EXIST
        for start in range(0, 1100, 100):
            batch = [BatchMessage(b"m%d" % i) for i in range(start, start + 100)]
            request = send_request("T", encode_batch(batch), 0, code=320)
            assert (await c.invoke(request)).code == ResponseCode.SUCCESS
        empty = await pull(c, "T", 1)  # a queue of the topic that holds nothing yet
        assert (empty.code, empty.remark) == (ResponseCode.PULL_NOT_FOUND, "NO_MATCHED_LOGIC_QUEUE")
        moved = await pull(c, "T", 1, 5)
        assert moved.code == ResponseCode.PULL_OFFSET_MOVED
        most = await pull(c, "T", 0, 0, max_messages=5000)
        assert len(most.records) == 1024 and most.header is not None
        assert most.header.next_begin_offset == 1024
        assert [m.queue_offset for m in most.records] == list(range(1024))
        rest = await pull(c, "T", 0, 1024, max_messages=5000)
        assert len(rest.records) == 76 and rest.header and rest.header.next_begin_offset == 1100
        at_end = await pull(c, "T", 0, 1100)
        assert (at_end.code, at_end.remark) == (ResponseCode.PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE")
        beyond = await pull(c, "T", 0, 5000)
        assert beyond.code == ResponseCode.PULL_OFFSET_MOVED
        assert beyond.header is not None and beyond.header.next_begin_offset == 1100
        bad_queue = await pull(c, "T", 99)
        assert bad_queue.code == ResponseCode.SYSTEM_ERROR and "queueId[99]" in str(
            bad_queue.remark
        )


async def test_tag_subscriptions_filter_and_skip(tmp_path: Path) -> None:
    async with running(config(tmp_path)) as (_, addresses), connect(addresses.broker) as c:
        for i, tag in enumerate(["A", "B", "A", "C"]):
            await send(c, "T", b"%d" % i, 0, properties={"TAGS": tag})
        only_a = await pull(c, "T", 0, subscription="A")
        assert [r.body for r in only_a.records] == [b"0", b"2"]
        b_or_c = await pull(c, "T", 0, subscription="B || C")
        assert [r.body for r in b_or_c.records] == [b"1", b"3"]
        none = await pull(c, "T", 0, subscription="Z")
        assert none.code == ResponseCode.PULL_RETRY_IMMEDIATELY
        assert none.header is not None and none.header.next_begin_offset == 4


async def test_queue_offset_requests(tmp_path: Path) -> None:
    async with running(config(tmp_path)) as (_, addresses), connect(addresses.broker) as c:
        stamps = []
        for i in range(5):
            await send(c, "T", b"%d" % i, 0)
            stamps.append((await pull(c, "T", 0, i)).records[0].store_timestamp)
            await trio.sleep(0.005)

        async def ask(code: int, **fields: object) -> dict[str, str]:
            answer = await c.invoke(
                RemotingCommand.request(code, {"topic": "T", "queueId": 0, **fields})
            )
            assert answer.code == ResponseCode.SUCCESS, answer
            return dict(answer.fields)

        assert (await ask(RequestCode.GET_MAX_OFFSET))["offset"] == "5"
        assert (await ask(RequestCode.GET_MIN_OFFSET))["offset"] == "0"
        earliest = await ask(RequestCode.GET_EARLIEST_MSG_STORETIME)
        assert earliest["timestamp"] == str(stamps[0])
        search = RequestCode.SEARCH_OFFSET_BY_TIMESTAMP
        assert (await ask(search, timestamp=stamps[2]))["offset"] == "2"
        assert (await ask(search, timestamp=0))["offset"] == "0"
        assert (await ask(search, timestamp=stamps[4] + 10_000))["offset"] == "5"
        missing = await c.invoke(
            RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": "T"})
        )
        assert missing.code == ResponseCode.SYSTEM_ERROR and "queueId" in str(missing.remark)


async def test_refused_sends_keep_the_connection(tmp_path: Path) -> None:
    async with running(config(tmp_path)) as (broker, addresses), connect(addresses.broker) as c:
        bad = await send(c, "bad topic!", b"x")
        assert bad.code == ResponseCode.SYSTEM_ERROR and "[%|a-zA-Z0-9_-]" in str(bad.remark)
        forbidden = await send(c, "SCHEDULE_TOPIC_XXXX", b"x")
        assert forbidden.code == ResponseCode.NO_PERMISSION
        unknown = await c.invoke(RemotingCommand.request(RequestCode.REGISTER_BROKER))
        assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        no_header = await c.invoke(RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"a": "g"}))
        assert no_header.code == ResponseCode.SYSTEM_ERROR and "missing" in str(no_header.remark)
        assert (await send(c, "good", b"x")).code == ResponseCode.SUCCESS
        assert broker.store.queues() == [("good", 0)]


async def raw_exchange(address: tuple[str, int], data: bytes) -> bytes:
    """Send ``data``, return everything read until the broker closes the connection."""
    stream = await trio.open_tcp_stream(*address)
    async with stream:
        await stream.send_all(data)
        received = b""
        with trio.fail_after(5):
            while chunk := await stream.receive_some():
                received += chunk
    return received


@pytest.mark.parametrize(
    ("garbage", "logged"),
    [
        (struct.pack(">I", 5) + b"\x07\x00\x00\x00\x01", "unknown serialize type"),
        (struct.pack(">I", 6) + b"\x00\x00\x00\x02{x", "JSON header does not parse"),
        (struct.pack(">I", 100_000), "exceeds 1024"),
    ],
)
async def test_malformed_frames_close_only_their_connection(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, garbage: bytes, logged: str
) -> None:
    caplog.set_level(logging.WARNING, "hanet")
    async with running(config(tmp_path), max_frame_length=1024) as (_, addresses):
        assert addresses.broker is not None
        async with connect(addresses.broker) as c:
            assert await raw_exchange(addresses.broker, garbage) == b""
            assert (await send(c, "T", b"still served")).code == ResponseCode.SUCCESS
    assert any(logged in r.getMessage() and "closing" in r.getMessage() for r in caplog.records)


async def test_an_answer_is_given_for_each_of_several_requests_in_one_segment(
    tmp_path: Path,
) -> None:
    async with running(config(tmp_path)) as (_, addresses):
        assert addresses.broker is not None
        frames = b"".join(encode_command(send_request("T").with_opaque(i)) for i in range(5))
        stream = await trio.open_tcp_stream(*addresses.broker)
        async with stream:
            await stream.send_all(frames)
            received = b""
            opaques: list[int] = []
            with trio.fail_after(5):
                while len(opaques) < 5:
                    received += await stream.receive_some()
                    opaques = []
                    pos = 0
                    while pos + 4 <= len(received):
                        (length,) = struct.unpack_from(">I", received, pos)
                        if pos + 4 + length > len(received):
                            break
                        opaques.append(decode_command(received[pos + 4 : pos + 4 + length]).opaque)
                        pos += 4 + length
        assert opaques == [0, 1, 2, 3, 4]


async def test_sync_master_answers_with_the_slaves_acks(tmp_path: Path) -> None:
    master_cfg = config(tmp_path / "m", broker_role=BrokerRole.SYNC_MASTER, slave_timeout=2.0)
    async with running(master_cfg) as (master, addresses), connect(addresses.broker) as c:
        alone = await send(c, "T", b"before any slave", 1)
        assert alone.code == ResponseCode.SLAVE_NOT_AVAILABLE and alone.header is not None
        assert addresses.ha is not None
        slave_cfg = config(
            tmp_path / "s",
            broker_role=BrokerRole.SLAVE,
            ha_master_address=f"127.0.0.1:{addresses.ha[1]}",
            full_sync=True,
        )
        async with (
            running(slave_cfg) as (slave, slave_addresses),
            connect(slave_addresses.broker) as sc,
        ):

            async def slave_connected() -> bool:
                return any(s.ack_offset >= 0 for s in (await status(c)).slaves)

            await wait_until(slave_connected)
            batch = encode_batch([BatchMessage(b"%d" % i) for i in range(20)])
            answer = await c.invoke(send_request("T", batch, 0, code=320))
            assert answer.code == ResponseCode.SUCCESS
            assert slave.store.max_offset == master.store.max_offset
            link = (await status(sc)).master
            assert link is not None and link.connected and link.connects == 1
            refused = await send(sc, "T", b"to a slave")
            assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE and refused.header is None
            assert "slave" in str(refused.remark)
            pulled = await pull(sc, "T", 0, 0, max_messages=100)
            assert [m.body for m in pulled.records] == [b"%d" % i for i in range(20)]
            (seen,) = (await status(c)).slaves
            assert seen.lag_bytes == 0 and seen.state == "transferring"


async def test_sync_master_times_out_every_waiting_put_together(tmp_path: Path) -> None:
    cfg = config(tmp_path, broker_role=BrokerRole.SYNC_MASTER, slave_timeout=0.3)
    async with running(cfg) as (_, addresses), connect(addresses.broker) as c:
        assert addresses.ha is not None
        # A "slave" that reports once and then never acknowledges anything.
        stalled = await trio.open_tcp_stream(*addresses.ha)
        async with stalled:
            await stalled.send_all(struct.pack(">q", 0))

            async def connected() -> bool:
                return any(s.ack_offset >= 0 for s in (await status(c)).slaves)

            await wait_until(connected)
            codes = []

            async def one() -> None:
                codes.append((await send(c, "T", b"x")).code)

            start = trio.current_time()
            async with trio.open_nursery() as nursery:
                for _ in range(10):
                    nursery.start_soon(one)
            elapsed = trio.current_time() - start
            # WAIT=false: answered at once, the wait skipped.
            quick = await send(c, "T", b"x", properties={"WAIT": "false"})
            assert quick.code == ResponseCode.SUCCESS
    assert codes == [ResponseCode.FLUSH_SLAVE_TIMEOUT] * 10
    assert 0.3 <= elapsed < 2.5  # together: ten waits one after the other would take 3 s


async def test_sync_flush_sends_are_on_disk_when_answered(tmp_path: Path) -> None:
    cfg = config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH)
    async with running(cfg) as (broker, addresses), connect(addresses.broker) as c:
        for _ in range(10):
            assert (await send(c, "T", b"x" * 100)).code == ResponseCode.SUCCESS
            assert broker.store.flushed_offset == broker.store.max_offset


async def test_a_broker_fsyncs_its_index_files_as_rocketmq_does_not_at_every_flush(
    tmp_path: Path,
) -> None:
    """The commit log and consume queues at every flush, the index files (derived data a kill
    does not touch) every BROKER_INDEX_FLUSH_INTERVAL and at close."""
    async with running(config(tmp_path)) as (broker, _):
        store_config = broker.store.config
        assert store_config.index_flush_interval == BROKER_INDEX_FLUSH_INTERVAL
        assert store_config.flush_interval < BROKER_INDEX_FLUSH_INTERVAL


async def test_clean_shutdown_removes_abort_and_a_second_broker_is_refused(
    tmp_path: Path,
) -> None:
    async with running(config(tmp_path)) as (broker, _):
        assert (tmp_path / "abort").exists()
        with pytest.raises(StoreLockedError):
            await Broker(config(tmp_path)).run()
        assert broker.store.max_offset == 0
    assert not (tmp_path / "abort").exists()
    with pytest.raises(RuntimeError, match="not running"):
        _ = broker.store


def test_a_slave_needs_its_master_address(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="haMasterAddress"):
        Broker(config(tmp_path, broker_role=BrokerRole.SLAVE))


async def test_a_pull_never_serves_a_record_that_fails_its_crc(tmp_path: Path) -> None:
    async with running(config(tmp_path)) as (broker, addresses), connect(addresses.broker) as c:
        for i in range(3):
            await send(c, "T", b"payload %d" % i, 0)
        records = (await pull(c, "T", 0)).records
        bad = records[1].physical_offset
        body_at = bad + records[1].size - (1 + 1 + 2) - 1 - len(records[1].properties_raw)
        path = tmp_path / "commitlog" / ("0" * 20)
        with path.open("r+b") as f:  # a byte flipped on disk, under the live mapping
            f.seek(body_at)
            byte = f.read(1)
            f.seek(body_at)
            f.write(bytes([byte[0] ^ 0xFF]))
        first = await pull(c, "T", 0, 0, max_messages=1)
        assert [m.body for m in first.records] == [b"payload 0"]
        refused = await pull(c, "T", 0, 1)
        assert refused.code == ResponseCode.SYSTEM_ERROR
        assert f"invalid record at offset {bad}: body CRC" in str(refused.remark)
        assert broker.store.max_offset == records[2].physical_offset + records[2].size


async def test_a_slave_pointed_at_the_broker_port_is_named_in_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with running(config(tmp_path)) as (_, addresses):
        assert addresses.broker is not None
        stream = await trio.open_tcp_stream(*addresses.broker)
        await stream.send_all(struct.pack(">q", 0))  # a new slave's first report
        with trio.fail_after(5):
            assert await stream.receive_some(100) == b""
    assert "an HA slave pointed at the broker port?" in caplog.text


async def test_a_diverged_slave_says_so_in_its_status(tmp_path: Path) -> None:
    from hanet.store import CommitLogStore, Message, StoreConfig

    with CommitLogStore.open(tmp_path / "s", StoreConfig(mapped_file_size=FILE)) as ahead:
        ahead.put(Message("T", b"only on the slave"))
    master_cfg = config(tmp_path / "m", ha_send_heartbeat_interval=0.2)
    async with running(master_cfg) as (_, m_addr):
        assert m_addr.ha is not None
        slave_cfg = config(
            tmp_path / "s",
            broker_role=BrokerRole.SLAVE,
            ha_master_address=f"127.0.0.1:{m_addr.ha[1]}",
            reconnect_interval=0.05,
        )
        async with running(slave_cfg) as (_, s_addr), connect(s_addr.broker) as c:

            async def diverged() -> bool:
                link = (await status(c)).master
                return link is not None and link.diverged

            await wait_until(diverged)
            link = (await status(c)).master
            assert link is not None and link.refused_offset == ahead.max_offset


async def test_a_connection_is_a_remoting_connection(tmp_path: Path) -> None:
    async with running(config(tmp_path)) as (_, addresses):
        assert addresses.broker is not None
        async with RemotingConnection.connect(*addresses.broker) as c:
            assert c.is_connected
