"""A DLedger node's settings (:class:`NodeConfig`, :func:`parse_peers`), what a put ends
with (:class:`PutOutcome`) and the status records: plain values, checked when made, that
:class:`~hanet.dledger.DLedgerNode` (``_node.py``) runs on."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import attrs

from hanet.boot import AllowList, RetryPolicy, TlsConfig
from hanet.channel import DEFAULT_MAX_PARTIAL_BYTES
from hanet.errors import ConfigError
from hanet.status import DLedgerInfo, DLedgerPeer
from hanet.store import FlushDiskType

from ._codec import DEFAULT_MAX_PEER_FRAME
from ._filelog import DEFAULT_DATA_FILE_SIZE, DEFAULT_INDEX_FILE_SIZE
from ._messages import AppendStatus, RaftConfig

__all__ = [
    "PEER_IDLE_TIMEOUT",
    "PEER_KEEPALIVE",
    "NodeConfig",
    "NodeStatus",
    "PeerStatus",
    "PutOutcome",
    "parse_peers",
]

PEER_IDLE_TIMEOUT = 120.0
"""Seconds after which the peer port closes a connection that sent nothing (RocketMQ's
``serverChannelMaxIdleTimeSeconds``)."""
PEER_KEEPALIVE = 30.0
"""Seconds between the HELLO frames each outgoing peer connection repeats."""


def parse_peers(text: str) -> dict[str, str]:
    """``n0=127.0.0.1:40911,n1=...`` -> ``{"n0": "127.0.0.1:40911", ...}``.

    Raises:
        ValueError: an item without ``=``, an empty id or address, a repeated id.
    """
    peers: dict[str, str] = {}
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        node_id, sep, address = item.partition("=")
        node_id, address = node_id.strip(), address.strip()
        if not sep or not node_id or not address:
            raise ValueError(f"bad peer {item!r}: expected ID=HOST:PORT")
        if node_id in peers:
            raise ValueError(f"peer {node_id!r} given twice")
        peers[node_id] = address
    if not peers:
        raise ValueError("no peers")
    return peers


@attrs.frozen
class NodeConfig:
    """One node's settings.

    Attributes:
        group: the DLedger group's name.
        node_id: this node's id (a key of ``peers``).
        peers: every member's id -> peer address (``host:port``), this node included.
        store_dir: the store directory (``dledger/`` and the commit log view).
        broker_addresses: member id -> broker port address, for NOT_LEADER answers and
            the records' store host (defaults: unknown).
        flush: SYNC_FLUSH fsyncs entries before they count; ASYNC_FLUSH flushes every
            ``flush_interval``.
        raft: timers and limits of the Raft core.
        data_file_size, index_file_size: the log's file sizes.
        mapped_file_size: the commit log view's file size.
        flush_interval: seconds between flushes of the log (ASYNC_FLUSH) and the view.
        max_frame_length: the largest peer frame accepted (appends are cut at half of it,
            or at ``raft.max_batch_bytes`` when lower).
        retry: reconnect delays towards peers.
        tls: the peer port's TLS (None: plain TCP): certificate, key and CA together, mutual
            (each member's certificate names its member id, as CN or SAN).
        peer_allow: the networks the peer port accepts (None: any).
        idle_timeout: seconds after which the peer port closes a connection that sent
            nothing (None: never); members repeat a HELLO every ``keepalive_interval``.
        keepalive_interval: seconds between those HELLO frames.
        max_connections: connections the peer port holds (None: the framework's default,
            from the descriptor limit).
        max_partial_bytes: bytes the peer port's connections may hold in unfinished frames
            together (None: the framework's 64 MiB; 0: no cap); appends are cut at half of it
            too, so an honest append always fits.
    """

    group: str
    node_id: str
    peers: Mapping[str, str]
    store_dir: Path
    broker_addresses: Mapping[str, str] = attrs.field(factory=dict)
    flush: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    raft: RaftConfig = attrs.field(factory=RaftConfig)
    data_file_size: int = DEFAULT_DATA_FILE_SIZE
    index_file_size: int = DEFAULT_INDEX_FILE_SIZE
    mapped_file_size: int = 1024 * 1024 * 1024
    flush_interval: float = 0.2
    max_frame_length: int = DEFAULT_MAX_PEER_FRAME
    retry: RetryPolicy = attrs.field(
        factory=lambda: RetryPolicy(initial_delay=0.05, max_delay=0.5, multiplier=2.0)
    )
    tls: TlsConfig | None = None
    peer_allow: AllowList | None = None
    idle_timeout: float | None = PEER_IDLE_TIMEOUT
    keepalive_interval: float = PEER_KEEPALIVE
    max_connections: int | None = None
    max_partial_bytes: int | None = None

    def __attrs_post_init__(self) -> None:
        if self.node_id not in self.peers:
            raise ValueError(f"node id {self.node_id!r} is not one of the peers")
        tls = self.tls
        if tls is not None and (tls.cert is None or tls.ca is None):
            raise ConfigError(
                "the peer port's TLS is mutual: --tls-cert, --tls-key and --tls-ca go together"
            )
        if not self.keepalive_interval > 0:
            raise ValueError("keepalive_interval must be > 0")
        if self.idle_timeout is not None and not self.idle_timeout > self.keepalive_interval:
            raise ValueError("idle_timeout must be longer than keepalive_interval")

    @property
    def append_budget(self) -> int:
        """The bytes of entries one append may carry: ``raft.max_batch_bytes``, capped at half
        a peer frame (an append must fit in one) and at half the peer port's budget for
        unfinished frames (so an honest append always fits)."""
        budget = min(self.raft.max_batch_bytes, max(self.max_frame_length // 2, 1))
        partial = (
            DEFAULT_MAX_PARTIAL_BYTES if self.max_partial_bytes is None else self.max_partial_bytes
        )
        if partial:
            budget = min(budget, max(partial // 2, 1))
        return budget


@attrs.frozen
class PutOutcome:
    """How a put ended.

    Attributes:
        status: SUCCESS (committed and applied), NOT_LEADER, LEADER_PENDING_FULL or
            WAIT_QUORUM_ACK_TIMEOUT (appended, outcome unknown).
        leader_id: the leader this node knows of (NOT_LEADER), else None.
        leader_address: that leader's broker address when known.
        index: the entry's index (0 when not appended).
        wrote_offset, wrote_size, queue_offset, store_timestamp, msg_id: the message in the
            commit log view (SUCCESS only).
        queue_id: the message's queue.
    """

    status: AppendStatus
    leader_id: str | None = None
    leader_address: str | None = None
    index: int = 0
    wrote_offset: int = -1
    wrote_size: int = 0
    queue_id: int = -1
    queue_offset: int = -1
    store_timestamp: int = 0
    msg_id: str = ""


PeerStatus = DLedgerPeer
"""A peer as the leader sees it (match index and lag 0 elsewhere):
:class:`hanet.status.DLedgerPeer`, as the STATUS document carries it."""

NodeStatus = DLedgerInfo
"""A node's Raft state: :class:`hanet.status.DLedgerInfo`, as the STATUS document carries it."""
