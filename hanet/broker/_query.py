"""QUERY_MESSAGE (12): messages found by key or unique id through the store's index files.

As RocketMQ 4.9.8's ``QueryMessageProcessor``: the ext field ``_UNIQUE_KEY_QUERY=true``
(a lookup by unique id) caps ``maxNum`` at ``defaultQueryMaxNum`` (32); the store's index
gives the physical offsets of ``topic#key`` stored between ``beginTimestamp`` and
``endTimestamp`` (at most ``maxMsgsNumBatch``, 64); the answer is SUCCESS with the records as
stored, concatenated in the body, or QUERY_NOT_FOUND (22) with the remark "can not find
message, maybe time range not correct"; both carry ``indexLastUpdateTimestamp`` and
``indexLastUpdatePhyoffset`` (the newest index file's end). RocketMQ's client (``mqadmin``,
``MQAdminImpl.queryMessage``) raises NO_MESSAGE (208) itself when no broker found one.

One difference: the index matches keys by hash, and RocketMQ's broker sends every record
whose key hashes alike (its client drops the strangers). hanet checks each record first:
only records of ``topic`` whose ``KEYS`` hold ``key`` or whose ``UNIQ_KEY`` is ``key``
(only ``UNIQ_KEY`` for a lookup by unique id) are sent.

And one bound RocketMQ leaves to its frame limit: the records sent fit one frame
(:data:`QUERY_ANSWER_BUDGET`, the frame limit less room for the header). 64 messages of up to
``maxMessageSize`` each could make an answer no client can read (RocketMQ's encoder and
decoders refuse frames over 16 MiB), so the records past the budget are left out of the answer,
oldest first kept, and the broker logs how many.
"""

from __future__ import annotations

import logging

from hanet.protocol import (
    MAX_FRAME_LENGTH,
    QueryMessageRequestHeader,
    QueryMessageResponseHeader,
    RemotingCommand,
    ResponseCode,
)
from hanet.store import CommitLogStore, MessageRecord, StoreError

__all__ = [
    "DEFAULT_QUERY_MAX_NUM",
    "QUERY_ANSWER_BUDGET",
    "UNIQUE_MSG_QUERY_FLAG",
    "query_message",
    "record_has_key",
]

log = logging.getLogger("hanet.broker")

UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"
"""The ext field RocketMQ's client adds to a QUERY_MESSAGE by unique id (``MixAll``)."""
DEFAULT_QUERY_MAX_NUM = 32
"""RocketMQ's ``defaultQueryMaxNum``: ``maxNum`` of a lookup by unique id."""
NOT_FOUND_REMARK = "can not find message, maybe time range not correct"
QUERY_ANSWER_BUDGET = MAX_FRAME_LENGTH - 64 * 1024
"""The most record bytes one QUERY_MESSAGE answer carries (room left for its header)."""


def record_has_key(record: MessageRecord, topic: str, key: str, *, unique: bool) -> bool:
    """Whether ``record`` is a message of ``topic`` with ``key`` as its ``UNIQ_KEY`` or (not
    ``unique``) among its space-separated ``KEYS``."""
    if record.topic != topic:
        return False
    properties = record.properties
    if properties.get("UNIQ_KEY") == key:
        return True
    return not unique and key in properties.get("KEYS", "").split(" ")


def query_message(store: CommitLogStore, request: RemotingCommand) -> RemotingCommand:
    """Answer a QUERY_MESSAGE from ``store``'s index (see the module docstring).

    Raises:
        RemotingHeaderError: a missing or malformed header field (the dispatcher answers it).
    """
    header = QueryMessageRequestHeader.from_fields(request.fields)
    unique = (request.fields or {}).get(UNIQUE_MSG_QUERY_FLAG) == "true"
    max_num = DEFAULT_QUERY_MAX_NUM if unique else header.max_num
    offsets, stamp, phy_offset = store.query_index(
        header.topic, header.key, max_num, header.begin_timestamp, header.end_timestamp
    )
    records: list[bytes] = []
    size = left_out = 0
    for offset in offsets:
        try:
            record = store.read_record(offset)
            if not record_has_key(record, header.topic, header.key, unique=unique):
                continue
            if size + record.size > QUERY_ANSWER_BUDGET:
                left_out += 1
                continue
            records.append(store.read(offset, record.size))  # copied only when it is sent
            size += record.size
        except (StoreError, ValueError) as exc:  # deleted meanwhile, or not a record there
            log.warning("QUERY_MESSAGE %s#%s: offset %d: %s", header.topic, header.key, offset, exc)
    if left_out:
        log.info(
            "QUERY_MESSAGE %s#%s: %d record(s) left out of the answer (over %d bytes)",
            header.topic,
            header.key,
            left_out,
            QUERY_ANSWER_BUDGET,
        )
    fields = QueryMessageResponseHeader(stamp, phy_offset).to_fields()
    if records:
        return request.response(ResponseCode.SUCCESS, None, fields, b"".join(records))
    return request.response(ResponseCode.QUERY_NOT_FOUND, NOT_FOUND_REMARK, fields)
