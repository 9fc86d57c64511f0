"""One message record as a JSON object: what ``hanet dump --json`` and ``hanet pull --json``
print."""

from __future__ import annotations

import base64
from typing import Any

from ._codec import MessageRecord, format_host

__all__ = ["record_to_json"]


def record_to_json(record: MessageRecord) -> dict[str, Any]:
    """Every field of ``record`` as JSON-ready values.

    Hosts are ``host:port`` text, the magic is hex, ``msg_id`` is RocketMQ's offset message id,
    ``crc_ok`` says whether the body matches its CRC. The body is ``body`` when it is UTF-8 text,
    otherwise ``body_base64``.
    """
    out: dict[str, Any] = {
        "physical_offset": record.physical_offset,
        "size": record.size,
        "magic": f"0x{record.magic:08X}",
        "topic": record.topic,
        "queue_id": record.queue_id,
        "queue_offset": record.queue_offset,
        "flag": record.flag,
        "sys_flag": record.sys_flag,
        "born_timestamp": record.born_timestamp,
        "born_host": format_host(record.born_host, record.born_port),
        "store_timestamp": record.store_timestamp,
        "store_host": format_host(record.store_host, record.store_port),
        "reconsume_times": record.reconsume_times,
        "prepared_transaction_offset": record.prepared_transaction_offset,
        "body_crc": record.body_crc,
        "crc_ok": record.crc_ok,
        "properties": record.properties,
        "msg_id": record.msg_id,
    }
    try:
        out["body"] = record.body.decode("utf-8")
    except UnicodeDecodeError:
        out["body_base64"] = base64.b64encode(record.body).decode("ascii")
    return out
