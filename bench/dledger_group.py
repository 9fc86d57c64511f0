"""A group of ``hanet dledger`` processes on loopback, for the DLedger benchmarks.

Not a benchmark itself: ``bench/failover.py`` and ``bench/dledger_put.py`` start groups with it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import trio

from hanet.client import BrokerClient
from hanet.testing import free_ports


class Group:
    """``size`` DLedger nodes ``n0``, ``n1``, ... with stores under ``root``."""

    def __init__(
        self,
        root: Path,
        size: int,
        *,
        election_timeout: float = 0.5,
        flush: str = "ASYNC_FLUSH",
        file_size: str = "64M",
        code: Path | None = None,
        extra: tuple[str, ...] = (),
    ) -> None:
        self.root = root.absolute()  # the nodes run in another directory
        self.ids = [f"n{i}" for i in range(size)]
        ports = free_ports(2 * size)
        self.peers = {n: f"127.0.0.1:{ports[i]}" for i, n in enumerate(self.ids)}
        self.brokers = {n: ("127.0.0.1", ports[size + i]) for i, n in enumerate(self.ids)}
        self.election_timeout = election_timeout
        self.flush = flush
        self.file_size = file_size
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.extra = extra
        """More ``hanet dledger`` flags for every node (``--namesrv HOST:PORT``)."""
        self.env = dict(os.environ)
        """The nodes' environment: with ``code``, hanet is imported from that directory (a
        checkout of another revision, for an A/B run)."""
        self.code = code if code is not None else Path(__file__).resolve().parents[1]
        """The tree the nodes run from: ``python -m`` puts the working directory first on the
        path, before ``PYTHONPATH``, so the nodes start there (default: this bench's tree)."""
        if code is not None:
            self.env["PYTHONPATH"] = os.pathsep.join(
                [str(code), *filter(None, [os.environ.get("PYTHONPATH")])]
            )

    @property
    def broker_list(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self.brokers.values())

    def start(self, node: str) -> None:
        peers = ",".join(f"{n}={a}" for n, a in self.peers.items())
        host, port = self.brokers[node]
        with (self.root / f"{node}.log").open("ab") as log:
            self.procs[node] = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "hanet",
                    "dledger",
                    "--group",
                    "bench",
                    "--id",
                    node,
                    "--peers",
                    peers,
                    "--store",
                    str(self.root / node),
                    "--listen",
                    f"{host}:{port}",
                    "--flush",
                    self.flush,
                    "--election-timeout",
                    str(self.election_timeout),
                    "--data-file-size",
                    self.file_size,
                    "--index-file-size",
                    "1M",
                    "--mapped-file-size",
                    self.file_size,
                    "--log-level",
                    "WARNING",
                    *self.extra,
                ],
                stdout=subprocess.DEVNULL,
                stderr=log,
                env=self.env,
                cwd=self.code,
            )

    def start_all(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        for node in self.ids:
            self.start(node)

    def kill(self, node: str) -> None:
        proc = self.procs[node]
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + 20
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    async def leader(self, seconds: float = 30) -> str:
        """The node that says it is the leader (polls every node's STATUS)."""
        with trio.fail_after(seconds):
            while True:
                for node in self.ids:
                    if self.procs[node].poll() is not None:
                        continue
                    try:
                        async with BrokerClient.connect(
                            *self.brokers[node], connect_timeout=0.5, request_timeout=0.5
                        ) as client:
                            status = await client.status()
                    except Exception:
                        continue
                    if status.dledger is not None and status.dledger.role == "LEADER":
                        return node
                await trio.sleep(0.05)
