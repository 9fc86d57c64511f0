"""Long polling: suspended pulls held by PullHoldService, answered when a message arrives or at
their deadline, dropped when their connection closed, bounded; a store in a temporary
directory, pulls through the dispatch table on EmbeddedChannels, time by trio's autojump
clock."""

from __future__ import annotations

import json
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing
from broker_support import small_store

from hanet.broker import PullHoldService
from hanet.channel import HandlerContext
from hanet.protocol import (
    PullMessageRequestHeader,
    PullSysFlag,
    RemotingCodec,
    RemotingCommand,
    RemotingDispatcher,
    RequestCode,
    RequestProcessor,
    ResponseCode,
    decode_command,
    encode_command,
)
from hanet.store import CommitLogStore, Message, PutResult, PutStatus
from hanet.testing import EmbeddedChannel

FIXTURES = Path(__file__).parent / "fixtures" / "remoting" / "clients"
store = pytest.fixture(small_store, name="store")


@attrs.define
class Broker:
    """A pull as the broker's: FOUND when the queue holds the offset, else held (suspend flag,
    suspending allowed) or PULL_NOT_FOUND."""

    store: CommitLogStore
    holds: PullHoldService | None = None
    repulls: int = 0
    fail: bool = False

    def pull(self, ctx: HandlerContext, request: RemotingCommand) -> RemotingCommand | None:
        return self._pull(ctx, request, allow_suspend=True)

    def repull(self, ctx: HandlerContext, request: RemotingCommand) -> RemotingCommand | None:
        self.repulls += 1
        if self.fail:
            raise RuntimeError("boom")
        return self._pull(ctx, request, allow_suspend=False)

    def _pull(
        self, ctx: HandlerContext, request: RemotingCommand, *, allow_suspend: bool
    ) -> RemotingCommand | None:
        header = PullMessageRequestHeader.from_fields(request.fields)
        high = self.store.max_queue_offset(header.topic, header.queue_id)
        if header.queue_offset < high:
            return request.response(ResponseCode.SUCCESS, fields={"nextBeginOffset": high})
        assert self.holds is not None
        if allow_suspend and header.suspend and self.holds.hold(ctx, request, header):
            return None
        return request.response(ResponseCode.PULL_NOT_FOUND, "no new message")

    def put(self, topic: str, queue_id: int) -> None:
        result = self.store.put(Message(topic, b"m", queue_id=queue_id))
        assert result.ok
        assert self.holds is not None
        self.holds.notify_message_arriving(topic, queue_id, result.queue_offset + 1)


def _pull_request(
    topic: str = "t", queue_id: int = 0, offset: int = 0, timeout_ms: int = 15_000, opaque: int = 1
) -> RemotingCommand:
    header = PullMessageRequestHeader(
        consumer_group="g",
        topic=topic,
        queue_id=queue_id,
        queue_offset=offset,
        max_msg_nums=32,
        sys_flag=PullSysFlag.SUSPEND | PullSysFlag.COMMIT_OFFSET,
        commit_offset=0,
        suspend_timeout_millis=timeout_ms,
    )
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, header.to_fields(), opaque=opaque)


def _connection(broker: Broker) -> EmbeddedChannel:
    table: dict[int, RequestProcessor] = {RequestCode.PULL_MESSAGE: broker.pull}
    return EmbeddedChannel(RemotingCodec(), RemotingDispatcher(table, port="test"))


def _send(channel: EmbeddedChannel, request: RemotingCommand) -> None:
    channel.write_inbound(encode_command(request)[4:])


def _answers(channel: EmbeddedChannel) -> list[RemotingCommand]:
    out = bytearray()
    while (chunk := channel.read_outbound()) is not None:
        out += chunk
    answers = []
    while out:
        length = int.from_bytes(out[:4], "big")
        answers.append(decode_command(bytes(out[4 : 4 + length])))
        del out[: 4 + length]
    return answers


@pytest.fixture
async def broker(store: CommitLogStore) -> AsyncIterator[Broker]:
    broker = Broker(store)
    broker.holds = PullHoldService(broker.repull, store.max_queue_offset)
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.holds.run)
        yield broker
        nursery.cancel_scope.cancel()


