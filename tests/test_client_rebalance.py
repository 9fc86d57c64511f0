"""Consumers of one group share a topic's queues (RocketMQ's rebalance): the allocation, and
two consumers against an in-process name server and master: split, one leaving cleanly, one
dying without a word (expired)."""

from __future__ import annotations

from collections import Counter
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
import trio
from broker_support import registered_master

from hanet.broker import Broker
from hanet.client import (
    BrokerClient,
    ConsumedMessage,
    Consumer,
    NameServerClient,
    PutMessage,
    allocate_averagely,
    default_client_id,
)

TOPIC = "T"
GROUP = "G"
QUEUES = 4

# -- the allocation (RocketMQ's AllocateMessageQueueAveragely vectors) ------------------------


def shares(queues: int, members: int) -> list[list[int]]:
    ids = [f"c{i}" for i in range(members)]
    return [allocate_averagely(list(range(queues)), ids, cid) for cid in ids]


def test_eight_queues_three_consumers() -> None:
    assert shares(8, 3) == [[0, 1, 2], [3, 4, 5], [6, 7]]


def test_two_queues_three_consumers() -> None:
    assert shares(2, 3) == [[0], [1], []]


@pytest.mark.parametrize(("queues", "members"), [(1, 1), (4, 2), (5, 2), (7, 4), (3, 5), (16, 3)])
def test_every_queue_goes_to_exactly_one_member(queues: int, members: int) -> None:
    taken = [q for share in shares(queues, members) for q in share]
    assert sorted(taken) == list(range(queues))
    sizes = [len(share) for share in shares(queues, members)]
    assert max(sizes) - min(sizes) <= 1
    assert sizes == sorted(sizes, reverse=True)  # the first members take one more


def test_a_stranger_or_nothing_to_share_gets_nothing() -> None:
    assert allocate_averagely([0, 1], ["a", "b"], "z") == []
    assert allocate_averagely([], ["a"], "a") == []


def test_default_client_ids_are_host_pid_random() -> None:
    first, second = default_client_id(), default_client_id()
    assert first != second
    assert first.count("@") == 2 and first.split("@")[:2] == second.split("@")[:2]


# -- two consumers against a broker -----------------------------------------------------------


def cluster(tmp_path: Path, **options: Any) -> AbstractAsyncContextManager[tuple[str, str, Broker]]:
    """A name server and a master holding ``T`` (4 queues), registered: the name server's
    address, the broker's and the broker."""
    return registered_master(tmp_path / "master", TOPIC, QUEUES, **options)


def consumer(names: str, client_id: str, **options: Any) -> Any:
    host, port = names.rsplit(":", 1)
    options.setdefault("heartbeat_interval", 0.2)
    options.setdefault("rebalance_interval", 1.0)
    options.setdefault("commit_interval", 0.2)
    options.setdefault("poll_interval", 0.05)
    options.setdefault("buffer", 0)
    return Consumer.open(
        NameServerClient([(host, int(port))]),
        GROUP,
        TOPIC,
        from_beginning=True,
        client_id=client_id,
        **options,
    )


async def produce(broker: Broker, start: int, count: int) -> list[bytes]:
    """``count`` numbered bodies, round robin over the queues."""
    address = broker.addresses.broker
    assert address is not None
    bodies = [b"m%d" % i for i in range(start, start + count)]
    async with BrokerClient.connect("127.0.0.1", address[1]) as client:
        replies = await client.put_batch(
            [PutMessage(TOPIC, body, queue_id=i % QUEUES) for i, body in enumerate(bodies)]
        )
    assert all(reply.ok for reply in replies)
    return bodies


async def settled(*consumers: Consumer) -> None:
    """Wait until the consumers hold every queue between them, each one once."""
    with trio.fail_after(10):
        while True:
            held = [key for c in consumers for key in c.assigned]
            members = {c.members for c in consumers}
            if len(held) == QUEUES and len(set(held)) == QUEUES and len(members) == 1:
                return
            await trio.sleep(0.05)


async def collect(consumer: Consumer, into: list[ConsumedMessage], count: int) -> None:
    async for message in consumer:
        into.append(message)
        if len(into) >= count:
            return


async def drain(consumers: list[Consumer], expected: int) -> list[list[ConsumedMessage]]:
    """Take messages from every consumer until ``expected`` came in all."""
    got: list[list[ConsumedMessage]] = [[] for _ in consumers]
    with trio.fail_after(15):
        while sum(len(g) for g in got) < expected:
            async with trio.open_nursery() as nursery:
                for c, into in zip(consumers, got, strict=True):

                    async def one(c: Consumer = c, into: list[ConsumedMessage] = into) -> None:
                        with trio.move_on_after(0.1):
                            message = await anext(c)
                            into.append(message)

                    nursery.start_soon(one)
    return got


