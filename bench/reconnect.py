"""Benchmark reconnects: hanet's ReconnectingClient against raw trio open/close.

Run: ``.venv/bin/python bench/reconnect.py [--count 10000] [--rounds 5]``

A server in a second process accepts TCP connections on loopback and closes each one when its
peer does. In alternating rounds, in one ``trio.run``, the client side does ``count / rounds``
cycles of:

- raw trio: ``await trio.open_tcp_stream(...)`` then ``await stream.aclose()``;
- hanet: a :class:`hanet.ReconnectingClient` (zero delay) whose pipeline closes the channel in
  ``channel_active``: a new channel, pipeline, reader, writer and timer task per connection.

Reported: connects per second of each, their ratio (hanet / raw), and the process's open file
descriptors and live trio tasks before and after the hanet rounds (goal: both deltas 0, the
point of docs/netty.md §7). A table for humans, then the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing
import multiprocessing.connection
import os
import sys
import time

import trio

from hanet import (
    ChannelInboundHandler,
    HandlerContext,
    ReconnectingClient,
    RetryPolicy,
    StreamChannel,
    tcp_connector,
)

HOST = "127.0.0.1"


# -- the server process ----------------------------------------------------------------------


async def _serve(conn: multiprocessing.connection.Connection) -> None:
    async def handler(stream: trio.SocketStream) -> None:
        try:
            while await stream.receive_some(65536):
                pass
        except trio.BrokenResourceError:
            pass
        finally:
            await trio.aclose_forcefully(stream)

    async with trio.open_nursery() as nursery:
        # A deep backlog: the client opens connections faster than one accept loop.
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, handler, 0, host=HOST, backlog=4096)
        )
        conn.send(listeners[0].socket.getsockname()[1])
        await trio.to_thread.run_sync(conn.recv)  # any message: stop
        nursery.cancel_scope.cancel()


def server_main(conn: multiprocessing.connection.Connection) -> None:
    trio.run(_serve, conn)


# -- the client side -----------------------------------------------------------------------------


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else -1


def live_tasks() -> int:
    def walk(task: trio.lowlevel.Task) -> int:
        return 1 + sum(walk(c) for n in task.child_nurseries for c in n.child_tasks)

    root = trio.lowlevel.current_root_task()
    assert root is not None
    return walk(root)


async def raw_round(port: int, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        stream = await trio.open_tcp_stream(HOST, port)
        await stream.aclose()
    return time.perf_counter() - start


class CloseAtOnce(ChannelInboundHandler):
    def channel_active(self, ctx: HandlerContext) -> None:
        ctx.close()


def init(channel: StreamChannel) -> None:
    channel.pipeline.add_last(CloseAtOnce())


async def hanet_round(port: int, n: int) -> tuple[float, int]:
    client = ReconnectingClient(
        tcp_connector(HOST, port),
        init,
        policy=RetryPolicy(initial_delay=0.0, max_delay=0.01, jitter=0.0),
    )
    start = time.perf_counter()
    await client.run(max_attempts=n)
    elapsed = time.perf_counter() - start
    return elapsed, client.statistics().connects


async def bench(port: int, count: int, rounds: int) -> dict[str, float | int]:
    per_round = count // rounds
    # Warm up both paths (imports, the first socket, trio's internals) before measuring.
    await raw_round(port, 50)
    await hanet_round(port, 50)
    fds_before, tasks_before = open_fds(), live_tasks()
    raw_time = hanet_time = 0.0
    connects = 0
    for _ in range(rounds):
        raw_time += await raw_round(port, per_round)
        elapsed, ok = await hanet_round(port, per_round)
        hanet_time += elapsed
        connects += ok
    fds_after, tasks_after = open_fds(), live_tasks()
    total = per_round * rounds
    raw_rate = total / raw_time
    hanet_rate = connects / hanet_time
    return {
        "reconnects": total,
        "hanet_connects": connects,
        "raw_per_s": round(raw_rate, 1),
        "hanet_per_s": round(hanet_rate, 1),
        "ratio": round(hanet_rate / raw_rate, 3),
        "fd_delta": fds_after - fds_before,
        "task_delta": tasks_after - tasks_before,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=10_000, help="reconnects of each kind")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds")
    args = parser.parse_args()

    parent, child = multiprocessing.Pipe()
    server = multiprocessing.Process(target=server_main, args=(child,), daemon=True)
    server.start()
    try:
        port = parent.recv()
        result = trio.run(bench, port, args.count, args.rounds)
    finally:
        parent.send("stop")
        server.join(10)
    print(f"{'':24}{'connects/s':>12}")
    print(f"{'raw trio open/close':24}{result['raw_per_s']:>12,.0f}")
    print(f"{'hanet ReconnectingClient':24}{result['hanet_per_s']:>12,.0f}")
    print(f"ratio hanet/raw: {result['ratio']:.2f}   (reconnects: {result['reconnects']:,})")
    print(f"fd delta: {result['fd_delta']}   task delta: {result['task_delta']}  (goal: 0, 0)")
    print(json.dumps({"bench": "reconnect", **result}))
    return 0 if result["fd_delta"] == 0 and result["task_delta"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
