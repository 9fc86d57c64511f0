"""Status snapshots of the replication services."""

from __future__ import annotations

import attrs

__all__ = ["MasterStatus", "SlaveConnectionStatus", "SlaveStatus"]


@attrs.frozen
class SlaveConnectionStatus:
    """One slave as the master sees it.

    Attributes:
        bytes_per_second: the rate over about the last 5 s.
        identity: the name in the slave's TLS certificate (None without TLS).
        replica: whether its acks count toward ``in_sync_replicas``.
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
class MasterStatus:
    """The master: its offsets, its slaves (connected and recently closed)."""

    min_offset: int
    max_offset: int
    replicated_offset: int
    slaves: tuple[SlaveConnectionStatus, ...]
    closed: tuple[SlaveConnectionStatus, ...] = ()


@attrs.frozen
class SlaveStatus:
    """A slave's link to its master.

    Attributes:
        master_address: the master's HA address ("" while unknown: a slave waiting for the
            name server to name its master).
        diverged: the master closed the connection right after our report, without a frame,
            at least twice in a row: it refuses ``refused_offset`` (the slave is ahead of it or
            behind its oldest data, or it is the wrong master; the master's status says which).
        refused_offset: the offset the master closed on (after one such close already).
        refusals: how many times in a row.
        error: why the slave stopped for good (a commit log file size mismatch), or None.
        epoch_diverged_at: the consistent point with the master's epochs this slave's log
            goes past, while it refuses to follow (-1: no common epoch); None otherwise.
        epoch_check: the last epoch check's outcome in one line (None: no check made).
    """

    master_address: str
    connected: bool
    max_offset: int
    connects: int
    attempts: int
    last_close_reason: str | None
    diverged: bool = False
    refused_offset: int | None = None
    refusals: int = 0
    error: str | None = None
    epoch_diverged_at: int | None = None
    epoch_check: str | None = None
