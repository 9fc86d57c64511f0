"""A :class:`~._config.Message` for the broker's send path, built natively when the extension is
(``new_message`` in ``_speedups.c``: the fields set without ``Message.__init__``, about a
microsecond less a send); :func:`new_message_py` is the reference it is tested against."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

from ._config import Message
from ._native import ENABLED, native

__all__ = ["native_new_message", "new_message", "new_message_py"]


def new_message_py(
    topic: str,
    body: bytes,
    queue_id: int,
    flag: int,
    properties: Mapping[str, str],
    sys_flag: int,
    born_timestamp: int,
    born_host: bytes,
    born_port: int,
    reconsume_times: int,
) -> Message:
    """``Message(...)`` of these values (``prepared_transaction_offset`` 0)."""
    return Message(
        topic,
        body,
        queue_id,
        flag,
        properties,
        sys_flag,
        born_timestamp,
        born_host,
        born_port,
        reconsume_times,
    )


_native: Callable[..., Message] | None = native("new_message")
native_new_message: Callable[..., Message] | None = (
    None if _native is None else functools.partial(_native, Message)
)
"""The extension's ``new_message`` bound to :class:`Message` (None when not built), whatever
``HANET_NO_EXTENSIONS``."""

new_message: Callable[
    [str, bytes, int, int, Mapping[str, str], int, int, bytes, int, int], Message
] = (native_new_message if ENABLED else None) or new_message_py
""":func:`new_message_py`'s values as a :class:`Message`: native when the extension is used."""
