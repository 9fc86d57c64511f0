"""Message lookups on a broker port: by key or unique id (QUERY_MESSAGE, 12) and by offset
message id (VIEW_MESSAGE_BY_ID, 33), as RocketMQ's ``MQClientAPIImpl`` sends them.

- :func:`query_message`: the messages of a topic with a key (``KEYS``) or, ``unique``, a
  unique id (``UNIQ_KEY``, the ext field ``_UNIQUE_KEY_QUERY=true``) stored in a time range.
  A broker answering QUERY_NOT_FOUND (22) gives an empty result. As RocketMQ's
  ``MQAdminImpl``, the records are checked here too: only those of the topic carrying the key
  are kept (a RocketMQ broker sends every record whose key hashes alike).
- :func:`view_message`: the record at a commit log offset (what an offset message id
  names), or None when the broker has none there.
"""

from __future__ import annotations

import attrs

from hanet.protocol import (
    QueryMessageRequestHeader,
    QueryMessageResponseHeader,
    RemotingCommand,
    RemotingHeaderError,
    RequestCode,
    ResponseCode,
    ViewMessageRequestHeader,
)
from hanet.store import CorruptRecordError, MessageRecord, decode_record

from ._broker import BrokerProtocolError, BrokerRequestError, RequestConnection

__all__ = ["QUERY_MAX_TIMESTAMP", "QueryResult", "query_message", "view_message"]

QUERY_MAX_TIMESTAMP = 2**63 - 1
"""The end of time (Java's ``Long.MAX_VALUE``): a lookup's default end timestamp."""
_UNIQUE_FLAG = "_UNIQUE_KEY_QUERY"


@attrs.frozen
class QueryResult:
    """The answer to a QUERY_MESSAGE.

    Attributes:
        messages: the records found, oldest first (empty: none).
        index_last_update_timestamp, index_last_update_phyoffset: the broker's newest index
            file's end (how far its index is built).
    """

    messages: tuple[MessageRecord, ...]
    index_last_update_timestamp: int = 0
    index_last_update_phyoffset: int = 0


def _has_key(record: MessageRecord, topic: str, key: str, unique: bool) -> bool:
    if record.topic != topic:
        return False
    properties = record.properties
    if unique:
        return properties.get("UNIQ_KEY") == key
    return key in properties.get("KEYS", "").split(" ")


def _records(body: bytes | bytearray | memoryview, what: str) -> list[MessageRecord]:
    records = []
    position = 0
    while position < len(body):
        try:
            record = decode_record(body, position)
        except CorruptRecordError as exc:
            raise BrokerProtocolError(f"{what}: record at {position} of the answer: {exc}") from exc
        records.append(record)
        position += record.size
    return records


async def query_message(
    client: RequestConnection,
    topic: str,
    key: str,
    *,
    max_num: int = 32,
    begin: int = 0,
    end: int = QUERY_MAX_TIMESTAMP,
    unique: bool = False,
) -> QueryResult:
    """The messages of ``topic`` with ``key`` stored in ``[begin, end]`` ms (QUERY_MESSAGE).

    Raises:
        BrokerRequestError: the broker answered an error other than QUERY_NOT_FOUND.
        BrokerProtocolError: the answer is malformed.
        BrokerConnectionError, BrokerTimeoutError.
    """
    fields = QueryMessageRequestHeader(topic, key, max_num, begin, end).to_fields()
    if unique:
        fields[_UNIQUE_FLAG] = "true"
    response = await client.invoke(RemotingCommand.request(RequestCode.QUERY_MESSAGE, fields))
    if response.code not in (ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND):
        raise BrokerRequestError(response.code, response.remark or "", what="query message")
    stamp = phy_offset = 0
    if response.fields:
        try:
            header = QueryMessageResponseHeader.from_fields(response.fields)
        except RemotingHeaderError as exc:
            raise BrokerProtocolError(f"query message answer: {exc}") from exc
        stamp, phy_offset = header.index_last_update_timestamp, header.index_last_update_phyoffset
    if response.code != ResponseCode.SUCCESS:
        return QueryResult((), stamp, phy_offset)
    found = [r for r in _records(response.body, "query message") if _has_key(r, topic, key, unique)]
    found.sort(key=lambda r: (r.store_timestamp, r.physical_offset))
    return QueryResult(tuple(found), stamp, phy_offset)


async def view_message(client: RequestConnection, offset: int) -> MessageRecord | None:
    """The record at commit log ``offset`` (VIEW_MESSAGE_BY_ID), or None when the broker
    answers that it has none there (SYSTEM_ERROR "can not find message by the offset").

    Raises:
        BrokerRequestError: any other error answer.
        BrokerProtocolError: the answer is not one record.
    """
    request = RemotingCommand.request(
        RequestCode.VIEW_MESSAGE_BY_ID, ViewMessageRequestHeader(offset).to_fields()
    )
    response = await client.invoke(request)
    if response.code == ResponseCode.SYSTEM_ERROR and "can not find message" in (
        response.remark or ""
    ):
        return None
    if response.code != ResponseCode.SUCCESS:
        raise BrokerRequestError(response.code, response.remark or "", what="view message")
    records = _records(response.body, "view message")
    if len(records) != 1:
        raise BrokerProtocolError(f"view message: the answer holds {len(records)} records, not 1")
    return records[0]
