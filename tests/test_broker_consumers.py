"""Consumer group membership on the broker: the registry (join, renew, expiry after 120 s,
unregister) in virtual time, and the three requests on a broker's port."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing
from broker_support import config, running

from hanet.broker import (
    CONSUMER_EXPIRY,
    ConsumerRegistry,
    ConsumerRegistryFull,
)
from hanet.cli import build_parser
from hanet.client import BrokerClient
from hanet.protocol import ConsumerGroupInfo


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


async def test_a_broker_serves_heartbeats_lists_and_unregistrations(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with running(config(tmp_path)) as (_, addresses):
        assert addresses.broker is not None
        async with BrokerClient.connect(*addresses.broker) as client:
            assert await client.consumer_list("G") == ()
            await client.consumer_heartbeat("G", "b@2@y")
            await client.consumer_heartbeat("G", "a@1@x")
            await client.consumer_heartbeat("H", "c@3@z")
            assert await client.consumer_list("G") == ("a@1@x", "b@2@y")
            await client.unregister_consumer("G", "a@1@x")
            await client.unregister_consumer("G", "never-joined")
            assert await client.consumer_list("G") == ("b@2@y",)
            assert await client.consumer_list("H") == ("c@3@z",)
            status = await client.status()  # the groups travel in STATUS, JSON both ways
        assert status.consumer_groups == (
            ConsumerGroupInfo("G", ("b@2@y",)),
            ConsumerGroupInfo("H", ("c@3@z",)),
        )
        assert status.to_json()["consumer_groups"][0] == {"group": "G", "members": ["b@2@y"]}
        host, port = addresses.broker
        args = build_parser().parse_args(["status", "--broker", f"{host}:{port}"])
        assert await args.func(args) == 0
        text = capsys.readouterr().out
        assert "consumer group G" in text and "1 member: b@2@y" in text


async def test_members_that_stop_heartbeating_expire(tmp_path: Path) -> None:
    async with running(config(tmp_path), consumer_expiry=0.3) as (_, addresses):
        assert addresses.broker is not None
        async with BrokerClient.connect(*addresses.broker) as client:
            await client.consumer_heartbeat("G", "a")
            await client.consumer_heartbeat("G", "b")
            for _ in range(4):
                await trio.sleep(0.1)
                await client.consumer_heartbeat("G", "b")
            assert await client.consumer_list("G") == ("b",)


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
