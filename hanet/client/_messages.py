"""What the broker client puts and what a put or a pull answers, as hanet's values (the
remoting frames they travel in are built in :mod:`hanet.client._broker`)."""

from __future__ import annotations

import enum

import attrs

from hanet.store import PutStatus
from hanet.store.lowlevel import property_problem, topic_problem

__all__ = ["AUTO_QUEUE", "PullStatus", "PutMessage", "PutReply", "message_problem"]

AUTO_QUEUE = -1
"""``queue_id`` of a put that lets the broker pick the queue (RocketMQ picks one at random
for a negative queue id)."""


class PullStatus(enum.IntEnum):
    """Why a pull found what it found: RocketMQ's ``GetMessageStatus`` (a pull answer's remark
    names it), and TOPIC_NOT_EXIST (the answer's code)."""

    FOUND = 0
    NO_MESSAGE_IN_QUEUE = 1
    """The queue holds nothing (unknown or empty); next offset 0."""
    OFFSET_OVERFLOW_ONE = 2
    """The offset is the queue's end: nothing new yet; next offset = the same offset."""
    OFFSET_OVERFLOW_BADLY = 3
    """The offset is past the queue's end; next offset = the end."""
    OFFSET_TOO_SMALL = 4
    """The offset is before the queue's first message; next offset = that first message."""
    NO_MATCHED_LOGIC_QUEUE = 5
    """The topic exists but has no such queue."""
    TOPIC_NOT_EXIST = 6
    """No broker here holds the topic (RocketMQ's TOPIC_NOT_EXIST answer)."""
    NO_MATCHED_MESSAGE = 7
    """Messages were read but none matched the subscription; next offset after them."""
    OFFSET_FOUND_NULL = 8
    """The offset's consume queue entry is not readable (being removed); next offset given."""
    MESSAGE_WAS_REMOVING = 9
    """The commit log behind the offset was deleted; next offset given."""


@attrs.frozen
class PutMessage:
    """One message to put.

    Attributes:
        topic: the topic (the broker checks it: ``[%|a-zA-Z0-9_-]+``).
        body: the payload.
        queue_id: the queue, or :data:`AUTO_QUEUE` to let the broker pick one.
        tags: the ``TAGS`` property ("" for none).
        keys: the ``KEYS`` property, space separated ("" for none).
        properties: more user properties as ``(name, value)`` pairs, written after the ones
            a RocketMQ producer sets (``KEYS``, ``UNIQ_KEY``, ``WAIT``, ``TAGS``).
        flag: the producer's flag.
    """

    topic: str
    body: bytes
    queue_id: int = AUTO_QUEUE
    tags: str = ""
    keys: str = ""
    properties: tuple[tuple[str, str], ...] = ()
    flag: int = 0


def message_problem(message: PutMessage, *, topic_characters: bool = True) -> str | None:
    """Why no broker accepts ``message`` whatever its settings, or None: the topic
    (:func:`hanet.store.lowlevel.topic_problem`; with ``topic_characters=False`` only its
    length), the queue id (>= 0 or :data:`AUTO_QUEUE`), tags, keys and properties
    (:func:`hanet.store.lowlevel.property_problem`: no ``\\x01`` / ``\\x02``, no empty name)."""
    problem = topic_problem(message.topic, characters=topic_characters)
    if problem is not None:
        return problem
    if message.queue_id < AUTO_QUEUE:
        return f"bad queue id {message.queue_id}"
    for name, value in (("TAGS", message.tags), ("KEYS", message.keys), *message.properties):
        if name in ("TAGS", "KEYS") and not value:
            continue
        problem = property_problem(name, value)
        if problem is not None:
            return problem
    return None


@attrs.frozen
class PutReply:
    """The answer for one message of a put.

    Attributes:
        status: RocketMQ's status, from the answer's code: PUT_OK (SUCCESS);
            FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT and SLAVE_NOT_AVAILABLE mean the message
            *is* stored on the master but not (yet) as the broker's flush or replication mode
            asks; SERVICE_NOT_AVAILABLE (a slave, a DLedger follower), MESSAGE_ILLEGAL and
            OS_PAGE_CACHE_BUSY (SYSTEM_BUSY) that nothing was stored.
        queue_id: the queue it went to (-1 when refused).
        queue_offset: its index in that queue (-1 when refused).
        wrote_offset: its physical offset in the commit log, read from its offset message id
            (-1 when refused or not an offset id).
        wrote_size: its record size in bytes (0: RocketMQ's answer does not say).
        store_timestamp: when the broker stored it (0: RocketMQ's answer does not say).
        msg_id: RocketMQ's offset message id ("" when refused).
        detail: the answer's remark when the status is not PUT_OK.
    """

    status: PutStatus
    queue_id: int = -1
    queue_offset: int = -1
    wrote_offset: int = -1
    wrote_size: int = 0
    store_timestamp: int = 0
    msg_id: str = ""
    detail: str = ""

    @property
    def ok(self) -> bool:
        """Whether the status is PUT_OK."""
        return self.status is PutStatus.PUT_OK

    @property
    def stored(self) -> bool:
        """Whether the broker wrote the message (PUT_OK or a timeout after writing it)."""
        return self.wrote_offset >= 0
