"""LOCK_BATCH_MQ / UNLOCK_BATCH_MQ: orderly consumers' queue locks (RocketMQ's
RebalanceLockManager), through the remoting codec and dispatch table on an EmbeddedChannel."""

from __future__ import annotations

import json

import pytest

from hanet.broker import LOCK_MAX_LIVE_TIME, QueueLocks
from hanet.protocol import (
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueue,
    RemotingCodec,
    RemotingCommand,
    RemotingDispatcher,
    RequestCode,
    RequestProcessor,
    ResponseCode,
    UnlockBatchRequestBody,
    decode_command,
    encode_command,
)
from hanet.testing import EmbeddedChannel

Q0, Q1, Q2 = (MessageQueue("orders", "broker-a", i) for i in range(3))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _channel(locks: QueueLocks) -> EmbeddedChannel:
    processors: dict[int, RequestProcessor] = {
        RequestCode.LOCK_BATCH_MQ: locks.lock_batch_mq,
        RequestCode.UNLOCK_BATCH_MQ: locks.unlock_batch_mq,
    }
    return EmbeddedChannel(RemotingCodec(), RemotingDispatcher(processors, port="test"))


def _call(channel: EmbeddedChannel, request: RemotingCommand) -> RemotingCommand:
    channel.write_inbound(encode_command(request)[4:])
    out = bytearray()
    while (chunk := channel.read_outbound()) is not None:
        out += chunk
    answer = decode_command(bytes(out)[4:])
    assert answer.is_response and answer.opaque == request.opaque
    return answer


def _lock(
    channel: EmbeddedChannel, client: str, *queues: MessageQueue, group: str = "g"
) -> frozenset[MessageQueue]:
    body = LockBatchRequestBody(group, client, frozenset(queues)).to_json()
    answer = _call(channel, RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, body=body, opaque=7))
    assert answer.code == ResponseCode.SUCCESS and answer.remark is None
    return LockBatchResponseBody.from_json(answer.body).lock_ok_mq_set


def _unlock(channel: EmbeddedChannel, client: str, *queues: MessageQueue) -> None:
    body = UnlockBatchRequestBody("g", client, frozenset(queues)).to_json()
    request = RemotingCommand.request(RequestCode.UNLOCK_BATCH_MQ, body=body, opaque=8)
    answer = _call(channel, request)
    assert answer.code == ResponseCode.SUCCESS and bytes(answer.body) == b""


def test_a_queue_is_held_by_one_client_until_it_unlocks() -> None:
    channel = _channel(QueueLocks(clock=Clock()))
    assert _lock(channel, "c1", Q0, Q1) == {Q0, Q1}
    assert _lock(channel, "c2", Q1, Q2) == {Q2}
    assert _lock(channel, "c1", Q0, Q1, Q2) == {Q0, Q1}  # renewed; Q2 is c2's
    _unlock(channel, "c1", Q1)
    assert _lock(channel, "c2", Q1) == {Q1}
    assert _lock(channel, "c2", Q0, group="other") == {Q0}  # groups lock apart


def test_a_lock_expires_60_seconds_after_its_last_renewal() -> None:
    clock = Clock()
    locks = QueueLocks(clock=clock)
    channel = _channel(locks)
    assert LOCK_MAX_LIVE_TIME == 60.0
    assert _lock(channel, "c1", Q0) == {Q0}
    clock.now += 40
    assert _lock(channel, "c1", Q0) == {Q0}  # renewal
    clock.now += 40
    assert _lock(channel, "c2", Q0) == frozenset()  # 40 s after the renewal: still c1's
    assert locks.is_locked("g", Q0, "c1")
    clock.now += 21
    assert not locks.is_locked("g", Q0, "c1")
    assert _lock(channel, "c2", Q0) == {Q0}  # expired: taken over
    assert locks.statistics().refused == 1


def test_unlock_frees_only_what_the_client_holds() -> None:
    locks = QueueLocks(clock=Clock())
    channel = _channel(locks)
    assert _lock(channel, "c1", Q0) == {Q0}
    _unlock(channel, "c2", Q0, Q1)  # not c2's, not locked: left alone (logged)
    assert locks.is_locked("g", Q0, "c1")
    _unlock(channel, "c1", Q0)
    assert locks.statistics().locks == 0 and locks.statistics().groups == 0


def test_the_answer_body_is_rocketmq_json() -> None:
    channel = _channel(QueueLocks(clock=Clock()))
    body = json.dumps(
        {
            "clientId": "10.0.0.1@123",
            "consumerGroup": "g",
            "mqSet": [{"brokerName": "broker-a", "queueId": 3, "topic": "orders"}],
        }
    ).encode()
    answer = _call(channel, RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, body=body))
    assert json.loads(bytes(answer.body)) == {
        "lockOKMQSet": [{"brokerName": "broker-a", "queueId": 3, "topic": "orders"}]
    }


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b"[]",
        b'{"consumerGroup":"g"}',
        b'{"consumerGroup":"g","clientId":"c","mqSet":[{"topic":1}]}',
    ],
)
def test_a_bad_body_is_answered_system_error_and_locks_nothing(body: bytes) -> None:
    locks = QueueLocks(clock=Clock())
    channel = _channel(locks)
    answer = _call(channel, RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, body=body))
    assert answer.code == ResponseCode.SYSTEM_ERROR and answer.remark
    assert locks.statistics().locks == 0
    assert channel.is_active


def test_locks_are_bounded_and_expired_ones_make_room() -> None:
    clock = Clock()
    locks = QueueLocks(max_locks=2, clock=clock)
    assert locks.try_lock_batch("g", [Q0, Q1, Q2], "c1") == {Q0, Q1}
    assert locks.statistics().refused == 1
    clock.now += LOCK_MAX_LIVE_TIME + 1
    assert locks.try_lock_batch("g", [Q2], "c2") == {Q2}
    assert locks.statistics().locks == 1
