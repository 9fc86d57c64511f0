"""Masters and slaves named by their store, over :mod:`hanet.testing`'s process runner: what the
multi-process HA tests (epochs, repair) start, stop and start again on the same stores."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from test_cli_processes import MASTER, SMALL

from hanet.testing import HanetProcess, HanetProcesses


class Cluster:
    """Starts ``hanet`` processes under one folder; each start is a new process (its own log
    and ready file), so a store can be served again by a new master or slave."""

    def __init__(self, processes: HanetProcesses) -> None:
        self.processes = processes
        self.root = processes.root
        self._count = 0

    async def start(self, name: str, *argv: str) -> HanetProcess:
        """``hanet ARGV`` (with its ready file), once ready."""
        self._count += 1
        return await self.processes.start(f"{name}-{self._count}", *argv)

    async def master(self, store: str = "master", *extra: str) -> HanetProcess:
        """``hanet master`` on ``<root>/<store>`` (small files, short intervals), ``extra`` last."""
        path = str(self.root / store)
        return await self.start("master", "master", "--store", path, *MASTER, *SMALL, *extra)

    async def slave(self, master: HanetProcess, store: str = "slave", *extra: str) -> HanetProcess:
        """``hanet slave`` on ``<root>/<store>`` following ``master``, ``extra`` last."""
        follow = ("--store", str(self.root / store), "--master-ha", master.ready["ha"])
        retry = ("--listen", "127.0.0.1:0", "--reconnect-interval", "0.2")
        return await self.start("slave", "slave", *follow, *retry, *SMALL, *extra)

    async def stop(self, proc: HanetProcess, sig: int = signal.SIGTERM) -> int:
        """Send ``sig`` (a clean stop by default); its exit status."""
        return await proc.stop(sig)


@asynccontextmanager
async def cluster(root: Path) -> AsyncIterator[Cluster]:
    """A :class:`Cluster` under ``root``; whatever still runs at the end is killed."""
    async with HanetProcesses(root) as processes:
        yield Cluster(processes)
