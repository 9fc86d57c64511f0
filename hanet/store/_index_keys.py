"""The keys an index file holds for a record, and their hashes (no IO): ``topic#UNIQ_KEY`` and
``topic#key`` for each key of ``KEYS``, hashed as RocketMQ's ``indexKeyHashMethod`` does
(``abs(String.hashCode)``, 0 for ``Integer.MIN_VALUE``). The files themselves are
:mod:`._index_file`'s."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator

from ._native import ENABLED as NATIVE_ENABLED
from ._native import native

__all__ = [
    "KEYS_PROPERTY",
    "UNIQ_KEY_PROPERTY",
    "index_key_hash",
    "java_hash",
    "raw_keys",
    "record_index_keys",
    "topic_key_hash",
]

KEYS_PROPERTY = b"KEYS\x01"
"""How a ``KEYS`` property starts in a raw properties field."""
UNIQ_KEY_PROPERTY = b"UNIQ_KEY\x01"
"""How a ``UNIQ_KEY`` property starts in a raw properties field."""
_UTF16 = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"
_KEY_PROPERTIES = re.compile(rb"(?:^|\x02)(KEYS|UNIQ_KEY)\x01([^\x02]*)")
_POWERS: dict[int, int] = {}  # 31 ** n mod 2 ** 32 by n
_POW12 = pow(31, 12, 0x100000000)
_HEADS: dict[str, tuple[int, int]] = {}  # the first 20 characters of unique ids -> hash


def java_hash_py(text: str) -> tuple[int, int]:
    """Java's ``String.hashCode`` of ``text`` as an unsigned 32-bit int, and its length in
    UTF-16 code units (the reference of the extension's ``java_hash``, used without it)."""
    units: bytes | memoryview = (
        text.encode("ascii") if text.isascii() else memoryview(text.encode(_UTF16)).cast("H")
    )
    value = 0
    for unit in units:
        value = (value * 31 + unit) & 0xFFFFFFFF
    return value, len(units)


# A key is often long (a client's KEYS may be a whole business id or more): hashed in Python
# one character at a time, a 1 KiB key cost ~60 us of every put that carried it.
java_hash: Callable[[str], tuple[int, int]] = (
    (native("java_hash") or java_hash_py) if NATIVE_ENABLED else java_hash_py
)


def _positive(value: int) -> int:
    """RocketMQ's ``indexKeyHashMethod`` of an unsigned 32-bit ``hashCode``: its absolute
    value as a signed int, 0 for ``Integer.MIN_VALUE``."""
    return value if value < 0x80000000 else (0 if value == 0x80000000 else 0x100000000 - value)


def topic_key_hash(prefix: tuple[int, int], key: str) -> int:
    """:func:`index_key_hash` of ``topic#`` + ``key`` from the prefix's :func:`java_hash`.

    A unique id of RocketMQ's clients (32 hex characters) starts with 20 that one producer
    repeats (its address, process id and a random number): their hash is cached."""
    if len(key) == 32:
        head = _HEADS.get(key[:20])
        if head is None:
            if len(_HEADS) >= 4096:
                _HEADS.clear()
            head = _HEADS[key[:20]] = java_hash(key[:20])
        tail, length = java_hash(key[20:])
        value = (head[0] * _POW12 + tail) & 0xFFFFFFFF
        length += 20
    else:
        value, length = java_hash(key)
    power = _POWERS.get(length)
    if power is None:
        power = _POWERS[length] = pow(31, length, 0x100000000)
    return _positive((prefix[0] * power + value) & 0xFFFFFFFF)


def index_key_hash(key: str) -> int:
    """RocketMQ's ``indexKeyHashMethod``: ``abs(key.hashCode())``, 0 for ``Integer.MIN_VALUE``."""
    return _positive(java_hash(key)[0])


def raw_keys(raw: bytes) -> list[str]:
    """:func:`record_keys` of a raw properties field (the last ``UNIQ_KEY`` and ``KEYS``,
    as a Java ``HashMap`` keeps them)."""
    found = dict(_KEY_PROPERTIES.findall(raw))
    keys = []
    uniq = found.get(b"UNIQ_KEY")
    if uniq is not None:
        keys.append(uniq.decode("utf-8", "replace"))
    value = found.get(b"KEYS")
    if value:
        keys.extend(key for key in value.decode("utf-8", "replace").split(" ") if key)
    return keys


def record_keys(properties: dict[str, str]) -> Iterator[str]:
    uniq = properties.get("UNIQ_KEY")
    if uniq is not None:
        yield uniq
    for key in properties.get("KEYS", "").split(" "):
        if key:
            yield key


def record_index_keys(topic: str, properties: dict[str, str]) -> list[str]:
    """The index keys of a record, in RocketMQ's order: ``topic#UNIQ_KEY`` first, then
    ``topic#key`` for each non-empty space-separated key of ``KEYS``."""
    return [f"{topic}#{key}" for key in record_keys(properties)]
