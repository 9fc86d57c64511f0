"""Test utilities.

- :class:`EmbeddedChannel` drives handlers with no network and a manual clock.
- :class:`FaultProxy` / :func:`relay` with :class:`Faults`: delay, throttle, cut, black-hole or
  flip bytes between two peers, over loopback TCP or any pair of trio streams.
- :func:`free_ports`: distinct loopback ports that are free right now.
- :func:`flip_store_byte`: flip bits of a store's commit log on disk.
- :class:`MemoryNetwork`: DLedger nodes' peers over memory streams.
- :func:`simulate` (:class:`SimConfig`, :class:`SimResult`, :data:`SIM_RAFT_CONFIG`) and
  :class:`Cluster`: the Raft core in a seeded simulation, its safety checked.
- :class:`HanetProcess` / :class:`HanetProcesses`: ``hanet`` verbs as subprocesses, ready once
  their ready file is written.
- :func:`receive_exactly`: the next ``n`` bytes of a trio stream.
- :func:`cli_flags`: ``--name value`` options from keywords, for command lines in tests.
- :func:`wait_until` polls a condition in a trio run; :func:`wait_until_blocking` outside one.
"""

from hanet.channel import EmbeddedChannel

from ._argv import cli_flags
from ._disk import flip_store_byte
from ._dledger_network import MemoryNetwork
from ._faults import FaultProxy, Faults, RelayStatistics, relay
from ._ports import free_ports
from ._process import (
    HanetProcess,
    HanetProcesses,
    split_address,
    wait_until,
    wait_until_blocking,
)
from ._raft_sim import SIM_RAFT_CONFIG, Cluster, SimConfig, SimResult, simulate
from ._streams import receive_exactly

__all__ = [
    "SIM_RAFT_CONFIG",
    "Cluster",
    "EmbeddedChannel",
    "FaultProxy",
    "Faults",
    "HanetProcess",
    "HanetProcesses",
    "MemoryNetwork",
    "RelayStatistics",
    "SimConfig",
    "SimResult",
    "cli_flags",
    "flip_store_byte",
    "free_ports",
    "receive_exactly",
    "relay",
    "simulate",
    "split_address",
    "wait_until",
    "wait_until_blocking",
]
