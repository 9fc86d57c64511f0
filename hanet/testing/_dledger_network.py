"""Peers of :class:`hanet.dledger.DLedgerNode` over trio memory streams, for tests:
:class:`MemoryNetwork`."""

from __future__ import annotations

import functools
from collections.abc import Callable

import trio
import trio.testing

from hanet.boot import Connector
from hanet.dledger import DLedgerNode

__all__ = ["MemoryNetwork"]


class MemoryNetwork:
    """Peers over trio memory streams, for tests: nodes are registered by id; a connection
    to a node that is down or cut off fails with ``OSError``.

    Use ``DLedgerNode(config, connector=network.connector_for(node_id), listen=False)`` and
    :meth:`register` each running node; :meth:`cut` / :meth:`heal` partition two nodes.
    """

    def __init__(self) -> None:
        self._nodes: dict[str, tuple[DLedgerNode, trio.Nursery]] = {}
        self._cut: set[frozenset[str]] = set()
        self._streams: dict[frozenset[str], list[trio.abc.Stream]] = {}

    def register(self, node: DLedgerNode, nursery: trio.Nursery) -> None:
        """Make ``node`` reachable; its incoming connections run in ``nursery``."""
        self._nodes[node.config.node_id] = (node, nursery)

    def unregister(self, node_id: str) -> None:
        """Make ``node_id`` unreachable."""
        self._nodes.pop(node_id, None)

    def cut(self, a: str, b: str) -> None:
        """Partition ``a`` from ``b``: existing connections between them close."""
        key = frozenset((a, b))
        self._cut.add(key)
        for stream in self._streams.pop(key, []):
            _close_nowait(stream)

    def heal(self, a: str, b: str) -> None:
        self._cut.discard(frozenset((a, b)))

    def connector_for(self, source: str) -> Callable[[str], Connector]:
        """The connector factory of node ``source``."""

        def factory(target: str) -> Connector:
            async def connect() -> trio.abc.Stream:
                await trio.lowlevel.checkpoint()
                key = frozenset((source, target))
                entry = self._nodes.get(target)
                if entry is None or key in self._cut:
                    raise OSError(f"{target} is unreachable from {source}")
                node, nursery = entry
                left, right = trio.testing.memory_stream_pair()
                self._streams.setdefault(key, []).extend([left, right])
                # the memory transport knows who calls: the connection speaks for ``source``
                nursery.start_soon(functools.partial(node.accept, right, peer=source))
                return left

            return connect

        return factory


def _close_nowait(stream: trio.abc.Stream) -> None:
    for half in (getattr(stream, "send_stream", None), getattr(stream, "receive_stream", None)):
        if half is not None:
            half.close()
