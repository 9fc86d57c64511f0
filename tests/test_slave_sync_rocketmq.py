"""A slave's metadata sync in RocketMQ 4.9.8's shapes: a hanet slave syncing from a fake
RocketMQ master over memory streams in virtual time (3 s after it knows its master, then every
10 s; RocketMQ's answers, see ``fixtures/remoting/slave_sync/README.md``), and a hanet master's
answers read as a RocketMQ slave reads them."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from broker_support import commit, config, connect, heartbeat_request, put, running

from hanet.boot import Connector, run_channel
from hanet.broker import ConsumerOffsets, SlaveSync, TopicTable
from hanet.channel import HandlerContext, StreamChannel
from hanet.protocol import (
    RemotingCommand,
    RemotingDispatcher,
    RequestCode,
    UpdateConsumerOffsetRequestHeader,
    decode_command,
    remoting_pipeline,
)
from hanet.testing import free_ports

FIXTURES = Path(__file__).parent / "fixtures" / "remoting"
SYNC_CODES = [
    RequestCode.GET_ALL_TOPIC_CONFIG,
    RequestCode.GET_ALL_CONSUMER_OFFSET,
    RequestCode.GET_ALL_DELAY_OFFSET,
    RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
]


def captured_topic_config() -> bytes:
    """A 4.9.8 master's GET_ALL_TOPIC_CONFIG body: the topic config wrapper of its captured
    registration, byte for byte (the same object ``TopicConfigManager.encode()`` writes)."""
    frame = FIXTURES / "java" / "02-broker-produce-consume__REGISTER_BROKER__oneway.bin"
    body = bytes(decode_command(frame.read_bytes()[4:]).body)
    prefix = b'{"filterServerList":[],"topicConfigSerializeWrapper":'
    assert body.startswith(prefix) and body.endswith(b"}")
    return body[len(prefix) : -1]


def rocketmq_answers() -> dict[int, bytes]:
    folder = FIXTURES / "slave_sync"
    return {
        RequestCode.GET_ALL_TOPIC_CONFIG: captured_topic_config(),
        RequestCode.GET_ALL_CONSUMER_OFFSET: (folder / "GET_ALL_CONSUMER_OFFSET.body").read_bytes(),
        RequestCode.GET_ALL_DELAY_OFFSET: (folder / "GET_ALL_DELAY_OFFSET.body").read_bytes(),
        RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: (
            folder / "GET_ALL_SUBSCRIPTIONGROUP_CONFIG.body"
        ).read_bytes(),
    }


@attrs.define
class FakeMaster:
    """A RocketMQ master's broker port as a slave sees it, over memory streams: answers the
    four sync requests with ``answers`` and takes UPDATE_CONSUMER_OFFSET; records every
    request as ``(trio time, master, code)``."""

    nursery: trio.Nursery
    answers: dict[int, bytes] = attrs.Factory(rocketmq_answers)
    seen: list[tuple[float, str, int]] = attrs.Factory(list)
    offsets_taken: list[tuple[str, str, int, int]] = attrs.Factory(list)

    def _processors(self, name: str) -> dict[int, Any]:
        def answer(ctx: HandlerContext, request: RemotingCommand) -> RemotingCommand:
            self.seen.append((trio.current_time(), name, request.code))
            return request.response(body=self.answers[request.code])

        def update(ctx: HandlerContext, request: RemotingCommand) -> RemotingCommand:
            self.seen.append((trio.current_time(), name, request.code))
            h = UpdateConsumerOffsetRequestHeader.from_fields(request.fields)
            self.offsets_taken.append((h.topic, h.consumer_group, h.queue_id, h.commit_offset))
            return request.response()

        table: dict[int, Any] = {code: answer for code in SYNC_CODES}
        table[RequestCode.UPDATE_CONSUMER_OFFSET] = update
        return table

    def connector(self, address: tuple[str, int]) -> Connector:
        name = f"{address[0]}:{address[1]}"

        async def open_stream() -> trio.abc.Stream:
            ours, theirs = trio.testing.memory_stream_pair()

            def initialize(channel: StreamChannel) -> None:
                for handler_name, handler in remoting_pipeline():
                    channel.pipeline.add_last(handler, handler_name)
                channel.pipeline.add_last(
                    RemotingDispatcher(self._processors(name), port="fake RocketMQ master")
                )

            await self.nursery.start(partial(run_channel, theirs, initialize))
            return ours

        return open_stream

    def rounds(self, master: str) -> list[float]:
        """When each sync round (its GET_ALL_TOPIC_CONFIG) reached ``master``."""
        return [
            round(t, 3)
            for t, m, c in self.seen
            if m == master and c == RequestCode.GET_ALL_TOPIC_CONFIG
        ]


def slave_sync(fake: FakeMaster, master: str | None, store: Path | None = None) -> SlaveSync:
    """A slave's sync from ``master`` through ``fake``; its files under ``store`` (None: in
    memory only, no worker thread: the virtual clock would jump while one writes)."""
    config_dir = None if store is None else store / "config"
    return SlaveSync(
        ConsumerOffsets(None if config_dir is None else config_dir / "consumerOffset.json"),
        TopicTable(None if config_dir is None else config_dir / "topics.json"),
        store,
        master_address=master,
        connector=fake.connector,
    )


async def test_3_s_after_the_master_is_known_then_every_10_s(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with trio.open_nursery() as nursery:
        fake = FakeMaster(nursery)
        sync = slave_sync(fake, None)
        start = trio.current_time()
        await nursery.start(sync.run)
        await trio.sleep(30)
        assert fake.seen == []  # no master known: nothing asked
        sync.set_master_address("10.0.0.1:10911")  # learned from a name server's answer
        await trio.sleep(25)
        assert [t - start for t in fake.rounds("10.0.0.1:10911")] == [33.0, 43.0, 53.0]
        # Each round asks the four requests in RocketMQ's order (syncAll).
        assert [c for _, _, c in fake.seen[:4]] == SYNC_CODES
        # The master moves: 3 s after, then every 10 s from there.
        sync.set_master_address("10.0.0.2:10911")
        await trio.sleep(15)
        assert [t - start for t in fake.rounds("10.0.0.2:10911")] == [58.0, 68.0]
        assert [t - start for t in fake.rounds("10.0.0.1:10911")] == [33.0, 43.0, 53.0]
        assert sync.syncs == 5 and sync.failures == 0
        nursery.cancel_scope.cancel()


async def test_a_configured_master_is_synced_3_s_after_start(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with trio.open_nursery() as nursery:
        fake = FakeMaster(nursery)
        sync = slave_sync(fake, "10.0.0.1:10911")
        start = trio.current_time()
        await nursery.start(sync.run)
        await trio.sleep(24)
        assert [t - start for t in fake.rounds("10.0.0.1:10911")] == [3.0, 13.0, 23.0]
        nursery.cancel_scope.cancel()


async def test_a_hanet_slave_keeps_a_rocketmq_masters_metadata_in_rocketmq_files(
    tmp_path: Path,
) -> None:
    captured = json.loads(captured_topic_config())
    async with trio.open_nursery() as nursery:
        fake = FakeMaster(nursery)
        sync = slave_sync(fake, "10.0.0.1:10911", tmp_path)
        sync.offsets.commit("rmqtest_pushcg", "TestTopic", 1, 12)  # committed to the slave
        assert await sync.sync_logged()
        assert sync.syncs == 1 and sync.last_error is None
        nursery.cancel_scope.cancel()
    config_dir = tmp_path / "config"
    assert sorted(p.name for p in config_dir.iterdir() if p.suffix == ".json") == [
        "consumerOffset.json",
        "delayOffset.json",
        "subscriptionGroup.json",
        "topics.json",
    ]
    # topics.json: the master's table and data version, each config as RocketMQ wrote it.
    topics = json.loads((config_dir / "topics.json").read_text())
    assert topics["dataVersion"] == captured["dataVersion"]
    assert topics["topicConfigTable"] == captured["topicConfigTable"]
    assert sync.topics["TestTopic"] == 4 and sync.topics["SCHEDULE_TOPIC_XXXX"] == 18
    # consumerOffset.json: the master's offsets (bare integer keys read), the slave's larger
    # commit kept and given back to the master.
    offsets = json.loads((config_dir / "consumerOffset.json").read_text())
    assert offsets == {
        "offsetTable": {
            "CapTopic@cap_lite_cg": {"0": 3, "1": 2, "2": 0, "3": 5},
            "%RETRY%rmqtest_cg@rmqtest_cg": {"0": 0},
            "TestTopic@rmqtest_pushcg": {"0": 10, "1": 12, "2": 11, "3": 10},
        }
    }
    assert fake.offsets_taken == [("TestTopic", "rmqtest_pushcg", 1, 12)]
    # delayOffset.json and subscriptionGroup.json: the master's, as standard JSON.
    delay = json.loads((config_dir / "delayOffset.json").read_text())
    assert delay == {"offsetTable": {"1": 4, "3": 1}}
    groups = json.loads((config_dir / "subscriptionGroup.json").read_text())
    assert groups["dataVersion"] == {"counter": 3, "timestamp": 1795624856398}
    assert sorted(groups["subscriptionGroupTable"]) == [
        "SELF_TEST_C_GROUP",
        "cap_lite_cg",
        "rmqtest_pushcg",
    ]
    pushcg = groups["subscriptionGroupTable"]["rmqtest_pushcg"]
    assert pushcg["consumeEnable"] is False and pushcg["retryMaxTimes"] == 5
    assert not sync.subscription_groups.groups["rmqtest_pushcg"].consume_enable


async def test_a_rocketmq_slave_reads_a_hanet_masters_answers(tmp_path: Path) -> None:
    """What a 4.9.8 slave's ``SlaveSynchronize`` decodes: the same beans, keys and types as
    RocketMQ's own answers (RocketMQ's fastjson also reads quoted integer keys)."""
    captured = json.loads(captured_topic_config())
    rocketmq = rocketmq_answers()
    async with running(config(tmp_path)) as (master, addresses):
        await put(master, "TestTopic", b"x")
        async with connect(addresses.broker) as c:
            await c.invoke_checked(heartbeat_request("client-1", "rmqtest_pushcg"))
            await commit(c, "rmqtest_pushcg", "TestTopic", 1, 1)
            answers = {}
            for code in SYNC_CODES:
                answers[code] = json.loads(
                    bytes((await c.invoke_checked(RemotingCommand.request(code))).body)
                )
    topics = answers[RequestCode.GET_ALL_TOPIC_CONFIG]
    assert list(topics) == list(captured)  # dataVersion, topicConfigTable
    assert list(topics["dataVersion"]) == list(captured["dataVersion"])
    theirs = captured["topicConfigTable"]["TestTopic"]
    ours = topics["topicConfigTable"]["TestTopic"]
    assert list(ours) == list(theirs)
    assert {k: type(v) for k, v in ours.items()} == {k: type(v) for k, v in theirs.items()}
    assert ours == theirs | {"perm": ours["perm"]}  # 4 queues, SINGLE_TAG, not ordered
    offsets = answers[RequestCode.GET_ALL_CONSUMER_OFFSET]
    assert offsets == {"offsetTable": {"TestTopic@rmqtest_pushcg": {"1": 1}}}
    delay = answers[RequestCode.GET_ALL_DELAY_OFFSET]
    assert list(delay) == ["offsetTable"]
    groups = answers[RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG]
    theirs_groups = json.loads(rocketmq[RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG])
    assert list(groups) == list(theirs_groups)
    group = groups["subscriptionGroupTable"]["rmqtest_pushcg"]
    reference = theirs_groups["subscriptionGroupTable"]["cap_lite_cg"]
    assert list(group) == list(reference)
    assert group == reference | {"groupName": "rmqtest_pushcg"}


async def test_a_master_serves_rocketmqs_vip_channel_where_its_slaves_ask_for_topics(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A 4.9.8 slave asks GET_ALL_TOPIC_CONFIG on its master's port - 2 (the VIP channel)."""
    for _ in range(5):  # a fixed broker port whose port - 2 is free too
        (vip,) = free_ports(1)
        try:
            cfg = attrs.evolve(config(tmp_path), listen_port=vip + 2)
            async with running(cfg) as (master, addresses):
                await put(master, "TestTopic", b"x")
                async with connect(("127.0.0.1", vip)) as c:
                    request = RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG)
                    body = bytes((await c.invoke_checked(request)).body)
                    assert json.loads(body)["topicConfigTable"]["TestTopic"]["readQueueNums"] == 4
                async with connect(addresses.broker) as c:
                    assert bytes((await c.invoke_checked(request)).body) == body
            break
        except OSError:
            continue
    else:
        pytest.skip("no free pair of ports")
    # Port 0 (any free port): no VIP channel; a port - 2 in use: a warning, the broker runs.
    busy = trio.socket.socket()
    await busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1] + 2
    try:
        async with running(attrs.evolve(config(tmp_path), listen_port=port)) as (_, addresses):
            assert addresses.broker == ("127.0.0.1", port)
        assert "cannot serve the VIP channel (RocketMQ's broker port - 2)" in caplog.text
    except OSError:
        pass  # port itself taken meanwhile: nothing to check
    finally:
        busy.close()
    # A broker whose HA port is its port - 2 keeps its HA port and runs without the VIP channel
    (ha,) = free_ports(1)
    cfg = attrs.evolve(config(tmp_path), listen_port=ha + 2, ha_listen_port=ha)
    async with running(cfg) as (_, addresses):
        assert addresses.ha == ("127.0.0.1", ha)
    assert f"no VIP channel (RocketMQ's broker port - 2): 127.0.0.1:{ha} is this broker's HA" in (
        caplog.text
    )
