"""Consumer group membership on the broker: the registry (join, renew, expiry after 120 s,
unregister) in virtual time, and HEART_BEAT, UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP and
NOTIFY_CONSUMER_IDS_CHANGED on a broker's port."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing
from broker_support import config, connect, heartbeat_request, members, running, status

from hanet.broker import (
    CONSUMER_EXPIRY,
    ConsumerRegistry,
    ConsumerRegistryFull,
)
from hanet.protocol import (
    ConsumerGroupInfo,
    NotifyConsumerIdsChangedRequestHeader,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    UnregisterClientRequestHeader,
)

FIXTURES = Path(__file__).parent / "fixtures" / "remoting" / "java"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_expiry_is_rocketmq_channel_expiry() -> None:
    assert CONSUMER_EXPIRY == 120.0


def test_join_renew_and_expire_after_120_s() -> None:
    clock = Clock()
    registry = ConsumerRegistry(clock=clock)
    assert registry.members("G") == ()
    assert registry.heartbeat("G", "b@2@y") is True
    assert registry.heartbeat("G", "a@1@x") is True
    assert registry.heartbeat("G", "a@1@x") is False  # a renewal, not a join
    assert registry.heartbeat("other", "c@3@z") is True
    assert registry.members("G") == ("a@1@x", "b@2@y")
    clock.now += 60
    registry.heartbeat("G", "a@1@x")
    clock.now += 60  # b heard from 120 s ago: still a member (expiry is "more than")
    assert registry.members("G") == ("a@1@x", "b@2@y")
    clock.now += 0.001
    assert registry.members("G") == ("a@1@x",)
    assert registry.groups() == {"G": ("a@1@x",)}  # "other" expired too
    clock.now += 60
    assert registry.members("G") == ()
    assert registry.groups() == {}
    assert registry.heartbeat("G", "a@1@x") is True  # back: a new join


def test_unregister_leaves_at_once() -> None:
    clock = Clock()
    registry = ConsumerRegistry(clock=clock)
    registry.heartbeat("G", "a")
    registry.heartbeat("G", "b")
    assert registry.unregister("G", "a") is True
    assert registry.members("G") == ("b",)
    assert registry.unregister("G", "a") is False
    assert registry.unregister("nobody", "a") is False
    assert registry.unregister("G", "b") is True
    assert registry.groups() == {}


def test_a_renewed_member_outlives_older_ones_across_groups() -> None:
    clock = Clock()
    registry = ConsumerRegistry(expiry=10.0, clock=clock)
    registry.heartbeat("G", "a")
    registry.heartbeat("H", "b")
    clock.now += 6
    registry.heartbeat("G", "c")
    registry.heartbeat("G", "a")  # renewed: now the newest
    clock.now += 6
    assert registry.groups() == {"G": ("a", "c")}
    registry.unregister("G", "c")
    clock.now += 5
    assert registry.groups() == {}


def test_short_expiry_and_a_bad_one() -> None:
    clock = Clock()
    registry = ConsumerRegistry(expiry=1.0, clock=clock)
    registry.heartbeat("G", "a")
    clock.now += 1.5
    assert registry.members("G") == ()
    with pytest.raises(ValueError, match="positive"):
        ConsumerRegistry(expiry=0)


async def test_the_registry_follows_trio_virtual_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    registry = ConsumerRegistry(clock=trio.current_time)
    registry.heartbeat("G", "a")
    await trio.sleep(100)
    registry.heartbeat("G", "b")
    await trio.sleep(30)
    assert registry.members("G") == ("b",)
    await trio.sleep(91)
    assert registry.members("G") == ()


# -- on the wire ------------------------------------------------------------------------------


def unregister_request(client_id: str, group: str) -> RemotingCommand:
    header = UnregisterClientRequestHeader(client_id, consumer_group=group)
    return RemotingCommand.request(RequestCode.UNREGISTER_CLIENT, header.to_fields())


async def test_a_broker_serves_heartbeats_lists_and_unregistrations(tmp_path: Path) -> None:
    async with running(config(tmp_path)) as (broker, addresses), connect(addresses.broker) as c:
        assert await members(c, "G") == ()
        for client_id, group in (("b@2@y", "G"), ("a@1@x", "G"), ("c@3@z", "H")):
            answer = await c.invoke(heartbeat_request(client_id, group))
            assert answer.code == ResponseCode.SUCCESS
        assert await members(c, "G") == ("a@1@x", "b@2@y")
        await c.invoke_checked(unregister_request("a@1@x", "G"))
        await c.invoke_checked(unregister_request("never-joined", "G"))
        assert await members(c, "G") == ("b@2@y",)
        assert await members(c, "H") == ("c@3@z",)
        doc = await status(c)  # the groups travel in the status document, JSON both ways
        # The retry topics are created with one queue (RocketMQ's retryQueueNums).
        counts = broker.topic_table.queue_counts()
        assert (counts["%RETRY%G"], counts["%RETRY%H"]) == (1, 1)
    assert doc.consumer_groups == (
        ConsumerGroupInfo("G", ("b@2@y",)),
        ConsumerGroupInfo("H", ("c@3@z",)),
    )
    assert doc.to_json()["consumer_groups"][0] == {"group": "G", "members": ["b@2@y"]}


async def test_only_a_members_own_connection_unregisters_it(tmp_path: Path) -> None:
    async with (
        running(config(tmp_path)) as (_, addresses),
        connect(addresses.broker) as member,
        connect(addresses.broker) as stranger,
    ):
        await member.invoke_checked(heartbeat_request("a@1@x", "G"))
        # Another connection naming the member's client id: RocketMQ removes a member by its
        # channel, so this leaves it in the group.
        await stranger.invoke_checked(unregister_request("a@1@x", "G"))
        assert await members(stranger, "G") == ("a@1@x",)
        await member.invoke_checked(unregister_request("a@1@x", "G"))
        assert await members(stranger, "G") == ()


async def test_the_captured_java_heartbeat_and_list_are_served(tmp_path: Path) -> None:
    from hanet.protocol import decode_command

    def frame(name: str) -> RemotingCommand:
        data = (FIXTURES / f"02-broker-produce-consume__{name}.bin").read_bytes()
        return decode_command(data[4:])

    async with running(config(tmp_path)) as (_, addresses), connect(addresses.broker) as c:
        assert (await c.invoke(frame("HEART_BEAT__request"))).code == ResponseCode.SUCCESS
        answer = await c.invoke(frame("GET_CONSUMER_LIST_BY_GROUP__request"))
        captured = frame("GET_CONSUMER_LIST_BY_GROUP__response_SUCCESS")
        assert bytes(answer.body) == bytes(captured.body)
        unknown = await c.invoke(
            RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "X"})
        )
        assert unknown.code == ResponseCode.SYSTEM_ERROR and "no consumer" in str(unknown.remark)


async def test_members_are_told_when_their_group_changes(tmp_path: Path) -> None:
    told: dict[str, list[str]] = {"a": [], "b": []}

    def listener(name: str):  # type: ignore[no-untyped-def]
        def on_request(request: RemotingCommand) -> None:
            assert request.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED and request.is_oneway
            told[name].append(
                NotifyConsumerIdsChangedRequestHeader.from_fields(request.fields).consumer_group
            )

        return on_request

    async with (
        running(config(tmp_path)) as (_, addresses),
        connect(addresses.broker, on_request=listener("a")) as a,
    ):
        if True:
            await a.invoke_checked(heartbeat_request("a", "G"))
            async with connect(addresses.broker, on_request=listener("b")) as b:
                await b.invoke_checked(heartbeat_request("b", "G"))
                await b.invoke_checked(heartbeat_request("b", "G"))  # a renewal: no news
                with trio.fail_after(5):
                    while len(told["a"]) < 2:  # noqa: ASYNC110 - waits for the broker's news
                        await trio.sleep(0.01)
                assert told == {"a": ["G", "G"], "b": ["G"]}
            # b's connection closed: it left the group, a is told.
            with trio.fail_after(5):
                while len(told["a"]) < 3:  # noqa: ASYNC110
                    await trio.sleep(0.01)
            assert await members(a, "G") == ("a",)
            await a.invoke_checked(unregister_request("a", "G"))
            assert await members(a, "G") == ()


async def test_members_that_stop_heartbeating_expire(tmp_path: Path) -> None:
    async with (
        running(config(tmp_path), consumer_expiry=0.3) as (_, addresses),
        connect(addresses.broker) as c,
    ):
        await c.invoke_checked(heartbeat_request("a", "G"))
        await c.invoke_checked(heartbeat_request("b", "G"))
        for _ in range(4):
            await trio.sleep(0.1)
            await c.invoke_checked(heartbeat_request("b", "G"))
        assert await members(c, "G") == ("b",)


def test_heartbeats_cannot_grow_the_registry_without_bound() -> None:
    registry = ConsumerRegistry(max_members=2, max_groups=2)
    registry.heartbeat("G", "a")
    registry.heartbeat("G", "b")
    with pytest.raises(ConsumerRegistryFull, match="has 2 members already"):
        registry.heartbeat("G", "c")
    assert registry.heartbeat("G", "a") is False  # a member renews
    registry.heartbeat("H", "a")
    with pytest.raises(ConsumerRegistryFull, match="2 consumer groups already"):
        registry.heartbeat("I", "a")
    assert registry.members("G") == ("a", "b")
    with pytest.raises(ValueError, match="bad bounds"):
        ConsumerRegistry(max_members=70_000)
