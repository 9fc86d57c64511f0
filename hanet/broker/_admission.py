"""What a broker accepts in a PUT: every message checked before any is stored."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

import attrs

from hanet.protocol import AUTO_QUEUE, PutMessage, message_problem
from hanet.store import MAX_PROPERTIES_SIZE, Message, PutResult, PutStatus, encode_properties

__all__ = ["Admission", "RoundRobin", "admit", "message_properties", "refusal"]

T = TypeVar("T")


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


class RoundRobin:
    """The queue of each put without a queue id: each topic's queues in turn.

    Args:
        queues: how many queues a topic has.
    """

    def __init__(self, queues: int) -> None:
        self.queues = queues
        self._counters: dict[str, itertools.count[int]] = {}

    def __call__(self, topic: str) -> int:
        counter = self._counters.get(topic)
        if counter is None:
            counter = self._counters[topic] = itertools.count()
        return next(counter) % self.queues


@attrs.frozen
class Admission:
    """What a PUT's messages became: the messages to store, a queue id for each message
    (-1 when refused) and each message's refusal (None when admitted)."""

    messages: list[Message]
    queue_ids: list[int]
    refused: list[PutResult | None]

    def merged(self, results: Iterable[T], refused_as: Callable[[PutResult], T]) -> list[T]:
        """One answer per message, in order: ``refused_as`` of each refusal, the next of
        ``results`` (one per admitted message) for the others."""
        answers = iter(results)
        return [next(answers) if r is None else refused_as(r) for r in self.refused]


def admit(
    messages: Sequence[PutMessage],
    born: tuple[bytes, int],
    *,
    queues: int,
    max_body: int,
    queue_for: Callable[[str], int],
) -> Admission:
    """Check every message of a PUT (:func:`refusal`) before any is stored.

    A refused message takes no turn of the round robin (``queue_for``: the queue of a message
    without a queue id); the others become :class:`~hanet.store.Message` with their
    properties (:func:`message_properties`) and ``born`` (the producer's packed address and
    port: the records' BORNHOST).
    """
    born_host, born_port = born
    batch: list[Message] = []
    queue_ids: list[int] = []
    refused: list[PutResult | None] = []
    for m in messages:
        properties = message_properties(m)
        refused_by = refusal(m, properties, queues=queues, max_body=max_body)
        refused.append(refused_by)
        if refused_by is not None:
            queue_ids.append(-1)
            continue
        queue_id = m.queue_id if m.queue_id != AUTO_QUEUE else queue_for(m.topic)
        queue_ids.append(queue_id)
        batch.append(
            Message(
                topic=m.topic,
                body=m.body,
                queue_id=queue_id,
                flag=m.flag,
                properties=properties,
                born_host=born_host,
                born_port=born_port,
            )
        )
    return Admission(batch, queue_ids, refused)
