"""Status snapshots of the replication services."""

from __future__ import annotations

import attrs

from hanet.status import SlaveInfo

__all__ = ["MasterStatus", "SlaveConnectionStatus", "SlaveStatus"]


SlaveConnectionStatus = SlaveInfo
"""One slave as the master sees it: :class:`hanet.status.SlaveInfo`, the record the STATUS
document carries (this name is kept for code that imports it)."""


@attrs.frozen
class MasterStatus:
    """The master: its offsets, its slaves (connected and recently closed)."""

    min_offset: int
    max_offset: int
    replicated_offset: int
    slaves: tuple[SlaveInfo, ...]
    closed: tuple[SlaveInfo, ...] = ()


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
