"""Test utilities.

- :class:`EmbeddedChannel` drives handlers with no network and a manual clock.
- :class:`FaultProxy` / :func:`relay` with :class:`Faults`: delay, throttle, cut, black-hole or
  flip bytes between two peers, over loopback TCP or any pair of trio streams.
- :func:`free_ports`: distinct loopback ports that are free right now.
- :func:`flip_store_byte`: flip bits of a store's commit log on disk.
"""

from hanet.channel import EmbeddedChannel

from ._disk import flip_store_byte
from ._faults import FaultProxy, Faults, RelayStatistics, relay
from ._ports import free_ports

__all__ = [
    "EmbeddedChannel",
    "FaultProxy",
    "Faults",
    "RelayStatistics",
    "flip_store_byte",
    "free_ports",
    "relay",
]
