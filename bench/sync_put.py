"""SYNC_MASTER against ASYNC_MASTER: what waiting for a slave's ack costs a producer.

Run: ``.venv/bin/python bench/sync_put.py [--seconds S] [--producers N] [--size BYTES]
[--rounds R]``

Each round starts, for each role, a fresh master and one slave as real processes (``hanet
master`` / ``hanet slave`` over loopback TCP; the slave is attached in both cases, so the master
does the same replication work and only the waiting differs). ``--producers`` producers (16),
each on its own broker port connection, put ``--size``-byte messages (1 KiB) one at a time for
``--seconds`` after a warm-up, as RocketMQ's synchronous ``send`` does. Rounds alternate the
roles; the best round of each role is reported.

Figures: puts/s of each role, their ratio (goal: SYNC >= 0.7 x ASYNC) and each role's p50/p99
put latency (goal: SYNC p99 <= 5 ms). A table for humans, then the last line is one JSON object
with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import tempfile
import time
from pathlib import Path

import trio

from hanet.client import BrokerClient
from hanet.testing import HanetProcesses, cli_flags

FILE_SIZE = "128M"  # no file roll during a run: the figures are about replication, not mmap


async def _producers(
    address: tuple[str, int], producers: int, connections: int, size: int, seconds: float
) -> list[float]:
    """Every put's latency in seconds (after ``seconds / 5`` of warm-up)."""
    body = b"x" * size
    latencies: list[float] = []
    warm_until = time.perf_counter() + max(seconds / 5, 0.5)
    stop_at = warm_until + seconds

    async def producer(client: BrokerClient) -> None:
        while True:
            start = time.perf_counter()
            if start >= stop_at:
                return
            reply = await client.put("BenchTopic", body, tags="bench")
            if not reply.ok:
                raise RuntimeError(f"put answered {reply.status.value}: {reply.detail}")
            if start >= warm_until:
                latencies.append(time.perf_counter() - start)

    async def connection(count: int) -> None:
        async with BrokerClient.connect(*address) as client, trio.open_nursery() as nursery:
            for _ in range(count):
                nursery.start_soon(producer, client)

    async with trio.open_nursery() as nursery:
        for i in range(connections):
            nursery.start_soon(connection, len(range(i, producers, connections)))
    return latencies


async def one_round(role: str, args: argparse.Namespace, workdir: Path) -> dict[str, float]:
    directory = Path(tempfile.mkdtemp(prefix=f"{role.lower()}-", dir=workdir))
    async with HanetProcesses(directory, close_signal=signal.SIGTERM) as processes:
        quiet = ("--log-level", "WARNING")
        files = cli_flags(mapped_file_size=FILE_SIZE)
        listen = cli_flags(listen="127.0.0.1:0", ha_listen="127.0.0.1:0")
        master_flags = cli_flags(store=directory / "master", role=role)
        master = await processes.start("master", *quiet, "master", *master_flags, *listen, *files)
        slave_flags = cli_flags(store=directory / "slave", master_ha=master.ready["ha"])
        slave_flags += cli_flags(reconnect_interval=0.1)
        await processes.start("slave", *quiet, "slave", *slave_flags, *files)
        broker = master.address()
        async with BrokerClient.connect(*broker) as client:
            with trio.fail_after(10):
                while not (await client.status()).slaves:  # noqa: ASYNC110 - a remote state
                    await trio.sleep(0.02)
        latencies = await _producers(
            broker, args.producers, args.connections, args.size, args.seconds
        )
    latencies.sort()
    n = len(latencies)
    return {
        "puts_per_second": n / args.seconds,
        "p50_ms": latencies[n // 2] * 1e3,
        "p99_ms": latencies[min(n - 1, int(n * 0.99))] * 1e3,
        "puts": n,
    }


async def main(args: argparse.Namespace) -> None:
    best: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="hanet-sync-put-") as tmp:
        for r in range(args.rounds):
            roles = (
                ("ASYNC_MASTER", "SYNC_MASTER") if r % 2 == 0 else ("SYNC_MASTER", "ASYNC_MASTER")
            )
            for role in roles:
                result = await one_round(role, args, Path(tmp))
                print(
                    f"round {r + 1} {role:<12} {result['puts_per_second']:>9,.0f} puts/s  "
                    f"p50 {result['p50_ms']:6.2f} ms  p99 {result['p99_ms']:6.2f} ms",
                    flush=True,
                )
                if role not in best or result["puts_per_second"] > best[role]["puts_per_second"]:
                    best[role] = result
    sync, async_ = best["SYNC_MASTER"], best["ASYNC_MASTER"]
    ratio = sync["puts_per_second"] / async_["puts_per_second"]
    print()
    print(f"{'role':<14}{'puts/s':>10}{'p50 ms':>10}{'p99 ms':>10}")
    for role in ("ASYNC_MASTER", "SYNC_MASTER"):
        b = best[role]
        print(f"{role:<14}{b['puts_per_second']:>10,.0f}{b['p50_ms']:>10.2f}{b['p99_ms']:>10.2f}")
    print(
        f"SYNC/ASYNC throughput ratio {ratio:.2f} (goal >= 0.7); "
        f"SYNC p99 {sync['p99_ms']:.2f} ms (goal <= 5 ms)"
    )
    print(
        json.dumps(
            {
                "bench": "sync_put",
                "producers": args.producers,
                "connections": args.connections,
                "size": args.size,
                "seconds": args.seconds,
                "rounds": args.rounds,
                "cpus": os.cpu_count(),
                "async_puts_per_second": round(async_["puts_per_second"], 1),
                "sync_puts_per_second": round(sync["puts_per_second"], 1),
                "ratio": round(ratio, 3),
                "async_p50_ms": round(async_["p50_ms"], 3),
                "async_p99_ms": round(async_["p99_ms"], 3),
                "sync_p50_ms": round(sync["p50_ms"], 3),
                "sync_p99_ms": round(sync["p99_ms"], 3),
                "goal_ratio_met": ratio >= 0.7,
                "goal_p99_met": sync["p99_ms"] <= 5.0,
            }
        )
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="measured seconds per run (5)")
    parser.add_argument("--producers", type=int, default=16, help="concurrent producers (16)")
    parser.add_argument(
        "--connections",
        type=int,
        default=1,
        help="connections the producers share (1, as a RocketMQ client instance shares one "
        "channel per broker; up to --producers)",
    )
    parser.add_argument("--size", type=int, default=1024, help="body bytes (1024)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds, roles alternating (2)")
    trio.run(main, parser.parse_args())
