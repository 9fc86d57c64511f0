"""Test utilities.

- :class:`EmbeddedChannel` drives handlers with no network and a manual clock.
- :class:`FaultProxy` / :func:`relay` with :class:`Faults`: delay, throttle, cut, black-hole or
  flip bytes between two peers, over loopback TCP or any pair of trio streams.
- :func:`free_ports`: distinct loopback ports that are free right now.
- :class:`HanetProcess` / :class:`HanetProcesses`: ``hanet`` verbs as subprocesses, ready once
  their ready file is written.
- :func:`wait_until` polls a condition in a trio run; :func:`wait_until_blocking` outside one.
"""

from hanet.channel import EmbeddedChannel

from ._faults import FaultProxy, Faults, RelayStatistics, relay
from ._ports import free_ports
from ._process import (
    HanetProcess,
    HanetProcesses,
    split_address,
    wait_until,
    wait_until_blocking,
)

__all__ = [
    "EmbeddedChannel",
    "FaultProxy",
    "Faults",
    "HanetProcess",
    "HanetProcesses",
    "RelayStatistics",
    "free_ports",
    "relay",
    "split_address",
    "wait_until",
    "wait_until_blocking",
]
