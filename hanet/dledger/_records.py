"""A put's message as the RocketMQ commit log record its DLedger entry carries, without IO.

The leader stamps each record (store timestamp, store host = the leader's broker address) and
sets its ``PHYSICALOFFSET`` to where its entry's body will be in the log (the entry's
position + the 48-byte entry header), as DLedger's commit log does; the queue offset is left
0 (the commit log view stamps it when the entry is applied).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from hanet.store import (
    Message,
    MessageRecord,
    encode_record,
)
from hanet.store.lowlevel import (
    encode_properties,
)

from ._entry import ENTRY_HEADER_SIZE

__all__ = ["put_record", "put_records"]


def put_record(message: Message, store_host: tuple[bytes, int], now_ms: int) -> MessageRecord:
    """``message`` as a record stored at ``now_ms`` (ms since the epoch) by ``store_host``
    (packed address, port); its born timestamp is ``now_ms`` when the message has none."""
    host, port = store_host
    return MessageRecord.create(
        topic=message.topic,
        body=message.body,
        queue_id=message.queue_id,
        flag=message.flag,
        sys_flag=message.sys_flag,
        born_timestamp=message.born_timestamp or now_ms,
        born_host=message.born_host,
        born_port=message.born_port,
        store_timestamp=now_ms,
        store_host=host,
        store_port=port,
        reconsume_times=message.reconsume_times,
        prepared_transaction_offset=message.prepared_transaction_offset,
        properties=encode_properties(message.properties) if message.properties else b"",
    )


def put_records(
    messages: Sequence[Message],
    end: int,
    place: Callable[[int, int], int],
    store_host: tuple[bytes, int],
    clock: Callable[[], int],
) -> list[bytes]:
    """Each message encoded as a record whose ``PHYSICALOFFSET`` is where its entry's body
    will be when they are appended in this order to a log whose data ends at ``end``, stored
    at ``clock()`` (ms since the epoch, read for each message).

    ``place(body_length, end)`` is where the log puts an entry with a body of that length
    once its data ends at ``end`` (:meth:`FileLog.next_entry_pos`: a file's tail too short
    for the entry is skipped).
    """
    out = []
    for message in messages:
        record = put_record(message, store_host, clock())
        pos = place(record.size, end)
        out.append(encode_record(record._replace(physical_offset=pos + ENTRY_HEADER_SIZE)))
        end = pos + ENTRY_HEADER_SIZE + record.size
    return out
