"""Status snapshots of the replication services."""

from __future__ import annotations

import attrs

__all__ = ["MasterStatus", "SlaveConnectionStatus", "SlaveStatus"]


@attrs.frozen
class SlaveConnectionStatus:
    """One slave as the master sees it."""

    address: str
    state: str
    request_offset: int
    ack_offset: int
    next_offset: int
    lag_bytes: int
    bytes_sent: int
    bytes_per_second: float


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
    """A slave's link to its master."""

    master_address: str
    connected: bool
    max_offset: int
    connects: int
    attempts: int
    last_close_reason: str | None
