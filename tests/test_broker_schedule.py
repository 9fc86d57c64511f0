"""Delayed messages: the DELAY rewrite onto SCHEDULE_TOPIC_XXXX, the service that delivers them
when due (in order per level), delayOffset.json across restarts and GET_ALL_DELAY_OFFSET,
against a store in a temporary directory; time by trio's autojump clock."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import trio
import trio.testing
from broker_support import small_store

from hanet.broker import (
    DELAY_LEVELS,
    DELAY_OFFSETS_FILE,
    MAX_DELAY_LEVEL,
    SCHEDULE_TOPIC,
    ConfigFileError,
    DelayLevelError,
    ScheduleService,
    decode_offsets,
    delay_rewrite,
    parse_delay_levels,
)
from hanet.protocol import (
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

store = pytest.fixture(small_store, name="store")


def _clock() -> Callable[[], int]:
    """The wall clock in ms as it is now, moved on only by the time trio's (mock) clock moves
    on since: real time passing does not move it (a loaded machine once took 100 ms between a
    put and a check 0.9 s of virtual time later, and a message due at 1 s was delivered)."""
    start, wall = trio.current_time(), time.time_ns() // 1_000_000
    return lambda: wall + int((trio.current_time() - start) * 1000)


def _delayed(topic: str, body: bytes, level: int | str, queue_id: int = 1) -> Message:
    props = {"TAGS": "t", "DELAY": str(level), "UNIQ_KEY": body.hex()}
    return delay_rewrite(Message(topic, body, queue_id=queue_id, properties=props))


def _bodies(store: CommitLogStore, topic: str, queue_id: int = 1) -> list[bytes]:
    return [r.body for r in store.get_messages(topic, queue_id, 0, 1000)]


# -- the rewrite ------------------------------------------------------------------------------


def test_the_18_levels_are_rocketmqs() -> None:
    assert MAX_DELAY_LEVEL == 18
    assert DELAY_LEVELS[:4] == (1000, 5000, 10_000, 30_000)
    assert DELAY_LEVELS[4:14] == tuple(m * 60_000 for m in range(1, 11))
    assert DELAY_LEVELS[14:] == (1_200_000, 1_800_000, 3_600_000, 7_200_000)
    assert parse_delay_levels("2d 3s") == (172_800_000, 3000)
    for bad in ("", "1x", "s", "1.5s"):
        with pytest.raises(ValueError, match="delay level"):
            parse_delay_levels(bad)


def test_a_delayed_message_is_stored_on_the_schedule_topic() -> None:
    message = Message("orders", b"x", queue_id=3, properties={"DELAY": "4", "TAGS": "t"})
    rewritten = delay_rewrite(message)
    assert rewritten.topic == SCHEDULE_TOPIC and rewritten.queue_id == 3
    assert dict(rewritten.properties) == {
        "DELAY": "4",
        "TAGS": "t",
        "REAL_TOPIC": "orders",
        "REAL_QID": "3",
    }
    assert delay_rewrite(rewritten) is rewritten  # idempotent
    capped = delay_rewrite(Message("orders", b"x", properties={"DELAY": "99"}))
    assert capped.queue_id == 17 and capped.properties["DELAY"] == "18"


@pytest.mark.parametrize("delay", [None, "0", "-2"])
def test_no_delay_leaves_the_message_alone(delay: str | None) -> None:
    message = Message("orders", b"x", properties={} if delay is None else {"DELAY": delay})
    assert delay_rewrite(message) is message


def test_only_plain_and_committed_transaction_messages_are_delayed() -> None:
    for sys_flag, delayed in ((0x4, False), (0xC, False), (0x8, True)):
        message = Message("orders", b"x", properties={"DELAY": "1"}, sys_flag=sys_flag)
        assert (delay_rewrite(message).topic == SCHEDULE_TOPIC) is delayed


@pytest.mark.parametrize("delay", ["abc", "1.5", " 3", ""])
def test_a_delay_that_is_not_an_integer_is_refused(delay: str) -> None:
    with pytest.raises(DelayLevelError, match="DELAY"):
        delay_rewrite(Message("orders", b"x", properties={"DELAY": delay}))


# -- delivery ---------------------------------------------------------------------------------


async def test_due_messages_reach_their_real_queue_in_order(
    store: CommitLogStore, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    for i in range(3):
        assert store.put(_delayed("orders", b"one-%d" % i, 1)).ok
    assert store.put(_delayed("orders", b"five", 2)).ok
    assert _bodies(store, "orders") == []
    # the clock after the puts: a store time past the service's clock would count as skew
    # (RocketMQ delivers a message due later than now plus its delay at once)
    service = ScheduleService(store, store.put, tmp_path / "d.json", now_ms=_clock())
    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        await trio.sleep(0.5)
        assert _bodies(store, "orders") == []
        await trio.sleep(1)
        assert _bodies(store, "orders") == [b"one-0", b"one-1", b"one-2"]
        await trio.sleep(2.5)
        assert _bodies(store, "orders") == [b"one-0", b"one-1", b"one-2"]
        await trio.sleep(1.5)
        assert _bodies(store, "orders")[-1] == b"five"
        late = store.put(_delayed("orders", b"late", 1))  # the idle level wakes on new data
        assert late.ok
        await trio.sleep(1.5)
        assert _bodies(store, "orders")[-1] == b"late"
        assert service.statistics().delivered == 5 and service.statistics().waiting == {}
        nursery.cancel_scope.cancel()
    record = store.get_messages("orders", 1, 0, 1)[0]
    props = record.properties
    assert "DELAY" not in props and props["REAL_TOPIC"] == "orders" and props["TAGS"] == "t"
    assert props["UNIQ_KEY"] == b"one-0".hex()
    assert service.offsets() == {1: 4, 2: 1}
    assert decode_offsets((tmp_path / "d.json").read_text()) == {1: 4, 2: 1}


async def test_only_a_level_whose_queue_grew_looks_again(
    store: CommitLogStore, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # Puts of other topics wake no drained level; a delayed put wakes its own level only,
    # and is delivered as before (its delay after its store time).
    looks: dict[int, int] = {}

    class Counted(ScheduleService):
        def deliver_due(self, level: int) -> float | None:
            looks[level] = looks.get(level, 0) + 1
            return super().deliver_due(level)

    service = Counted(store, store.put, tmp_path / "d.json", now_ms=_clock())
    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        await trio.sleep(0.5)
        assert looks == dict.fromkeys(range(1, 19), 1)  # each level once, all drained
        for i in range(20):
            assert store.put(Message("orders", b"plain-%d" % i, queue_id=1)).ok
            await trio.sleep(0.05)
        assert looks == dict.fromkeys(range(1, 19), 1)
        assert store.put(_delayed("orders", b"three", 3)).ok  # level 3: 10 s
        await trio.sleep(0.5)
        assert looks[3] == 2 and sum(looks.values()) == 19
        assert _bodies(store, "orders")[-1] == b"plain-19"
        await trio.sleep(10)
        assert _bodies(store, "orders")[-1] == b"three"
        assert sum(v for level, v in looks.items() if level != 3) == 17
        nursery.cancel_scope.cancel()


async def test_data_put_as_the_service_starts_is_delivered(
    store: CommitLogStore, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    service = ScheduleService(store, store.put, tmp_path / "d.json", now_ms=_clock())
    async with trio.open_nursery() as nursery:
        nursery.start_soon(service.run)
        await trio.lowlevel.checkpoint()
        await trio.lowlevel.checkpoint()
        assert store.put(_delayed("orders", b"early", 1)).ok  # level 1: 1 s
        await trio.sleep(1.5)
        assert _bodies(store, "orders") == [b"early"]
        nursery.cancel_scope.cancel()


async def test_a_restart_loses_nothing_and_redelivers_at_most_since_the_last_write(
    store: CommitLogStore, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    path = tmp_path / "config" / "delayOffset.json"
    now = _clock()
    for i in range(4):
        assert store.put(_delayed("orders", b"m%d" % i, 1)).ok
    first = ScheduleService(store, store.put, path, now_ms=now, persist_interval=100)
    with trio.move_on_after(1.5):
        await first.run()
    assert _bodies(store, "orders") == [b"m0", b"m1", b"m2", b"m3"]
    assert json.loads(path.read_text()) == {"offsetTable": {"1": 4}}
    assert store.put(_delayed("orders", b"m4", 1)).ok
    # A crash after the delivery of m4, before its offset was written: m4 comes again.
    now = _clock()
    crashed = ScheduleService(store, store.put, path, now_ms=now, persist_interval=100)
    assert crashed.deliver_due(1) == pytest.approx(1.0, abs=0.1)  # not due yet
    await trio.sleep(1.1)
    assert crashed.deliver_due(1) is None
    assert _bodies(store, "orders")[-1] == b"m4"
    restarted = ScheduleService(store, store.put, path, now_ms=now)
    assert restarted.offsets() == {1: 4}
    assert restarted.deliver_due(1) is None
    assert _bodies(store, "orders") == [b"m0", b"m1", b"m2", b"m3", b"m4", b"m4"]


async def test_a_refused_delivery_is_retried_not_lost(
    store: CommitLogStore, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    refusals = [2]

    def put(message: Message) -> PutResult:
        if refusals[0]:
            refusals[0] -= 1
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, detail="disk full")
        return store.put(message)

    assert store.put(_delayed("orders", b"a", 1)).ok
    assert store.put(_delayed("orders", b"b", 1)).ok
    service = ScheduleService(store, put, tmp_path / "d.json", now_ms=_clock())
    with trio.move_on_after(1.5):
        await service.run()
    assert _bodies(store, "orders") == []
    assert service.offsets().get(1, 0) == 0
    with trio.move_on_after(3):
        await service.run()
    assert _bodies(store, "orders") == [b"a", b"b"]
    assert service.statistics().failed_puts == 2


def test_a_schedule_record_without_its_real_topic_is_skipped(
    store: CommitLogStore, tmp_path: Path
) -> None:
    assert store.put(Message(SCHEDULE_TOPIC, b"lost", queue_id=0)).ok
    assert store.put(_delayed("orders", b"ok", 1)).ok
    service = ScheduleService(store, store.put, tmp_path / "d.json", now_ms=lambda: 2**50)
    assert service.deliver_due(1) is None
    assert _bodies(store, "orders") == [b"ok"]


# -- the offsets file -------------------------------------------------------------------------


def test_rocketmqs_own_file_is_read_and_offsets_are_brought_within_the_queues(
    store: CommitLogStore, tmp_path: Path
) -> None:
    assert store.put(_delayed("orders", b"x", 1)).ok
    path = tmp_path / DELAY_OFFSETS_FILE
    path.parent.mkdir(parents=True)
    path.write_text('{"offsetTable":{1:7,3:0,40:2}}')  # fastjson's bare keys
    assert decode_offsets(path.read_text()) == {1: 7, 3: 0, 40: 2}
    service = ScheduleService(store, store.put, path)
    assert service.offsets() == {1: 1, 3: 0}  # level 1 holds one message; no level 40


def test_an_unusable_file_falls_back_on_its_bak_or_refuses_to_start(
    store: CommitLogStore, tmp_path: Path
) -> None:
    path = tmp_path / "delayOffset.json"
    path.write_text("{not json")
    with pytest.raises(ConfigFileError, match=r"delayOffset\.json"):
        ScheduleService(store, store.put, path)
    path.with_name("delayOffset.json.bak").write_text('{"offsetTable":{"2":0}}')
    assert ScheduleService(store, store.put, path).offsets() == {2: 0}
    path.write_text('{"offsetTable":{"2":-5}}')
    assert ScheduleService(store, store.put, path).offsets() == {2: 0}


def test_get_all_delay_offset_answers_the_document(store: CommitLogStore, tmp_path: Path) -> None:
    for level in (1, 1, 3):
        assert store.put(_delayed("orders", b"x", level)).ok
    service = ScheduleService(store, store.put, tmp_path / "d.json", now_ms=lambda: 2**50)
    assert service.deliver_due(1) is None
    table: dict[int, RequestProcessor] = {
        RequestCode.GET_ALL_DELAY_OFFSET: service.get_all_delay_offset
    }
    channel = EmbeddedChannel(RemotingCodec(), RemotingDispatcher(table, port="test"))
    request = RemotingCommand.request(RequestCode.GET_ALL_DELAY_OFFSET, opaque=5)
    channel.write_inbound(encode_command(request)[4:])
    out = bytearray()
    while (chunk := channel.read_outbound()) is not None:
        out += chunk
    answer = decode_command(bytes(out)[4:])
    assert answer.code == ResponseCode.SUCCESS and answer.opaque == 5
    assert json.loads(bytes(answer.body)) == {"offsetTable": {"1": 2}}


def test_a_message_no_put_can_ever_take_is_skipped_not_retried_for_ever(
    store: CommitLogStore, tmp_path: Path
) -> None:
    def put(message: Message) -> PutResult:
        if message.body == b"bad":
            return PutResult(PutStatus.MESSAGE_ILLEGAL, detail="too big")
        return store.put(message)

    assert store.put(_delayed("orders", b"bad", 1)).ok
    assert store.put(_delayed("orders", b"good", 1)).ok
    service = ScheduleService(store, put, tmp_path / "d.json", now_ms=lambda: 2**50)
    assert service.deliver_due(1) is None
    assert _bodies(store, "orders") == [b"good"]
    assert service.offsets() == {1: 2} and service.statistics().failed_puts == 1


async def test_the_offsets_are_written_while_running(store: CommitLogStore, tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    service = ScheduleService(store, store.put, path, persist_interval=0.02, now_ms=lambda: 2**50)
    assert store.put(_delayed("orders", b"x", 2)).ok
    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        with trio.fail_after(5):
            while not path.exists() or decode_offsets(path.read_text()) != {2: 1}:  # noqa: ASYNC110
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
