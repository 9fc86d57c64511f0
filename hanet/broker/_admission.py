"""What a broker accepts in a PUT: every message checked before any is stored."""

from __future__ import annotations

from hanet.protocol import AUTO_QUEUE, PutMessage, message_problem
from hanet.store import MAX_PROPERTIES_SIZE, PutResult, PutStatus, encode_properties

__all__ = ["message_properties", "refusal"]


def message_properties(message: PutMessage) -> dict[str, str]:
    """The properties a message is stored with: TAGS, KEYS, then its own."""
    properties: dict[str, str] = {}
    if message.tags:
        properties["TAGS"] = message.tags
    if message.keys:
        properties["KEYS"] = message.keys
    properties.update(message.properties)
    return properties


def refusal(
    message: PutMessage, properties: dict[str, str], *, queues: int, max_body: int
) -> PutResult | None:
    """Why a broker refuses ``message`` (a MESSAGE_ILLEGAL or PROPERTIES_SIZE_EXCEEDED result),
    or None: the checks of :func:`~hanet.protocol.message_problem`, then the queue id against
    ``queues``, the body against ``max_body`` and the encoded properties against
    :data:`~hanet.store.MAX_PROPERTIES_SIZE`."""
    problem = message_problem(message)
    if problem is None and message.queue_id != AUTO_QUEUE and message.queue_id >= queues:
        problem = f"queue id {message.queue_id} is out of range: this broker has {queues}"
    if problem is None and len(message.body) > max_body:
        problem = f"body of {len(message.body)} bytes is over the maximum {max_body}"
    if problem is not None:
        return PutResult(PutStatus.MESSAGE_ILLEGAL, detail=problem)
    size = len(encode_properties(properties))
    if size > MAX_PROPERTIES_SIZE:
        return PutResult(
            PutStatus.PROPERTIES_SIZE_EXCEEDED,
            detail=f"properties of {size} bytes are over {MAX_PROPERTIES_SIZE}",
        )
    return None
