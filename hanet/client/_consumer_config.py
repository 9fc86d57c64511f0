"""A consumer's settings, in one place: :class:`ConsumerConfig`, and :class:`ConsumerSettings`
(the same names as keyword arguments of :meth:`Consumer.open <hanet.client.Consumer.open>`)."""

from __future__ import annotations

from typing import TypedDict

import attrs
from attrs.validators import ge, gt

__all__ = ["ConsumerConfig", "ConsumerSettings"]


@attrs.frozen(kw_only=True)
class ConsumerConfig:
    """How a :class:`~hanet.client.Consumer` behaves (RocketMQ's names in brackets).

    Attributes:
        from_beginning: where a queue the group never committed starts: its first message
            (True) or its end (False, RocketMQ's CONSUME_FROM_LAST_OFFSET).
        request_timeout: seconds to connect and per request (with the default connector),
            and the bound on the last commit and unregistration at the exit.
        pull_batch: most messages a pull asks for.
        poll_interval: seconds to wait after a round of pulls that found nothing.
        commit_interval: seconds between commits (``persistConsumerOffsetInterval``).
        route_interval: seconds between route lookups (``pollNameServerInterval``).
        retry_interval: seconds a member whose connection failed is skipped.
        buffer: messages pulled ahead of the caller.
        client_id: this member's id in the group (None:
            :func:`~hanet.client.default_client_id`).
        heartbeat_interval: seconds between heartbeats and member list checks
            (``heartbeatBrokerInterval``).
        rebalance_interval: seconds between rebalances when nothing changes
            (``rebalanceInterval``).

    Raises:
        ValueError: a count or an interval out of range (the message names it).
    """

    from_beginning: bool = False
    request_timeout: float = attrs.field(default=5.0, validator=gt(0))
    pull_batch: int = attrs.field(default=32, validator=ge(1))
    poll_interval: float = attrs.field(default=0.2, validator=ge(0))
    commit_interval: float = attrs.field(default=5.0, validator=gt(0))
    route_interval: float = attrs.field(default=30.0, validator=gt(0))
    retry_interval: float = attrs.field(default=5.0, validator=gt(0))
    buffer: int = attrs.field(default=64, validator=ge(0))
    client_id: str | None = None
    heartbeat_interval: float = attrs.field(default=10.0, validator=gt(0))
    rebalance_interval: float = attrs.field(default=20.0, validator=gt(0))


class ConsumerSettings(TypedDict, total=False):
    """:class:`ConsumerConfig`'s fields as keyword arguments (each optional)."""

    from_beginning: bool
    request_timeout: float
    pull_batch: int
    poll_interval: float
    commit_interval: float
    route_interval: float
    retry_interval: float
    buffer: int
    client_id: str | None
    heartbeat_interval: float
    rebalance_interval: float
