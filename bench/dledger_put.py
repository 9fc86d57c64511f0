"""DLedger put throughput and latency: 1 and 3 ``hanet dledger`` nodes, 100 B and 1 KiB
messages, with hanet's client (``hanet put``) and RocketMQ's C++ client (PyPI ``rocketmq``).

Each round starts a group per node count (and per code under test), waits for its leader and
sends ``--count`` messages per size and client with ``--concurrency`` in flight: ``hanet put
--broker`` (it follows a follower's answer to the leader) and the C++ client through a name
server in this process where the leader is registered as broker ``0`` of its name, and
registered again at once when leadership moves (the bench asks the nodes every 0.25 s). The C++
client reads routes only every 30 s: a send that fails (to a node no longer the leader) is sent
again through a fresh producer, which reads them at once, for up to a minute; ``retry`` counts
those sends and ``chg`` the leader changes seen during a measurement. Every
measurement is printed with the 1-minute load average: the machine may be shared, so the
figures are noisy; compare medians over rounds and look at the spread. The nodes' CPU time per
message (all nodes, and the busiest one's: the leader's) is reported too: less sensitive to the
machine's load.

    .venv/bin/python bench/dledger_put.py --rounds 3 --count 3000 --ab /tmp/main-checkout

``--ab DIR`` also runs the nodes from a checkout of another revision (``git archive main |
tar -x -C DIR``, with its built ``hanet/store/_speedups*.so`` copied in) in the same rounds,
interleaved: the ratio this branch / that one is per case. Each case is also set against
RocketMQ 4.9.8's DLedger figures measured on this machine kind (issue 26's table, Java
producer, ASYNC_FLUSH; its 3-node 1 KiB row used 16 in flight).

A table, then the last line one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dledger_group import Group

HERE = Path(__file__).resolve().parent

ROCKETMQ: dict[tuple[int, int], tuple[float, float]] = {
    (3, 100): (9212, 9736),
    (3, 1024): (5534, 6179),
    (1, 100): (21800, 24600),
    (1, 1024): (12900, 13200),
}
"""RocketMQ 4.9.8 DLedger msg/s (low, high) per (nodes, body bytes), issue 26."""

CPP_DRIVER = HERE.parent / "tests" / "interop" / "cpp_driver.py"
RETRY_SECONDS = 60.0
"""How long the C++ worker sends a message again after a failure (a leader change)."""
LEADER_POLL = 0.25
"""How often the bench asks the nodes who leads, to register the new leader at once."""


def cpp_worker(args: argparse.Namespace) -> int:
    """The C++ client in this process (``--cpp-worker``): a warm-up, then ``--count`` sends of
    ``--size`` bytes from ``--concurrency`` threads; one JSON line."""
    sys.path.insert(0, str(CPP_DRIVER.parent))
    from cpp_driver import load_client, percentile

    client, ffi, _exc = load_client(args.home)
    made = [0]

    def new_producer() -> Any:
        """A producer with an instance of its own: a client of its own, which reads the
        routes anew (the C++ client polls them only every 30 s)."""
        made[0] += 1
        producer = client.Producer(f"bench-{os.getpid()}-{made[0]}", timeout=10_000)
        ffi.dll.SetProducerInstanceName(producer._handle, f"bench-{made[0]}".encode())
        producer.set_namesrv_addr(args.namesrv)
        producer.start()
        return producer

    producers = [new_producer()]
    body = "x" * args.size
    # The first sends race the client's connection and routes ("No route info of this
    # topic"): a warm-up, not timed, until a run of sends in a row succeeds.
    ok = 0
    for _ in range(500):
        msg = client.Message(args.topic)
        msg.set_body(body)
        try:
            producers[-1].send_sync(msg)
            ok += 1
        except Exception:
            ok = 0
            time.sleep(0.05)
        if ok >= 2 * args.concurrency:
            break
    lock = threading.Lock()
    state = {"next": 0, "failed": 0, "retried": 0, "renewed_at": time.monotonic()}
    latencies: list[float] = []
    errors: list[str] = []

    def send(msg: Any) -> bool:
        """Send ``msg``; after a failure (a leader change: the route names the old leader
        until the client reads it again) send it again for up to ``RETRY_SECONDS``, through
        a fresh producer (one at most every second). False: it failed all along."""
        deadline = time.monotonic() + RETRY_SECONDS
        while True:
            producer = producers[-1]
            try:
                producer.send_sync(msg)
                return True
            except Exception as exc:
                with lock:
                    if not errors:
                        errors.append(f"{type(exc).__name__}: {exc}"[:300])
                    state["retried"] += 1
                    now = time.monotonic()
                    if producers[-1] is producer and now - state["renewed_at"] >= 1.0:
                        state["renewed_at"] = now
                        producers.append(new_producer())  # the old one ends with the run
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.05)

    def worker() -> None:
        while True:
            with lock:
                if state["next"] >= args.count:
                    return
                state["next"] += 1
            msg = client.Message(args.topic)
            msg.set_body(body)
            t0 = time.perf_counter()
            if not send(msg):
                with lock:
                    state["failed"] += 1
                continue
            ms = (time.perf_counter() - t0) * 1000
            with lock:
                latencies.append(ms)

    started = time.perf_counter()
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(args.concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    for producer in producers:
        producer.shutdown()
    ordered = sorted(latencies)
    print(
        json.dumps(
            {
                "messages_per_second": round(len(ordered) / elapsed, 1),
                "latency_ms_p50": percentile(ordered, 50),
                "latency_ms_p99": percentile(ordered, 99),
                "failed": state["failed"],
                "retried": state["retried"],
                "producers": len(producers),
                "first_error": errors[0] if errors else None,
            }
        ),
        flush=True,
    )
    return 0


def run_hanet(group: Group, size: int, args: argparse.Namespace) -> dict[str, Any]:
    put = ["put", "--broker", group.broker_list, "--topic", f"H{size}", "--size", str(size)]
    load = ["--count", str(args.count), "--concurrency", str(args.concurrency)]
    out = subprocess.run(
        [sys.executable, "-m", "hanet", *put, *load, "--json", "--quiet"],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    summary: dict[str, Any] = json.loads(out.stdout)
    failed = summary["messages"] - summary["statuses"].get("PUT_OK", 0)
    return {**summary, "failed": failed}


async def _run_cpp(group: Group, leader: str, size: int, args: argparse.Namespace) -> str:
    from hanet.client import NameServerClient
    from hanet.namesrv import NameServer
    from hanet.protocol import BrokerRegistration

    topic = f"C{size}"
    changes: list[str] = []
    async with trio.open_nursery() as nursery:
        server = NameServer(("127.0.0.1", 0))
        names = await nursery.start(server.run)

        def registration(node: str) -> BrokerRegistration:
            host, port = group.brokers[node]
            broker = ("DefaultCluster", "dledger-bench", 0, "ASYNC_MASTER", f"{host}:{port}")
            return BrokerRegistration(*broker, topics=((topic, 4),))

        # held open: the name server drops a broker whose connection closes
        async with NameServerClient([names]).connection(names) as held:
            await held.register_broker(registration(leader))

            async def follow_leader() -> None:
                """Register the leader again, at once, whenever leadership moves (as the
                nodes' own registration does): the client reads it at its next poll."""
                current = leader
                while True:
                    await trio.sleep(LEADER_POLL)
                    try:
                        now = await group.leader(seconds=5)
                    except trio.TooSlowError:
                        continue
                    if now != current:
                        await held.unregister_broker(registration(current))
                        await held.register_broker(registration(now))
                        changes.append(now)
                        current = now

            nursery.start_soon(follow_leader)
            if args.pause_leader is not None and len(group.ids) > 1:
                nursery.start_soon(pause, group.procs[leader], args.pause_leader)
            worker = [str(HERE / "dledger_put.py"), "--cpp-worker", "--home", str(args.home)]
            where = ["--namesrv", f"127.0.0.1:{names[1]}", "--topic", topic, "--size", str(size)]
            load = ["--count", str(args.count), "--concurrency", str(args.concurrency)]
            done = await trio.run_process(
                [sys.executable, *worker, *where, *load],
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
            nursery.cancel_scope.cancel()
    if done.returncode != 0:
        raise RuntimeError(f"C++ client: exit {done.returncode}: {done.stderr.decode()[-500:]}")
    lines = done.stdout.decode().strip().splitlines()
    result = json.loads(lines[-1])
    result["leader_changes"] = len(changes)
    return json.dumps(result)


async def pause(proc: subprocess.Popen[bytes], after: float) -> None:
    """Stop ``proc`` ``after`` seconds in for 3 election timeouts, then let it go on: the
    others elect a leader meanwhile (``--pause-leader``: a leader change mid-run)."""
    await trio.sleep(after)
    proc.send_signal(signal.SIGSTOP)
    try:
        await trio.sleep(1.5)
    finally:
        proc.send_signal(signal.SIGCONT)


def run_cpp(group: Group, leader: str, size: int, args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(trio.run(_run_cpp, group, leader, size, args))
    return result


def cpu_seconds(group: Group) -> dict[str, float]:
    """Each node's CPU time (user + system) so far: a figure less sensitive than the rate to
    what else the machine runs."""
    tick = os.sysconf("SC_CLK_TCK")
    used = {}
    for node, proc in group.procs.items():
        fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        used[node] = (int(fields[11]) + int(fields[12])) / tick
    return used


def row(round_: int, code: str, nodes: int, size: int, client: str, r: dict[str, Any]) -> None:
    print(
        f"{round_:>5d} {code:6s} {nodes:>5d} {size:>5d} {client:6s} "
        f"{r['messages_per_second']:>8,.0f} {r['latency_ms_p50']:>7} {r['latency_ms_p99']:>7} "
        f"{r['failed']:>4} {r['load1']:>5.1f} {r['cpu_us_per_msg']:>7,.0f} "
        f"{r['leader_cpu_us_per_msg']:>7,} {r.get('retried', 0):>5} "
        f"{r.get('leader_changes', 0):>3}",
        flush=True,
    )


def cpp_available() -> str | None:
    done = subprocess.run(
        [sys.executable, "-c", "import rocketmq.client"],
        env={**os.environ, "HOME": tempfile.gettempdir()},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode == 0:
        return None
    return (done.stderr.strip().splitlines() or ["no output"])[-1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--count", type=int, default=3000, help="messages per measurement")
    parser.add_argument("--concurrency", type=int, default=32, help="requests in flight")
    parser.add_argument("--nodes", default="1,3")
    parser.add_argument("--sizes", default="100,1024")
    parser.add_argument("--clients", default="hanet,cpp")
    parser.add_argument("--flush", default="ASYNC_FLUSH", choices=["ASYNC_FLUSH", "SYNC_FLUSH"])
    parser.add_argument("--ab", type=Path, help="also run the nodes from this checkout")
    parser.add_argument(
        "--pause-leader",
        type=float,
        metavar="SECONDS",
        help="stop a group's leader this long into each C++ client measurement, for 1.5 s "
        "(a leader change mid-run: the bench registers the new leader, the client follows)",
    )
    parser.add_argument("--cpp-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--namesrv", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, default=100, help=argparse.SUPPRESS)
    parser.add_argument("--home", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cpp_worker:
        return cpp_worker(args)
    nodes = [int(n) for n in args.nodes.split(",")]
    sizes = [int(n) for n in args.sizes.split(",")]
    clients = args.clients.split(",")
    if "cpp" in clients and (reason := cpp_available()) is not None:
        print(f"C++ client unavailable ({reason}): hanet's client only", file=sys.stderr)
        clients.remove("cpp")
    codes: dict[str, Path | None] = {"branch": None}
    if args.ab is not None:
        codes["base"] = args.ab.resolve()
    root = Path(tempfile.mkdtemp(prefix="hanet-dledger-put-"))
    args.home = root / "cpp-home"
    runs: dict[tuple[str, int, int, str], list[dict[str, Any]]] = {}
    print(
        f"{'round':>5s} {'code':6s} {'nodes':>5s} {'size':>5s} {'client':6s} {'msg/s':>8s} "
        f"{'p50 ms':>7s} {'p99 ms':>7s} {'fail':>4s} {'load1':>5s} {'cpu us':>7s} {'leader':>7s} "
        f"{'retry':>5s} {'chg':>3s}",
        flush=True,
    )
    try:
        for round_ in range(1, args.rounds + 1):
            order = list(codes) if round_ % 2 else list(reversed(codes))
            for count in nodes:
                for code in order:
                    where = root / f"r{round_}-{code}-{count}"
                    group = Group(where, count, flush=args.flush, code=codes[code])
                    group.start_all()
                    try:
                        leader = trio.run(group.leader)
                        for size in sizes:
                            for client in clients:
                                before = cpu_seconds(group)
                                if client == "cpp":
                                    result = run_cpp(group, leader, size, args)
                                else:
                                    result = run_hanet(group, size, args)
                                used = cpu_seconds(group)
                                result["cpu_us_per_msg"] = (
                                    round(sum(used.values()) - sum(before.values()), 6)
                                    * 1e6
                                    / args.count
                                )
                                # the busiest node: the leader, also when the
                                # leadership moved during the measurement
                                busiest = max(used[n] - before[n] for n in used)
                                result["leader_cpu_us_per_msg"] = round(busiest * 1e6 / args.count)
                                load = os.getloadavg()[0]
                                result["load1"] = load
                                runs.setdefault((code, count, size, client), []).append(result)
                                row(round_, code, count, size, client, result)
                    finally:
                        group.stop_all()
                        shutil.rmtree(where, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    figures: dict[str, Any] = {
        "count": args.count,
        "concurrency": args.concurrency,
        "flush": args.flush,
        "rounds": args.rounds,
        "noisy": "shared machine: see load1 per measurement",
        "cases": {},
    }
    print(
        f"\n{'case':22s} {'msg/s median (min-max)':>26s} {'p99 med':>8s} {'vs base':>8s} "
        f"{'vs RocketMQ':>12s} {'load1':>5s} {'cpu us/msg':>10s} {'base':>6s}"
    )
    for (code, count, size, client), results in sorted(runs.items()):
        if code != "branch":
            continue
        rates = [r["messages_per_second"] for r in results]
        median = statistics.median(rates)
        p99 = round(statistics.median(r["latency_ms_p99"] for r in results), 3)
        base = runs.get(("base", count, size, client))
        vs_base = None
        if base:
            vs_base = median / statistics.median(r["messages_per_second"] for r in base)
        low, high = ROCKETMQ.get((count, size), (0.0, 0.0))
        vs_rmq = median / ((low + high) / 2) if high else None
        loads = [r["load1"] for r in results]
        cpu = statistics.median(r["cpu_us_per_msg"] for r in results)
        base_cpu = statistics.median(r["cpu_us_per_msg"] for r in base) if base else None
        name = f"{count}n/{size}B/{client}"
        spread = f"{median:,.0f} ({min(rates):,.0f}-{max(rates):,.0f})"
        print(
            f"{name:22s} {spread:>26s} {p99:>8} "
            f"{(f'{vs_base:.2f}x' if vs_base else '-'):>8s} "
            f"{(f'{vs_rmq:.2f}x' if vs_rmq else '-'):>12s} "
            f"{statistics.median(loads):>5.1f} {cpu:>10,.0f} "
            f"{(f'{base_cpu:,.0f}' if base_cpu else '-'):>6s}"
        )
        case: dict[str, Any] = {
            "msg_s_median": median,
            "msg_s_min": min(rates),
            "msg_s_max": max(rates),
            "p50_ms_median": statistics.median(r["latency_ms_p50"] for r in results),
            "p99_ms_median": p99,
            "load1": loads,
            "cpu_us_per_msg_median": cpu,
            "leader_cpu_us_per_msg_median": statistics.median(
                r["leader_cpu_us_per_msg"] for r in results
            ),
            "failed": sum(r["failed"] for r in results),
            "retried": sum(r.get("retried", 0) for r in results),
            "leader_changes": sum(r.get("leader_changes", 0) for r in results),
            "first_error": next((r["first_error"] for r in results if r.get("first_error")), None),
            "vs_rocketmq_dledger": round(vs_rmq, 3) if vs_rmq else None,
        }
        if base:
            case["base_msg_s_median"] = statistics.median(r["messages_per_second"] for r in base)
            case["vs_base"] = round(vs_base, 3) if vs_base else None
            case["base_cpu_us_per_msg_median"] = base_cpu
            case["cpu_vs_base"] = round(cpu / base_cpu, 3) if base_cpu else None
        figures["cases"][name] = case
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
