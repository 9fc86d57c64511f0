"""A PULL_MESSAGE request as a client sends it."""

from __future__ import annotations

from ._codes import RequestCode
from ._headers import PullMessageRequestHeader, PullSysFlag
from ._remoting import RemotingCommand

__all__ = ["pull_message_request"]


def pull_message_request(
    group: str,
    topic: str,
    queue_id: int,
    offset: int,
    max_messages: int,
    *,
    commit_offset: int | None = None,
    suspend_ms: int | None = None,
    subscription: str = "*",
    opaque: int = 0,
) -> RemotingCommand:
    """PULL_MESSAGE (11) of up to ``max_messages`` messages of ``topic``'s queue from
    ``offset`` for ``group``, with its subscription (a tag expression, ``*``: every message);
    ``commit_offset`` also commits the group's offset of the queue, ``suspend_ms`` lets the
    broker hold the pull that long while nothing is found (long polling)."""
    sys_flag = PullSysFlag.SUBSCRIPTION
    if commit_offset is not None:
        sys_flag |= PullSysFlag.COMMIT_OFFSET
    if suspend_ms is not None:
        sys_flag |= PullSysFlag.SUSPEND
    header = PullMessageRequestHeader(
        consumer_group=group,
        topic=topic,
        queue_id=queue_id,
        queue_offset=offset,
        max_msg_nums=max_messages,
        sys_flag=int(sys_flag),
        commit_offset=0 if commit_offset is None else commit_offset,
        suspend_timeout_millis=0 if suspend_ms is None else suspend_ms,
        subscription=subscription,
        sub_version=0,
        expression_type="TAG",
    )
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, header.to_fields(), opaque=opaque)
