"""The admin requests on a broker port (mqadmin's), over loopback TCP to an in-process broker,
through :class:`hanet.client.AdminClient`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio
from broker_support import config, fmt, heartbeat_request, pull, put, running, send

from hanet.client import AdminClient, RemotingConnection, RemotingResponseError
from hanet.protocol import (
    CreateTopicRequestHeader,
    HeartbeatData,
    LanguageCode,
    MessageQueue,
    OffsetWrapper,
    ProducerData,
    RemotingCommand,
    RequestCode,
    ResetOffsetBody,
    ResetOffsetRequestHeader,
    ResponseCode,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
)
from hanet.testing import wait_until


async def _broker_with_messages(broker: object, topic: str = "T", count: int = 6) -> list[int]:
    stamps = []
    for i in range(count):
        result = await put(broker, topic, b"m%d" % i, queue_id=0)  # type: ignore[arg-type]
        stamps.append(result.store_timestamp)
        await trio.sleep(0.005)
    return stamps


async def test_topic_create_stats_delete(tmp_path: Path) -> None:
    async with running(config(tmp_path / "b")) as (broker, addresses):
        admin = AdminClient()
        address = fmt(addresses.broker)
        await admin.create_topic(
            address,
            CreateTopicRequestHeader("Orders", read_queue_nums=3, write_queue_nums=3, perm=6),
        )
        assert broker.topic_table.get("Orders") is not None
        assert broker.topic_table.get("Orders").write_queue_nums == 3  # type: ignore[union-attr]
        for i in range(4):
            await put(broker, "Orders", b"x%d" % i, queue_id=1)
        stats = await admin.topic_stats(address, "Orders")
        queues = {q.queue_id: o for q, o in stats.offset_table.items()}
        assert sorted(queues) == [0, 1, 2]
        assert (queues[1].min_offset, queues[1].max_offset) == (0, 4)
        assert queues[1].last_update_timestamp > 0
        assert queues[0].max_offset == 0
        assert {q.broker_name for q in stats.offset_table} == {broker.config.broker_name}

        # shrunk by an admin: the store's third queue does not grow it back
        await put(broker, "Orders", b"last", queue_id=2)
        await admin.create_topic(
            address, CreateTopicRequestHeader("Orders", read_queue_nums=2, write_queue_nums=2)
        )
        assert broker.topics()["Orders"] == 2
        # registered as set: read and write queues apart, read-only
        await admin.create_topic(
            address,
            CreateTopicRequestHeader("Orders", read_queue_nums=2, write_queue_nums=1, perm=4),
        )
        table = broker.registration().body().topic_config_serialize_wrapper.topic_config_table
        orders = table["Orders"]
        assert (orders.read_queue_nums, orders.write_queue_nums, orders.perm) == (2, 1, 4)

        await admin.delete_topic_in_broker(address, "Orders")
        assert broker.topic_table.get("Orders") is None
        assert not (tmp_path / "b" / "consumequeue" / "Orders").exists()
        assert "Orders" not in broker.topics()  # the store's queues do not bring it back
        with pytest.raises(RemotingResponseError) as caught:
            await admin.topic_stats(address, "Orders")
        assert caught.value.code == ResponseCode.TOPIC_NOT_EXIST


async def test_system_topics_and_bad_queues_are_refused(tmp_path: Path) -> None:
    async with running(config(tmp_path / "b")) as (broker, addresses):
        admin = AdminClient()
        address = fmt(addresses.broker)
        for header, words in (
            (CreateTopicRequestHeader("SCHEDULE_TOPIC_XXXX"), "system topic"),
            (CreateTopicRequestHeader("bad topic"), "illegal"),
            (CreateTopicRequestHeader("T", read_queue_nums=0), "readQueueNums 0"),
        ):
            with pytest.raises(RemotingResponseError) as caught:
                await admin.create_topic(address, header)
            assert caught.value.code == ResponseCode.SYSTEM_ERROR
            assert words in str(caught.value)
        assert broker.topic_table.get("T") is None


async def test_a_topics_permission_is_enforced(tmp_path: Path) -> None:
    async with running(config(tmp_path / "b")) as (_, addresses):
        admin = AdminClient()
        address = fmt(addresses.broker)
        await admin.create_topic(address, CreateTopicRequestHeader("RO", perm=4))
        await admin.create_topic(address, CreateTopicRequestHeader("WO", perm=2))
        async with RemotingConnection.connect(*addresses.broker) as conn:  # type: ignore[misc]
            refused = await send(conn, "RO")
            assert refused.code == ResponseCode.NO_PERMISSION
            assert "sending message is forbidden" in (refused.remark or "")
            assert (await send(conn, "WO")).code == ResponseCode.SUCCESS
            pulled = await pull(conn, "WO", 0, 0)
            assert pulled.code == ResponseCode.NO_PERMISSION
            assert (await pull(conn, "RO", 0, 0)).code == ResponseCode.PULL_NOT_FOUND


async def test_consume_stats_and_connections(tmp_path: Path) -> None:
    async with running(config(tmp_path / "b")) as (broker, addresses):
        admin = AdminClient()
        address = fmt(addresses.broker)
        await _broker_with_messages(broker)
        broker.offsets.commit("G", "T", 0, 2)
        stats = await admin.consume_stats(address, "G")
        mine = stats.offset_table[MessageQueue("T", broker.config.broker_name, 0)]
        assert (mine.broker_offset, mine.consumer_offset) == (6, 2)
        assert mine.last_timestamp > 0
        assert stats.total_diff == 4
        with pytest.raises(RemotingResponseError) as caught:
            await admin.consumer_connections(address, "G")
        assert caught.value.code == ResponseCode.CONSUMER_NOT_ONLINE
        assert broker.metrics.exposition().count(b'hanet_consumer_lag_messages{group="G"') == 1
        assert b'hanet_consumer_lag_messages{group="G",queue="0",topic="T"} 4.0' in (
            broker.metrics.exposition()
        )

        host, port = addresses.broker  # type: ignore[misc]
        async with RemotingConnection.connect(host, port) as client:
            request = heartbeat_request("client-1", "G")
            request = RemotingCommand(
                request.code, LanguageCode.CPP, 399, body=request.body, ext_fields={}
            )
            assert (await client.invoke(request)).code == ResponseCode.SUCCESS
            connections = await admin.consumer_connections(address, "G")
            (member,) = connections.connection_set
            assert (member.client_id, member.language, member.version) == ("client-1", "CPP", 399)
            assert member.client_addr.startswith("127.0.0.1:")
            assert set(connections.subscription_table) == {"T"}
            with pytest.raises(RemotingResponseError):
                await admin.producer_connections(address, "P")
            producer = HeartbeatData("client-2", producer_data_set=(ProducerData("P"),))
            answer = await client.invoke(
                RemotingCommand.request(RequestCode.HEART_BEAT, body=producer.to_json())
            )
            assert answer.code == ResponseCode.SUCCESS
            (member,) = (await admin.producer_connections(address, "P")).connection_set
            assert (member.client_id, member.language) == ("client-2", "JAVA")


async def test_subscription_groups(tmp_path: Path) -> None:
    root = tmp_path / "b"
    async with running(config(root)) as (broker, addresses):
        admin = AdminClient()
        address = fmt(addresses.broker)
        group = SubscriptionGroupConfig("G2", consume_enable=False, retry_max_times=3)
        await admin.update_subscription_group(address, group)
        async with RemotingConnection.connect(*addresses.broker) as conn:  # type: ignore[misc]
            answer = await conn.invoke_checked(
                RemotingCommand.request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
            )
        assert SubscriptionGroupWrapper.from_json(answer.body).groups["G2"] == group
        broker.offsets.commit("G2", "T", 0, 5)
    async with running(config(root)) as (broker, addresses):  # kept in subscriptionGroup.json
        assert broker.subscription_groups().groups["G2"] == group
        await AdminClient().delete_subscription_group(
            fmt(addresses.broker), "G2", remove_offset=True
        )
        assert "G2" not in broker.subscription_groups().groups
        assert broker.offsets.query("G2", "T", 0) == -1


async def test_reset_offset_reaches_live_consumers(tmp_path: Path) -> None:
    async with running(config(tmp_path / "b")) as (broker, addresses):
        admin = AdminClient()
        address = fmt(addresses.broker)
        broker.topic_table.ensure("T", 1)
        stamps = await _broker_with_messages(broker)
        broker.offsets.commit("G", "T", 0, 6)
        # no member online: CONSUMER_NOT_ONLINE, and mqadmin's old way commits directly
        assert await admin.invoke_reset_offset(address, "T", "G", stamps[2]) is None

        pushed: list[RemotingCommand] = []
        async with RemotingConnection.connect(
            *addresses.broker,  # type: ignore[misc]
            on_request=pushed.append,
        ) as consumer:
            assert (await consumer.invoke(heartbeat_request("c1", "G"))).code == 0
            body = await admin.invoke_reset_offset(address, "T", "G", stamps[2])
            assert body is not None
            assert body.offset_table == {MessageQueue("T", broker.config.broker_name, 0): 2}

            def resets() -> list[RemotingCommand]:
                return [r for r in pushed if r.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET]

            await wait_until(lambda: bool(resets()))
            (push,) = resets()
            assert push.is_oneway
            header = ResetOffsetRequestHeader.from_fields(push.fields)
            assert (header.topic, header.group, header.timestamp) == ("T", "G", stamps[2])
            assert ResetOffsetBody.decode(push.body) == body
            # asked in C++'s language: the C++ clients' body (ResetOffsetBodyForC)
            fields = ResetOffsetRequestHeader("T", "G", stamps[2], True).to_fields()
            request = RemotingCommand(
                RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, LanguageCode.CPP, ext_fields=fields
            )
            async with RemotingConnection.connect(*addresses.broker) as cpp:  # type: ignore[misc]
                assert (await cpp.invoke(request)).code == ResponseCode.SUCCESS
            await wait_until(lambda: len(resets()) == 2)
            assert json.loads(bytes(resets()[1].body)) == {
                "offsetTable": [
                    {
                        "brokerName": broker.config.broker_name,
                        "offset": 2,
                        "queueId": 0,
                        "topic": "T",
                    }
                ]
            }
            assert broker.offsets.query("G", "T", 0) == 2  # committed at once too

            # a client that ignored the push: its stale commit is dropped, its pull moved
            moved = await pull(consumer, "T", 0, 6, group="G", commit_offset=6)
            assert moved.code == ResponseCode.PULL_OFFSET_MOVED
            assert moved.header is not None and moved.header.next_begin_offset == 2
            assert broker.offsets.query("G", "T", 0) == 2
            again = await pull(consumer, "T", 0, 2, group="G")
            assert again.code == ResponseCode.SUCCESS
            assert [r.queue_offset for r in again.records][:1] == [2]


async def test_reset_offset_by_time_without_consumers(tmp_path: Path) -> None:
    async with running(config(tmp_path / "b")) as (broker, addresses):
        admin = AdminClient()
        address = fmt(addresses.broker)
        broker.topic_table.ensure("T", 1)
        stamps = await _broker_with_messages(broker)
        broker.offsets.commit("G", "T", 0, 1)
        stats = await admin.consume_stats(address, "G", "T")
        (queue,) = stats.offset_table
        # the old way, by hand: search, then commit
        target = await admin.search_offset(address, "T", 0, stamps[4])
        assert target == 4
        await admin.commit_offset(address, "G", queue, target)
        assert broker.offsets.query("G", "T", 0) == 4
        assert stats.offset_table[queue] == OffsetWrapper(6, 1, stamps[0])


async def test_broker_config(tmp_path: Path) -> None:
    async with running(config(tmp_path / "b")) as (broker, addresses):
        admin = AdminClient()
        address = fmt(addresses.broker)
        settings = await admin.broker_config(address)
        assert settings["brokerName"] == broker.config.broker_name
        assert settings["slaveReadEnable"] == "false"
        assert settings["flushConsumerOffsetInterval"] == "5000"
        await admin.update_broker_config(
            address, {"slaveReadEnable": "true", "defaultTopicQueueNums": "2"}
        )
        assert broker.config.slave_read_enable
        assert broker.topic_table.default_queues == 2
        assert (await admin.broker_config(address))["slaveReadEnable"] == "true"
        with pytest.raises(RemotingResponseError) as caught:
            await admin.update_broker_config(
                address, {"brokerRole": "SLAVE", "slaveReadEnable": "false"}
            )
        assert caught.value.code == ResponseCode.NO_PERMISSION
        assert "brokerRole" in str(caught.value) and "restart" in str(caught.value)
        assert broker.config.slave_read_enable  # nothing changed


async def test_runtime_info(tmp_path: Path) -> None:
    async with running(config(tmp_path / "b")) as (broker, addresses):
        await _broker_with_messages(broker, count=2)
        info = await AdminClient().runtime_info(fmt(addresses.broker))
        assert info["brokerVersionDesc"] == "V4_9_8"
        assert info["msgPutTotalTodayNow"] == "2"
        assert info["msgGetTotalTodayNow"] == "0"
        async with RemotingConnection.connect(*addresses.broker) as conn:  # type: ignore[misc]
            assert len((await pull(conn, "T", 0, 0)).records) == 2
        info = await AdminClient().runtime_info(fmt(addresses.broker))
        assert info["msgGetTotalTodayNow"] == "2"
        assert int(info["commitLogMaxOffset"]) == broker.store.max_offset
        assert int(info["earliestMessageTimeStamp"]) > 0
        assert len(info["putTps"].split()) == 3


async def test_modifications_refused_on_a_slave(tmp_path: Path) -> None:
    from hanet.ha import BrokerRole

    cfg = config(tmp_path / "s", broker_role=BrokerRole.SLAVE, ha_master_address="127.0.0.1:1")
    async with running(cfg) as (_, addresses):
        with pytest.raises(RemotingResponseError) as caught:
            await AdminClient().create_topic(fmt(addresses.broker), CreateTopicRequestHeader("T"))
        assert "slave" in str(caught.value)
