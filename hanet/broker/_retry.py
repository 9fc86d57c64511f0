"""CONSUMER_SEND_MSG_BACK (36): a message a consumer failed to consume goes to its group's
retry topic, delayed, and after too many attempts to its dead letter topic (RocketMQ 4.9.8's
``SendMessageProcessor.asyncConsumerSendMsgBack``).

The consumer names the message by its commit log offset. The broker reads it and puts a copy
(same body, flag, sys flag, born time and host, properties) with:

- ``RETRY_TOPIC``: the topic it was first sent to (kept when already there);
- ``ORIGIN_MESSAGE_ID``: the offset message id of the first copy (kept when already there);
- ``WAIT=false`` and ``DELAY``: the header's ``delayLevel``, or ``3 + reconsumeTimes`` when it
  is 0 (RocketMQ's back-off: 10 s, 30 s, 1 min, 2 min, ...);
- reconsume times + 1;

on ``%RETRY%<group>`` (:func:`~hanet.broker.retry_topic`, one queue by default), delayed through
:func:`~hanet.broker.delay_rewrite`. When the message's reconsume times reached the group's
max reconsume times (16, or the header's ``maxReconsumeTimes`` from clients of version 3.4.9
on) or the header's ``delayLevel`` is negative, it goes to ``%DLQ%<group>`` (:func:`dlq_topic`,
one queue) without delay, ``DELAY=0``. A consumer of the group subscribes to ``%RETRY%<group>``
as well and so gets the message again when it is due.

Answers as RocketMQ's: SUCCESS (no remark) once the copy is stored; SYSTEM_ERROR
``look message by offset failed, <offset>`` when no message starts there; SYSTEM_ERROR with the
put status' name (``SERVICE_NOT_AVAILABLE`` on a slave, ...) when the put is refused;
SUBSCRIPTION_GROUP_NOT_EXIST / NO_PERMISSION as configured. A missing or malformed header
field raises :class:`~hanet.protocol.RemotingHeaderError` (SYSTEM_ERROR with the reason).

Wiring (what the broker does): build one ``SendBackProcessor(broker.store, put,
on_topic=broker.topic_table.ensure)`` once the store is open (masters; a slave's store refuses
the put: SYSTEM_ERROR ``SERVICE_NOT_AVAILABLE``, and the client sends the message itself) and
``broker.port.register(RequestCode.CONSUMER_SEND_MSG_BACK, processor)``. ``put`` is the
broker's synchronous put path for internal messages (``lambda m: broker.put_now([m])[0]``: the
store, then the ``stored_listeners``, which wake long polling); it is not waited on for
durability or replicas (RocketMQ's ``waitStoreMsgOK=false``). ``on_topic(topic, queues)`` is
called before each put, so that ``%RETRY%<group>`` / ``%DLQ%<group>`` are in the topic table
(and announced to the name server) with their queue counts. Optional: ``group_config(group)``
gives a group's :class:`~hanet.protocol.SubscriptionGroupConfig` (None: the group does not
exist; the default gives every group the defaults, as RocketMQ's
``autoCreateSubscriptionGroup``); ``writable()`` is the broker's write permission. The send
path calls :func:`redirect_retry_send` for a producer's send to a retry topic.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable

import attrs

from hanet.channel import HandlerContext
from hanet.protocol import (
    ConsumerSendMsgBackRequestHeader,
    MessageProperty,
    RemotingCommand,
    ResponseCode,
    SubscriptionGroupConfig,
)
from hanet.store import CommitLogStore, CorruptRecordError, Message, PutResult

from ._schedule import delay_rewrite
from ._topics import retry_topic

__all__ = [
    "DLQ_GROUP_TOPIC_PREFIX",
    "DLQ_QUEUE_NUMS",
    "RETRY_GROUP_TOPIC_PREFIX",
    "SendBackProcessor",
    "dlq_topic",
    "redirect_retry_send",
]

log = logging.getLogger("hanet.broker")

RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
DLQ_QUEUE_NUMS = 1
"""Queues of a ``%DLQ%`` topic (RocketMQ's ``DLQ_NUMS_PER_GROUP``)."""

_VERSION_3_4_9 = 165  # MQVersion.Version.V3_4_9.ordinal(): maxReconsumeTimes is read from here


def dlq_topic(group: str) -> str:
    """``%DLQ%<group>``: where a group's messages go after too many attempts."""
    return DLQ_GROUP_TOPIC_PREFIX + group


def _auto_created(group: str) -> SubscriptionGroupConfig:
    return SubscriptionGroupConfig(group)


def _always() -> bool:
    return True


def _max_times(group_max: int, header_max: int | None, version: int) -> int:
    """The consumer's max reconsume times from clients of 3.4.9 on, else the group's."""
    return header_max if version >= _VERSION_3_4_9 and header_max is not None else group_max


def redirect_retry_send(
    message: Message,
    *,
    group_max: int = SubscriptionGroupConfig("").retry_max_times,
    header_max: int | None = None,
    version: int = _VERSION_3_4_9,
) -> Message:
    """A producer's send to ``%RETRY%<group>`` as RocketMQ's send path stores it.

    A Java consumer whose CONSUMER_SEND_MSG_BACK failed sends the message to the retry topic
    itself (SEND_MESSAGE with ``reconsumeTimes`` and ``maxReconsumeTimes`` in the header). Once
    its reconsume times reached the max (the header's ``maxReconsumeTimes`` from clients of
    3.4.9 on, else the group's ``retryMaxTimes``), it goes to queue 0 of ``%DLQ%<group>`` with
    ``DELAY=0`` instead (RocketMQ's ``handleRetryAndDLQ``). Any other message comes back
    unchanged. Pure; the send path calls it before :func:`~hanet.broker.delay_rewrite`.
    """
    if not message.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return message
    if message.reconsume_times < _max_times(group_max, header_max, version):
        return message
    group = message.topic[len(RETRY_GROUP_TOPIC_PREFIX) :]
    properties = dict(message.properties)
    properties[MessageProperty.DELAY.value] = "0"
    return attrs.evolve(message, topic=dlq_topic(group), queue_id=0, properties=properties)


@attrs.define(eq=False)
class SendBackProcessor:
    """The CONSUMER_SEND_MSG_BACK processor (see the module docstring for the wiring).

    Args:
        store: the broker's store (the message is read from it by offset).
        put: the broker's put path for internal messages.
        group_config: a group's settings (``retry_queue_nums``, ``retry_max_times``), None for
            a group that does not exist.
        writable: whether the broker takes writes (its permission).
        on_topic: ``(topic, queues)`` before each put on a retry or DLQ topic.
        broker_ip: named in the NO_PERMISSION remark.
        choose: ``choose(n)`` picks a queue in ``range(n)`` (random, as RocketMQ).
    """

    store: CommitLogStore
    put: Callable[[Message], PutResult]
    group_config: Callable[[str], SubscriptionGroupConfig | None] = _auto_created
    writable: Callable[[], bool] = _always
    on_topic: Callable[[str, int], object] | None = None
    broker_ip: str = ""
    choose: Callable[[int], int] = random.randrange

    def __call__(self, ctx: HandlerContext, request: RemotingCommand) -> RemotingCommand:
        """Serve one CONSUMER_SEND_MSG_BACK (synchronous)."""
        header = ConsumerSendMsgBackRequestHeader.from_fields(request.fields)
        policy = self.group_config(header.group)
        if policy is None:
            return request.response(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"subscription group not exist, {header.group}",
            )
        if not self.writable():
            return request.response(
                ResponseCode.NO_PERMISSION,
                f"the broker[{self.broker_ip}] sending message is forbidden",
            )
        if policy.retry_queue_nums <= 0:
            return request.response(ResponseCode.SUCCESS)
        try:
            record = self.store.read_record(header.offset)
        except (CorruptRecordError, ValueError) as exc:
            log.info("send back of %s: no message at %d: %s", header.group, header.offset, exc)
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {header.offset}"
            )
        properties = record.properties
        properties.setdefault(MessageProperty.RETRY_TOPIC, record.topic)
        properties[MessageProperty.WAIT] = "false"
        max_times = _max_times(policy.retry_max_times, header.max_reconsume_times, request.version)
        if record.reconsume_times >= max_times or header.delay_level < 0:
            topic, queues = dlq_topic(header.group), DLQ_QUEUE_NUMS
            properties[MessageProperty.DELAY] = "0"
        else:
            topic, queues = retry_topic(header.group), policy.retry_queue_nums
            level = header.delay_level or 3 + record.reconsume_times
            properties[MessageProperty.DELAY] = str(level)
        if not properties.get(MessageProperty.ORIGIN_MESSAGE_ID, "").strip():
            properties[MessageProperty.ORIGIN_MESSAGE_ID] = record.msg_id
        if self.on_topic is not None:
            self.on_topic(topic, queues)
        message = Message(
            topic=topic,
            body=record.body,
            queue_id=self.choose(queues),
            flag=record.flag,
            properties=properties,
            sys_flag=record.sys_flag,
            born_timestamp=record.born_timestamp,
            born_host=record.born_host,
            born_port=record.born_port,
            reconsume_times=record.reconsume_times + 1,
        )
        result = self.put(delay_rewrite(message))
        if result.ok:
            return request.response(ResponseCode.SUCCESS)
        log.info(
            "send back of %s to %s refused: %s %s",
            header.group,
            topic,
            result.status.name,
            result.detail,
        )
        return request.response(ResponseCode.SYSTEM_ERROR, result.status.name)