def _holds(broker: Broker) -> PullHoldService:
    assert broker.holds is not None
    return broker.holds


async def test_a_held_pull_is_answered_as_soon_as_a_message_arrives(
    broker: Broker, autojump_clock: trio.testing.MockClock
) -> None:
    channel = _connection(broker)
    _send(channel, _pull_request(opaque=7))
    await trio.sleep(3)
    assert _answers(channel) == [] and _holds(broker).statistics().held == 1
    start = trio.current_time()
    broker.put("t", 0)
    await trio.testing.wait_all_tasks_blocked()
    (answer,) = _answers(channel)
    assert trio.current_time() == start
    assert answer.code == ResponseCode.SUCCESS and answer.opaque == 7
    assert answer.fields["nextBeginOffset"] == "1"
    stats = _holds(broker).statistics()
    assert (stats.held, stats.woken, stats.expired) == (0, 1, 0)


async def test_a_held_pull_with_nothing_is_answered_not_found_at_its_deadline(
    broker: Broker, autojump_clock: trio.testing.MockClock
) -> None:
    channel = _connection(broker)
    start = trio.current_time()
    _send(channel, _pull_request(timeout_ms=15_000, opaque=9))
    await trio.sleep(14.99)
    assert _answers(channel) == []
    await trio.sleep(0.02)
    (answer,) = _answers(channel)
    assert answer.code == ResponseCode.PULL_NOT_FOUND and answer.opaque == 9
    assert broker.repulls == 1 and trio.current_time() - start < 15.02
    assert _holds(broker).statistics().expired == 1


async def test_arrivals_elsewhere_do_not_answer(
    broker: Broker, autojump_clock: trio.testing.MockClock
) -> None:
    broker.put("t", 0)
    channel = _connection(broker)
    _send(channel, _pull_request(offset=1, opaque=1))  # the queue's end
    _send(channel, _pull_request(queue_id=1, opaque=2))
    await trio.sleep(1)
    assert _answers(channel) == []
    _holds(broker).notify_message_arriving("t", 0, 1)  # nothing past offset 1
    broker.put("other", 0)
    await trio.sleep(1)
    assert _answers(channel) == [] and _holds(broker).statistics().held == 2
    broker.put("t", 0)
    await trio.sleep(0.01)
    assert [a.opaque for a in _answers(channel)] == [1]


async def test_data_that_arrived_without_a_notify_is_found_by_the_periodic_check(
    broker: Broker, store: CommitLogStore, autojump_clock: trio.testing.MockClock
) -> None:
    channel = _connection(broker)
    _send(channel, _pull_request(opaque=3))
    assert store.put(Message("t", b"replicated", queue_id=0)).ok  # as a slave: no notify
    await trio.sleep(4.9)
    assert _answers(channel) == []
    await trio.sleep(0.2)
    (answer,) = _answers(channel)
    assert answer.code == ResponseCode.SUCCESS


async def test_many_pulls_on_one_queue_are_answered_by_their_offsets(
    broker: Broker, autojump_clock: trio.testing.MockClock
) -> None:
    broker.put("t", 0)
    broker.put("t", 0)
    channel = _connection(broker)
    _send(channel, _pull_request(offset=2, opaque=1))
    _send(channel, _pull_request(offset=3, opaque=2))
    _send(channel, _pull_request(offset=2, timeout_ms=1000, opaque=3))
    await trio.sleep(0.5)
    broker.put("t", 0)  # up to offset 3: answers the pulls from offset 2
    await trio.sleep(0.01)
    assert sorted(a.opaque for a in _answers(channel)) == [1, 3]
    await trio.sleep(20)
    (late,) = _answers(channel)
    assert late.opaque == 2 and late.code == ResponseCode.PULL_NOT_FOUND


async def test_a_pull_whose_connection_closed_is_dropped(
    broker: Broker, autojump_clock: trio.testing.MockClock
) -> None:
    gone, kept = _connection(broker), _connection(broker)
    _send(gone, _pull_request(opaque=1))
    _send(kept, _pull_request(opaque=2))
    gone.close("client went away")
    await trio.sleep(0.1)
    broker.put("t", 0)
    await trio.sleep(0.01)
    assert [a.opaque for a in _answers(kept)] == [2]
    assert broker.repulls == 1
    _send(gone_again := _connection(broker), _pull_request(offset=1, opaque=3))
    gone_again.close()
    await trio.sleep(6)  # the periodic check drops it, unanswered
    stats = _holds(broker).statistics()
    assert stats.dropped == 2 and stats.held == 0 and broker.repulls == 1