def bodies_of(messages: list[ConsumedMessage]) -> Counter[bytes]:
    return Counter(m.body for m in messages)


async def test_two_consumers_split_the_queues_and_consume_each_message_once(
    tmp_path: Path,
) -> None:
    async with cluster(tmp_path) as (names, _, broker):
        async with consumer(names, "a") as first, consumer(names, "b") as second:
            await settled(first, second)
            assert first.members == second.members == ("a", "b")
            assert first.assigned == [("broker-a", 0), ("broker-a", 1)]
            assert second.assigned == [("broker-a", 2), ("broker-a", 3)]
            produced = await produce(broker, 0, 40)
            got = await drain([first, second], 40)
            await trio.sleep(0.3)  # nothing more comes
            assert first.buffered == second.buffered == 0
        assert bodies_of(got[0] + got[1]) == Counter(produced)  # each exactly once
        assert {m.queue_id for m in got[0]} == {0, 1}
        assert {m.queue_id for m in got[1]} == {2, 3}
        assert len(got[0]) == len(got[1]) == 20
        # Both left the group at exit.
        assert broker.consumers.members(GROUP) == ()


async def test_when_one_leaves_the_other_takes_every_queue_from_the_committed_offsets(
    tmp_path: Path,
) -> None:
    async with cluster(tmp_path) as (names, _, broker):
        async with consumer(names, "a") as first:
            async with consumer(names, "b") as second:
                await settled(first, second)
                produced = await produce(broker, 0, 40)
                got = await drain([first, second], 40)
                # b consumed its half and leaves (commit, unregister) ...
            # ... a takes b's queues from b's committed offsets: the rest, nothing skipped.
            await settled(first)
            assert first.assigned == [("broker-a", q) for q in range(QUEUES)]
            late = await produce(broker, 40, 20)
            rest: list[ConsumedMessage] = []
            with trio.fail_after(15):
                await collect(first, rest, 20)
        everything = got[0] + got[1] + rest
        assert set(bodies_of(everything)) == set(produced + late)
        assert bodies_of(rest) == Counter(late)  # b's commit held: nothing again
        assert first.stats.rebalances >= 2


async def test_a_member_that_dies_is_expired_and_its_queues_taken_over(
    tmp_path: Path,
) -> None:
    async with cluster(tmp_path, consumer_expiry=1.0) as (names, _, broker):
        address = broker.addresses.broker
        assert address is not None
        async with BrokerClient.connect("127.0.0.1", address[1]) as ghost:
            # "a-ghost" sorts first: it owns queues 0 and 1; it consumed 3 of queue 0.
            await ghost.consumer_heartbeat(GROUP, "a-ghost")
            await ghost.commit_offset(GROUP, TOPIC, 0, 3)
            async with consumer(names, "b") as survivor:
                with trio.fail_after(10):
                    while survivor.assigned != [("broker-a", 2), ("broker-a", 3)]:  # noqa: ASYNC110
                        await trio.sleep(0.05)
                assert survivor.members == ("a-ghost", "b")
                # The ghost dies without unregistering: after the expiry (1 s here, 120 s
                # by default) the survivor holds every queue, queue 0 from the ghost's commit.
                produced = await produce(broker, 0, 40)
                got: list[ConsumedMessage] = []
                with trio.fail_after(15):
                    await collect(survivor, got, 40 - 3)
                assert survivor.members == ("b",)
                assert survivor.assigned == [("broker-a", q) for q in range(QUEUES)]
        skipped = {b"m0", b"m4", b"m8"}  # queue 0's first three: the ghost consumed them
        assert bodies_of(got) == Counter(b for b in produced if b not in skipped)


async def test_a_member_joining_or_leaving_rebalances_the_others_at_once(
    tmp_path: Path,
) -> None:
    """The broker's NOTIFY_CONSUMER_IDS_CHANGED: with heartbeats and periodic rebalances 1000 s
    apart, the first member still gives up half its queues as soon as the second joins, and
    takes them back as soon as it leaves."""
    quiet = {"heartbeat_interval": 1000.0, "rebalance_interval": 1000.0}
    async with cluster(tmp_path) as (names, _, _broker), consumer(names, "a", **quiet) as first:
        await settled(first)
        async with consumer(names, "b", **quiet) as second:
            await settled(first, second)
            assert first.assigned == [("broker-a", 0), ("broker-a", 1)]
            assert first.notifications >= 1
        await settled(first)
        assert first.assigned == [("broker-a", q) for q in range(QUEUES)]
