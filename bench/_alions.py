"""npm ``ali-ons`` as a load generator for the benchmarks (``bench/clients.py``,
``bench/dledger_put.py``): not a benchmark itself.

The client is the interop tests' driver (``tests/interop/alions_driver.js bench``), installed
and found by ``tests/interop_support.py``: it sends for ``seconds`` with ``in_flight`` sends
outstanding and prints one ``bench`` line (sent, failed, msgs/s, each send's p50/p99). Bodies
are ``<prefix>-<i>`` of about the size asked for. Unless ``keys=False`` (the driver's
``--no-keys``), the driver also sets each message's ``KEYS`` to its body, so a stored record
carries the body twice.

:func:`run_producers` runs several driver processes at once (the in-flight sends split between
them) when one node.js process cannot keep a broker busy, and reports the drivers' CPU time
per message (``RUSAGE_CHILDREN`` over the run: the processes this one waited for), so that a
reader sees whether the client or the broker is the limit.
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from interop_support import ALIONS_DRIVER, ClientUnavailable, ensure_alions, parse_lines

from hanet.testing import cli_flags

__all__ = ["bench_command", "children_cpu", "run_bench", "run_producers", "unavailable"]


def unavailable() -> str | None:
    """Why ali-ons cannot run here (None: it can; installed on first use)."""
    try:
        ensure_alions()
    except ClientUnavailable as exc:
        return str(exc)
    return None


def bench_command(
    namesrv: str,
    topic: str,
    seconds: float,
    in_flight: int,
    size: int,
    group: str,
    *,
    keys: bool = True,
) -> list[str]:
    """The driver's bench command: bodies ``<prefix>-<i>`` of ``size`` to ``size + 6`` bytes
    (``-<i>`` adds 2 to 8 bytes to a prefix of ``size - 8``); ``keys``: each body in its
    message's ``KEYS`` too."""
    node, modules = ensure_alions()
    common = cli_flags(namesrv=namesrv, topic=topic, seconds=seconds)
    common += cli_flags(prefix="x" * max(size - 8, 1), group=group)
    return [
        node,
        str(ALIONS_DRIVER),
        "bench",
        *common,
        *cli_flags(modules=modules, in_flight=in_flight, no_keys=not keys),
    ]


async def run_bench(cmd: list[str]) -> dict[str, Any]:
    """Runs one driver to its end; its ``bench`` line (exits with its stderr when it printed
    none)."""
    done = await trio.run_process(
        cmd, capture_stdout=True, capture_stderr=True, check=False, stdin=subprocess.DEVNULL
    )
    lines = parse_lines(done.stdout.decode(errors="replace"))
    if not lines or lines[-1].get("event") != "bench":
        sys.exit(
            f"the driver printed no bench line (exit {done.returncode}):\n"
            f"{done.stderr.decode(errors='replace')[-2000:]}"
        )
    return lines[-1]


def children_cpu() -> float:
    """CPU seconds (user + system) of the child processes this one has waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def run_producers(
    namesrv: str,
    topic: str,
    *,
    seconds: float,
    in_flight: int,
    size: int,
    processes: int = 1,
    keys: bool = True,
) -> dict[str, Any]:
    """``processes`` drivers at once, ``in_flight`` sends in flight between them (split as
    evenly as it goes), for ``seconds``. The sum of their msgs/s; p50 the median of theirs,
    p99 the largest (the drivers report percentiles, not their samples); the drivers' CPU
    per message sent (``client_cpu_us_per_msg``) and in % of one core."""
    shares = [in_flight // processes + (k < in_flight % processes) for k in range(processes)]
    shares = [s for s in shares if s > 0]
    lines: list[dict[str, Any]] = []
    cpu = children_cpu()
    started = time.perf_counter()

    async def one(k: int, share: int) -> None:
        cmd = bench_command(namesrv, topic, seconds, share, size, f"bench-alions-{k}", keys=keys)
        lines.append(await run_bench(cmd))

    async with trio.open_nursery() as nursery:
        for k, share in enumerate(shares):
            nursery.start_soon(one, k, share)
    wall = time.perf_counter() - started
    cpu = children_cpu() - cpu
    sent = sum(int(line.get("sent") or 0) for line in lines)
    failed = sum(int(line.get("failed") or 0) for line in lines)
    p50s = [line["p50Ms"] for line in lines if line.get("p50Ms") is not None]
    p99s = [line["p99Ms"] for line in lines if line.get("p99Ms") is not None]
    return {
        "messages": sent + failed,
        "sent": sent,
        "failed": failed,
        "messages_per_second": round(sum(float(line.get("msgsPerSec") or 0) for line in lines), 1),
        "latency_ms_p50": round(statistics.median(p50s), 3) if p50s else None,
        "latency_ms_p99": max(p99s) if p99s else None,
        "in_flight": in_flight,
        "processes": len(shares),
        "client_cpu_us_per_msg": round(cpu * 1e6 / sent, 1) if sent else None,
        "client_cpu_percent": round(cpu / wall * 100, 1) if wall else None,
    }
