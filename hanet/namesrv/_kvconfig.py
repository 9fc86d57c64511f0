"""The name server's key/value configuration (RocketMQ's ``KVConfigManager``), in memory.

Namespaces of string pairs, set with PUT_KV_CONFIG, read with GET_KV_CONFIG and
GET_KVLIST_BY_NAMESPACE, removed with DELETE_KV_CONFIG. The ``ORDER_TOPIC_CONFIG`` namespace
is what a REGISTER_BROKER answer carries. RocketMQ keeps the table in ``kvConfig.json``; hanet
keeps it for the name server's lifetime only.
"""

from __future__ import annotations

import logging

from hanet.errors import HanetError
from hanet.protocol import KVTable

__all__ = ["MAX_KV_PAIRS", "NAMESPACE_ORDER_TOPIC_CONFIG", "KVConfig", "KVConfigFullError"]

log = logging.getLogger("hanet.namesrv")

MAX_KV_PAIRS = 10_000
"""Most pairs held, every namespace together (a PUT of a new key beyond it is refused)."""

NAMESPACE_ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"
"""RocketMQ's ``NamesrvUtil.NAMESPACE_ORDER_TOPIC_CONFIG``."""


class KVConfigFullError(HanetError, ValueError):
    """A new pair beyond :data:`MAX_KV_PAIRS`."""


class KVConfig:
    """Namespaces of key/value pairs, bounded by ``max_pairs``."""

    def __init__(self, max_pairs: int = MAX_KV_PAIRS) -> None:
        self.max_pairs = max_pairs
        self._table: dict[str, dict[str, str]] = {}
        self._pairs = 0

    def __len__(self) -> int:
        return self._pairs

    def put(self, namespace: str, key: str, value: str) -> None:
        """Set a pair.

        Raises:
            KVConfigFullError: a new pair when :attr:`max_pairs` are held (nothing changes).
        """
        pairs = self._table.get(namespace, {})
        if key not in pairs:
            if self._pairs >= self.max_pairs:
                raise KVConfigFullError(f"the name server holds {self.max_pairs} KV pairs")
            self._pairs += 1
        old = pairs.get(key)
        self._table.setdefault(namespace, pairs)[key] = value
        if old != value:
            log.info("KV config %s/%s = %r (was %r)", namespace, key, value, old)

    def get(self, namespace: str, key: str) -> str | None:
        """A pair's value, or None."""
        return self._table.get(namespace, {}).get(key)

    def delete(self, namespace: str, key: str) -> bool:
        """Remove a pair; returns whether it was there."""
        pairs = self._table.get(namespace)
        if pairs is None or key not in pairs:
            return False
        del pairs[key]
        self._pairs -= 1
        if not pairs:
            del self._table[namespace]
        log.info("KV config %s/%s deleted", namespace, key)
        return True

    def namespace(self, namespace: str) -> KVTable | None:
        """A namespace's pairs, or None when it has none."""
        pairs = self._table.get(namespace)
        return KVTable(dict(sorted(pairs.items()))) if pairs else None
