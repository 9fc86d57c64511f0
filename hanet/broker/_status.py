"""The STATUS document's store part, shared by every broker mode."""

from __future__ import annotations

from typing import Any

from hanet.protocol import BrokerStatus, DamagedRangeInfo, DispatchErrorInfo
from hanet.store import StoreStatistics

__all__ = ["store_status"]


def store_status(stats: StoreStatistics, **fields: Any) -> BrokerStatus:
    """A :class:`~hanet.protocol.BrokerStatus` with the store's offsets, dispatch and disk
    state from ``stats``, and the broker's own ``fields`` (role, addresses, puts, uptime,
    replication or Raft sections)."""
    return BrokerStatus(
        min_offset=stats.min_offset,
        max_offset=stats.max_offset,
        flushed_offset=stats.flushed_offset,
        dispatched_offset=stats.dispatched_offset,
        mapped_files=stats.mapped_files,
        dispatch_error=DispatchErrorInfo(*stats.dispatch_error) if stats.dispatch_error else None,
        disk_full=stats.disk_full,
        disk_used_ratio=(
            None if stats.disk_used_ratio is None else round(stats.disk_used_ratio, 4)
        ),
        create_error=stats.create_error,
        damaged_ranges=tuple(DamagedRangeInfo(*r) for r in stats.damaged),
        **fields,
    )