async def test_held_pulls_are_bounded(
    store: CommitLogStore, autojump_clock: trio.testing.MockClock
) -> None:
    broker = Broker(store)
    broker.holds = PullHoldService(broker.repull, store.max_queue_offset, max_held=2)
    channel = _connection(broker)
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.holds.run)
        for opaque in (1, 2, 3):
            _send(channel, _pull_request(opaque=opaque))
        (refused,) = _answers(channel)
        assert refused.opaque == 3 and refused.code == ResponseCode.PULL_NOT_FOUND
        assert broker.holds.statistics().refused == 1
        nursery.cancel_scope.cancel()
    assert broker.holds.statistics().held == 0  # cancelled: dropped


async def test_a_suspend_timeout_is_capped(
    store: CommitLogStore, autojump_clock: trio.testing.MockClock
) -> None:
    broker = Broker(store)
    broker.holds = PullHoldService(broker.repull, store.max_queue_offset, max_suspend=30)
    channel = _connection(broker)
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.holds.run)
        _send(channel, _pull_request(timeout_ms=10**12))
        await trio.sleep(30.01)
        assert [a.code for a in _answers(channel)] == [ResponseCode.PULL_NOT_FOUND]
        nursery.cancel_scope.cancel()


async def test_a_failing_repull_answers_system_error_and_the_service_goes_on(
    broker: Broker, autojump_clock: trio.testing.MockClock
) -> None:
    channel = _connection(broker)
    _send(channel, _pull_request(opaque=1))
    broker.fail = True
    broker.put("t", 0)
    await trio.sleep(0.01)
    (answer,) = _answers(channel)
    assert answer.code == ResponseCode.SYSTEM_ERROR and "boom" in (answer.remark or "")
    broker.fail = False
    _send(channel, _pull_request(offset=1, opaque=2))
    broker.put("t", 0)
    await trio.sleep(0.01)
    assert [a.code for a in _answers(channel)] == [ResponseCode.SUCCESS]


async def test_notify_put_wakes_the_queues_a_put_stored_in(
    broker: Broker, store: CommitLogStore, autojump_clock: trio.testing.MockClock
) -> None:
    channel = _connection(broker)
    _send(channel, _pull_request(queue_id=0, opaque=1))
    _send(channel, _pull_request(queue_id=1, opaque=2))
    _send(channel, _pull_request(queue_id=2, opaque=3))
    messages = [Message("t", b"a", queue_id=0), Message("t", b"b", queue_id=2)]
    results = store.put_batch(messages)
    refused = [Message("t", b"c", queue_id=1)]
    _holds(broker).notify_put(refused, [PutResult(PutStatus.SERVICE_NOT_AVAILABLE)])
    _holds(broker).notify_put(messages, results)
    await trio.testing.wait_all_tasks_blocked()
    assert sorted(a.opaque for a in _answers(channel)) == [1, 3]
    assert _holds(broker).statistics().held == 1


@pytest.mark.parametrize("client", ["alions", "cpp"])
async def test_the_captured_pulls_of_ali_ons_and_the_cpp_client_are_held(
    broker: Broker, autojump_clock: trio.testing.MockClock, client: str
) -> None:
    lines = (FIXTURES / f"{client}.jsonl").read_text().splitlines()
    captured = next(json.loads(line) for line in lines if json.loads(line)["code"] == 11)
    header = dict(captured["hdr"])
    header.pop("_serializeType")
    raw = json.dumps(header).encode()
    channel = _connection(broker)
    channel.write_inbound(struct.pack(">I", len(raw)) + raw)
    await trio.sleep(14.9)
    assert _answers(channel) == [] and _holds(broker).statistics().held == 1
    await trio.sleep(0.2)
    (answer,) = _answers(channel)
    assert answer.code == ResponseCode.PULL_NOT_FOUND and answer.opaque == header["opaque"]
