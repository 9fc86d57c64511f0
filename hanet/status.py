"""Status records reported by one layer and sent by another, defined once.

The replication master reports each slave as a :class:`SlaveInfo`, a DLedger node its Raft
state as a :class:`DLedgerInfo`; the broker puts the same objects in its STATUS document
(:class:`hanet.protocol.BrokerStatus`, which re-exports them), so a field is named in one
place. Plain data: every layer may import this module (like :mod:`hanet.errors`).
"""

from __future__ import annotations

import attrs

__all__ = ["DLedgerInfo", "DLedgerPeer", "SlaveInfo"]


@attrs.frozen
class SlaveInfo:
    """One slave as its master sees it.

    Attributes:
        address: the slave's ``host:port``.
        state: its connection state (``waiting for report``, ``transferring``, a close
            reason for a closed one, ...).
        request_offset: the offset of its first report (where the transfer started).
        ack_offset: the last offset it acknowledged.
        next_offset: the offset of the next byte to push to it.
        lag_bytes: the master's max offset minus ``ack_offset``.
        bytes_sent: body bytes pushed on this connection.
        bytes_per_second: its transfer rate over about the last 5 s.
        identity: the name in its TLS certificate (None without TLS).
        replica: whether its acks count for SYNC puts (mutual TLS: only certificates that
            name a replica).
    """

    address: str
    state: str
    request_offset: int
    ack_offset: int
    next_offset: int
    lag_bytes: int
    bytes_sent: int
    bytes_per_second: float
    identity: str | None = None
    replica: bool = True


@attrs.frozen
class DLedgerPeer:
    """Another member of a DLedger group as this node sees it.

    Attributes:
        id: its node id.
        address: its peer address.
        connected: this node's connection to it is up.
        match_index: on the leader, the last index known to match its log (0 elsewhere).
        lag: on the leader, entries it lacks (the leader's last index - ``match_index``).
    """

    id: str
    address: str
    connected: bool
    match_index: int
    lag: int


@attrs.frozen
class DLedgerInfo:
    """The Raft state of a DLedger node (``hanet dledger``).

    Attributes:
        group, id: the group's name and this node's id.
        role: LEADER, FOLLOWER or CANDIDATE.
        term: the current term.
        leader: the leader's id this node knows of (None: unknown).
        leader_address: the leader's broker port when known.
        commit_index: the highest index known committed.
        applied_index: entries applied to the commit log view.
        last_index: the last index of this node's log.
        peers: the other members.
    """

    group: str
    id: str
    role: str
    term: int
    leader: str | None
    commit_index: int
    applied_index: int
    last_index: int
    leader_address: str | None = None
    peers: tuple[DLedgerPeer, ...] = ()
