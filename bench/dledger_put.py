"""DLedger put throughput and latency: 1 and 3 ``hanet dledger`` nodes, 100 B and 1 KiB
messages, with hanet's client (``hanet put``), RocketMQ's C++ client (PyPI ``rocketmq``) and
npm ``ali-ons``.

Each round starts a group per node count (and per code under test) at once, waits for their
leaders, then measures each case (size, sends in flight, client) on every group one after the
other, in an order reversed every other round. ``--count`` messages per case with
``--concurrency`` in flight: ``hanet put
--broker`` (it follows a follower's answer to the leader) and the C++ client through a name
server in this process where the leader is registered as broker ``0`` of its name, and
registered again at once when leadership moves (the bench asks the nodes every 0.25 s). The C++
client reads routes only every 30 s: a send that fails (to a node no longer the leader) is sent
again through a fresh producer, which reads them at once, for up to a minute; ``retry`` counts
those sends and ``chg`` the leader changes seen during a measurement. Every
measurement is printed with the 1-minute load average: the machine may be shared, so the
figures are noisy; compare medians over rounds and look at the spread. The nodes' CPU time per
message (all nodes, and the busiest one's: the leader's) is reported too: less sensitive to the
machine's load. So is each client's own CPU time per message (``client us``: the client
processes this bench waited for, ``RUSAGE_CHILDREN``): when the client spends more CPU a
message than the nodes do, on a machine with few cores, the client is the limit, not the node.

``--clients alions`` (npm ``ali-ons`` through the interop tests' driver, ``bench/_alions.py``)
reaches the group as RocketMQ's clients reach DLedger brokers: a ``hanet namesrv`` process per
group, the nodes started with ``--namesrv`` (the leader registers as broker id 0), ali-ons
reading the route from it. It sends for ``--seconds`` (not ``--count``) with each of
``--concurrency`` in flight (a list: ``16,32``), split over ``--alions-procs`` node.js
processes (one process may not keep a node busy: compare ``client us`` with ``cpu us``, and
``ldr %``, the busiest node's CPU in % of one core, with ``cli %``, the clients'; a node is
one thread, so near 100 % it is the limit; an ali-ons process costs ~0.1 s of CPU to start,
counted in ``client us``). The
topic is created first by one put of hanet's client, and the bench waits until the name server
routes it. With ali-ons, each round also runs a classic ``hanet master`` (ASYNC_MASTER, the same
``--flush``, registered with its own name server) under the same ali-ons load, as the baseline
within the run (``master`` rows, ``vs master`` in the summary); ``--no-master`` leaves it out.
The ali-ons messages carry no ``KEYS``, like those of RocketMQ's Java producer behind issue
26's figures; ``--alions-keys`` sets each one's ``KEYS`` to its body as the interop tests'
driver does by default (a record then carries its body twice: session 10's figures were so).

    .venv/bin/python bench/dledger_put.py --rounds 3 --count 3000 --ab /tmp/main-checkout
    .venv/bin/python bench/dledger_put.py --clients alions --concurrency 16,32 --seconds 5

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
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _alions
from dledger_group import Group

from hanet.client import BrokerClient, NameServerClient
from hanet.testing import HanetProcesses, cli_flags

HERE = Path(__file__).resolve().parent

ROCKETMQ: dict[tuple[int, int], tuple[float, float]] = {
    (3, 100): (9212, 9736),
    (3, 1024): (5534, 6179),
    (1, 100): (21800, 24600),
    (1, 1024): (12900, 13200),
}
"""RocketMQ 4.9.8 DLedger msg/s (low, high) per (nodes, body bytes), issue 26."""
ROCKETMQ_IN_FLIGHT = {(3, 100): 32, (3, 1024): 16}
"""The sends in flight of RocketMQ's figures where issue 26 gives them: a case with as many
is marked ``=`` in the summary's ``vs RocketMQ``."""

CPP_DRIVER = HERE.parent / "tests" / "interop" / "cpp_driver.py"
RETRY_SECONDS = 60.0
"""How long the C++ worker sends a message again after a failure (a leader change)."""
LEADER_POLL = 0.25
"""How often the bench asks the nodes who leads, to register the new leader at once."""
GOAL = {1: 0.8, 3: 1.0}
"""Issue 26's goal per node count, as a fraction of RocketMQ's figure (:data:`ROCKETMQ`)."""
MASTER = 0
FILE_SIZE = "64M"
"""The nodes' data and commit log file size, and the classic master's."""
"""The node count standing for the classic ``hanet master`` (the ali-ons baseline)."""


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


def run_hanet(
    group: Group, size: int, concurrency: int, args: argparse.Namespace
) -> dict[str, Any]:
    put = ["put", "--broker", group.broker_list, "--topic", f"H{size}", "--size", str(size)]
    load = ["--count", str(args.count), "--concurrency", str(concurrency)]
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


async def _run_cpp(
    group: Group, leader: str, size: int, concurrency: int, args: argparse.Namespace
) -> str:
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
            load = ["--count", str(args.count), "--concurrency", str(concurrency)]
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


def run_cpp(
    group: Group, leader: str, size: int, concurrency: int, args: argparse.Namespace
) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(trio.run(_run_cpp, group, leader, size, concurrency, args))
    result["messages"] = args.count
    return result


# --- ali-ons through a name server, and the classic master it is set against ----------------


def start_namesrv(processes: HanetProcesses) -> str:
    """A ``hanet namesrv`` process (this tree's); its ``host:port``."""
    quiet = ("--log-level", "WARNING")
    namesrv = processes.start_blocking("namesrv", *quiet, "namesrv", "--listen", "127.0.0.1:0")
    address: str = namesrv.ready["namesrv"]
    return address


def start_master(
    processes: HanetProcesses,
    store: Path,
    namesrv: str,
    code: Path | None,
    args: argparse.Namespace,
) -> tuple[int, tuple[str, int]]:
    """A classic ``hanet master`` (ASYNC_MASTER, ``--flush``, the nodes' file size and queues)
    from ``code`` (None: this tree), registered with ``namesrv``: its pid and broker port."""
    flags = cli_flags(store=store, listen="127.0.0.1:0", ha_listen="127.0.0.1:0")
    flags += cli_flags(role="ASYNC_MASTER", flush=args.flush, mapped_file_size=FILE_SIZE)
    flags += cli_flags(namesrv=namesrv, queues=4)
    # ``python -m`` puts its working directory first on sys.path: --ab runs in that tree
    env = None if code is None else dict(os.environ, PYTHONPATH=str(code))
    quiet = ("--log-level", "WARNING")
    master = processes.start_blocking("master", *quiet, "master", *flags, env=env, cwd=code)
    return master.pid, master.address()


async def _prepare_topic(namesrv: str, broker: tuple[str, int], topic: str) -> None:
    """Creates ``topic`` on ``broker`` (one put of hanet's client) and waits until the name
    server routes it to ``broker`` (the broker registers a created topic at once)."""
    async with BrokerClient.connect(*broker) as client:
        reply = await client.put(topic, b"warm-up")
        if not reply.ok:
            raise RuntimeError(f"the warm-up put to {topic} answered {reply.status.value}")
    host, _, port = namesrv.rpartition(":")
    names = NameServerClient([(host, int(port))])
    with trio.fail_after(30):
        while True:
            try:
                if broker in await names.put_addresses(topic):
                    return
            except Exception:  # not registered yet
                pass
            await trio.sleep(0.05)


def warm_alions(
    namesrv: str, broker: tuple[str, int], size: int, concurrency: int, args: argparse.Namespace
) -> None:
    """Topic ``A<size>`` created and routed, then a second of ali-ons sends to it, not
    measured (a fresh set-up's first second runs slower: its files' first pages, the
    connections, the first routes)."""
    trio.run(_prepare_topic, namesrv, broker, f"A{size}")
    run_alions(namesrv, broker, size, concurrency, args, seconds=1.0)


def run_alions(
    namesrv: str,
    broker: tuple[str, int],
    size: int,
    concurrency: int,
    args: argparse.Namespace,
    seconds: float | None = None,
) -> dict[str, Any]:
    """ali-ons for ``--seconds``, ``concurrency`` in flight over ``--alions-procs``
    processes, to topic ``A<size>`` as the name server routes it (see :func:`warm_alions`)."""
    return trio.run(
        partial(
            _alions.run_producers,
            namesrv,
            f"A{size}",
            seconds=seconds or args.seconds,
            in_flight=concurrency,
            size=size,
            processes=args.alions_procs,
            keys=args.alions_keys,
        )
    )


def cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    """Each node's CPU time (user + system) so far: a figure less sensitive than the rate to
    what else the machine runs."""
    tick = os.sysconf("SC_CLK_TCK")
    used = {}
    for node, pid in pids.items():
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        used[node] = (int(fields[11]) + int(fields[12])) / tick
    return used


def target_name(nodes: int) -> str:
    return "master" if nodes == MASTER else f"{nodes}n"


def row(round_: int, code: str, nodes: int, size: int, client: str, r: dict[str, Any]) -> None:
    client_us = r.get("client_cpu_us_per_msg")
    print(
        f"{round_:>5d} {code:6s} {target_name(nodes):>6s} {size:>5d} {client:6s} "
        f"{r['in_flight']:>3d} {r['messages_per_second']:>8,.0f} {r['latency_ms_p50']:>7} "
        f"{r['latency_ms_p99']:>7} {r['failed']:>4} {r['load1']:>5.1f} "
        f"{r['cpu_us_per_msg']:>7,.0f} {r['leader_cpu_us_per_msg']:>7,} "
        f"{(f'{client_us:,.0f}' if client_us is not None else '-'):>7s} "
        f"{r['leader_cpu_percent']:>5.0f} {r['client_cpu_percent']:>5.0f} "
        f"{r.get('retried', 0):>5} {r.get('leader_changes', 0):>3}",
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


class Target:
    """One set-up measured in a round: a DLedger group of ``nodes`` nodes, or the classic
    master (``nodes == MASTER``, ali-ons only), from ``code`` (None: this tree), under
    ``where``; for ali-ons, with a name server process of its own that it registers with."""

    def __init__(
        self,
        where: Path,
        nodes: int,
        code: Path | None,
        clients: list[str],
        args: argparse.Namespace,
    ) -> None:
        self.where = where
        self.nodes = nodes
        self.code = code
        self.wants_namesrv = "alions" in clients
        self.args = args
        self.processes = HanetProcesses(where, close_signal=signal.SIGTERM)
        self.group: Group | None = None
        self.namesrv = ""
        self.leader = ""
        self.pids: dict[str, int] = {}
        self.broker = ("", 0)
        self.clients = ["alions"] if nodes == MASTER else clients

    def start(self, sizes: list[int], concurrency: int) -> None:
        """Starts it; with ali-ons, warms each size's topic up (:func:`warm_alions`)."""
        self.where.mkdir(parents=True)
        if self.wants_namesrv:
            self.namesrv = start_namesrv(self.processes)
        if self.nodes == MASTER:
            store = self.where / "master"
            pid, self.broker = start_master(
                self.processes, store, self.namesrv, self.code, self.args
            )
            self.pids = {"master": pid}
        else:
            self._start_group()
        if "alions" in self.clients:
            for size in sizes:
                warm_alions(self.namesrv, self.broker, size, concurrency, self.args)

    def _start_group(self) -> None:
        extra = ("--namesrv", self.namesrv) if self.namesrv else ()
        flush = self.args.flush
        group = Group(
            self.where, self.nodes, flush=flush, code=self.code, file_size=FILE_SIZE, extra=extra
        )
        self.group = group
        group.start_all()
        self.leader = trio.run(group.leader)
        self.pids = {node: proc.pid for node, proc in group.procs.items()}
        self.broker = group.brokers[self.leader]

    def how(self, client: str, size: int, concurrency: int) -> Callable[[], dict[str, Any]]:
        """One measurement of ``client`` against this set-up."""
        if client == "alions":
            return partial(run_alions, self.namesrv, self.broker, size, concurrency, self.args)
        assert self.group is not None
        if client == "cpp":
            return partial(run_cpp, self.group, self.leader, size, concurrency, self.args)
        return partial(run_hanet, self.group, size, concurrency, self.args)

    def stop(self) -> None:
        if self.group is not None:
            self.group.stop_all()
        self.processes.close()
        shutil.rmtree(self.where, ignore_errors=True)


def measure(
    pids: dict[str, int], how: Callable[[], dict[str, Any]], in_flight: int
) -> dict[str, Any]:
    """Runs one measurement (``how``) and adds the nodes' and the client's CPU time per
    message and the load average to its result."""
    before = cpu_seconds(pids)
    client_before = _alions.children_cpu()
    started = time.perf_counter()
    result = how()
    wall = time.perf_counter() - started
    used = cpu_seconds(pids)
    client = _alions.children_cpu() - client_before
    messages = result["messages"]
    result["in_flight"] = in_flight
    result["cpu_us_per_msg"] = round(sum(used.values()) - sum(before.values()), 6) * 1e6 / messages
    # the busiest node: the leader, also when the leadership moved during the measurement
    busiest = max(used[n] - before[n] for n in used)
    result["leader_cpu_us_per_msg"] = round(busiest * 1e6 / messages)
    # a node is one thread: near 100 % of a core, it is the limit
    result["leader_cpu_percent"] = round(busiest / wall * 100, 1)
    result["client_cpu_percent"] = round(client / wall * 100, 1)
    if result.get("client_cpu_us_per_msg") is None:
        result["client_cpu_us_per_msg"] = round(client * 1e6 / messages, 1)
    result["load1"] = os.getloadavg()[0]
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--count", type=int, default=3000, help="messages per measurement")
    parser.add_argument(
        "--concurrency", default="32", help="requests in flight; a list (16,32) runs each"
    )
    parser.add_argument("--nodes", default="1,3")
    parser.add_argument("--sizes", default="100,1024")
    parser.add_argument("--clients", default="hanet,cpp", help="hanet, cpp, alions")
    parser.add_argument(
        "--seconds", type=float, default=5.0, help="seconds per ali-ons measurement (5)"
    )
    parser.add_argument(
        "--alions-procs", type=int, default=1, help="ali-ons processes sharing the sends (1)"
    )
    parser.add_argument(
        "--alions-keys",
        action="store_true",
        help="ali-ons puts each body in its message's KEYS too (a record carries it twice)",
    )
    parser.add_argument(
        "--no-master",
        action="store_true",
        help="with ali-ons, do not also run the classic hanet master as the baseline",
    )
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
        args.concurrency = int(args.concurrency)
        return cpp_worker(args)
    nodes = [int(n) for n in args.nodes.split(",")]
    sizes = [int(n) for n in args.sizes.split(",")]
    concurrencies = [int(n) for n in args.concurrency.split(",")]
    clients = args.clients.split(",")
    if unknown := set(clients) - {"hanet", "cpp", "alions"}:
        parser.error(f"unknown clients {sorted(unknown)}: want hanet, cpp, alions")
    if "cpp" in clients and (reason := cpp_available()) is not None:
        print(f"C++ client unavailable ({reason}): left out", file=sys.stderr)
        clients.remove("cpp")
    if "alions" in clients and (reason := _alions.unavailable()) is not None:
        print(f"ali-ons unavailable ({reason}): left out", file=sys.stderr)
        clients.remove("alions")
    if "alions" in clients and not args.no_master:
        nodes.append(MASTER)
    codes: dict[str, Path | None] = {"branch": None}
    if args.ab is not None:
        codes["base"] = args.ab.resolve()
    root = Path(tempfile.mkdtemp(prefix="hanet-dledger-put-"))
    args.home = root / "cpp-home"
    runs: dict[tuple[str, int, int, str, int], list[dict[str, Any]]] = {}
    print(
        f"{'round':>5s} {'code':6s} {'nodes':>6s} {'size':>5s} {'client':6s} {'inf':>3s} "
        f"{'msg/s':>8s} {'p50 ms':>7s} {'p99 ms':>7s} {'fail':>4s} {'load1':>5s} "
        f"{'cpu us':>7s} {'leader':>7s} {'client':>7s} {'ldr %':>5s} {'cli %':>5s} "
        f"{'retry':>5s} {'chg':>3s}",
        flush=True,
    )
    try:
        for round_ in range(1, args.rounds + 1):
            # every set-up of the round runs at once, measured one after the other for each
            # case, in an order reversed every other round: the load the machine has moves
            # between rounds more than within one case's measurements
            pairs = [(code, count) for count in nodes for code in codes]
            if round_ % 2 == 0:
                pairs.reverse()
            targets: dict[tuple[str, int], Target] = {}
            try:
                for code, count in pairs:
                    where = root / f"r{round_}-{code}-{target_name(count)}"
                    target = Target(where, count, codes[code], clients, args)
                    targets[(code, count)] = target
                    target.start(sizes, max(concurrencies))
                for size in sizes:
                    for concurrency in concurrencies:
                        for client in clients:
                            for code, count in pairs:
                                target = targets[(code, count)]
                                if client not in target.clients:
                                    continue
                                result = measure(
                                    target.pids, target.how(client, size, concurrency), concurrency
                                )
                                key = (code, count, size, client, concurrency)
                                runs.setdefault(key, []).append(result)
                                row(round_, code, count, size, client, result)
            finally:
                for target in targets.values():
                    target.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    figures: dict[str, Any] = {
        "count": args.count,
        "seconds_alions": args.seconds,
        "alions_procs": args.alions_procs,
        "alions_keys": args.alions_keys,
        "concurrency": concurrencies,
        "flush": args.flush,
        "rounds": args.rounds,
        "noisy": "shared machine: see load1 per measurement",
        "cases": {},
    }
    print(
        f"\n{'case':26s} {'msg/s median (min-max)':>26s} {'p99 med':>8s} {'vs base':>8s} "
        f"{'vs master':>9s} {'vs RocketMQ':>12s} {'load1':>5s} {'cpu us/msg':>10s} "
        f"{'client us':>9s} {'base':>6s}"
    )
    for (code, count, size, client, concurrency), results in sorted(runs.items()):
        if code != "branch":
            continue
        rates = [r["messages_per_second"] for r in results]
        median = statistics.median(rates)
        p99 = round(statistics.median(r["latency_ms_p99"] for r in results), 3)
        base = runs.get(("base", count, size, client, concurrency))
        vs_base = None
        if base:
            vs_base = median / statistics.median(r["messages_per_second"] for r in base)
        master = runs.get((code, MASTER, size, client, concurrency))
        vs_master = None
        vs_master_rounds: list[float] = []
        if master and count != MASTER:
            # per round (the two measured one after the other), then the median
            vs_master_rounds = [
                round(r["messages_per_second"] / m["messages_per_second"], 3)
                for r, m in zip(results, master, strict=False)
            ]
            vs_master = statistics.median(vs_master_rounds)
        low, high = ROCKETMQ.get((count, size), (0.0, 0.0))
        vs_rmq = median / ((low + high) / 2) if high else None
        loads = [r["load1"] for r in results]
        cpu = statistics.median(r["cpu_us_per_msg"] for r in results)
        client_cpu = statistics.median(r["client_cpu_us_per_msg"] for r in results)
        base_cpu = statistics.median(r["cpu_us_per_msg"] for r in base) if base else None
        name = f"{target_name(count)}/{size}B/{client}"
        rmq_in_flight = ROCKETMQ_IN_FLIGHT.get((count, size))
        same = "=" if rmq_in_flight == concurrency else " "
        if len(concurrencies) > 1:
            name += f"/{concurrency}"
        spread = f"{median:,.0f} ({min(rates):,.0f}-{max(rates):,.0f})"
        print(
            f"{name:26s} {spread:>26s} {p99:>8} "
            f"{(f'{vs_base:.2f}x' if vs_base else '-'):>8s} "
            f"{(f'{vs_master:.2f}x' if vs_master else '-'):>9s} "
            f"{(f'{vs_rmq:.2f}x{same}' if vs_rmq else '-'):>12s} "
            f"{statistics.median(loads):>5.1f} {cpu:>10,.0f} {client_cpu:>9,.0f} "
            f"{(f'{base_cpu:,.0f}' if base_cpu else '-'):>6s}"
        )
        case: dict[str, Any] = {
            "in_flight": concurrency,
            "msg_s_median": median,
            "msg_s_min": min(rates),
            "msg_s_max": max(rates),
            "msg_s_rounds": rates,
            "p50_ms_median": statistics.median(r["latency_ms_p50"] for r in results),
            "p99_ms_median": p99,
            "load1": loads,
            "cpu_us_per_msg_median": cpu,
            "cpu_us_per_msg_rounds": [round(r["cpu_us_per_msg"], 1) for r in results],
            "leader_cpu_us_per_msg_median": statistics.median(
                r["leader_cpu_us_per_msg"] for r in results
            ),
            "client_cpu_us_per_msg_median": client_cpu,
            "client_cpu_us_per_msg_rounds": [r["client_cpu_us_per_msg"] for r in results],
            "leader_cpu_percent_rounds": [r["leader_cpu_percent"] for r in results],
            "client_cpu_percent_rounds": [r["client_cpu_percent"] for r in results],
            "failed": sum(r["failed"] for r in results),
            "retried": sum(r.get("retried", 0) for r in results),
            "leader_changes": sum(r.get("leader_changes", 0) for r in results),
            "first_error": next((r["first_error"] for r in results if r.get("first_error")), None),
            "vs_rocketmq_dledger": round(vs_rmq, 3) if vs_rmq else None,
            "rocketmq_in_flight": rmq_in_flight,
        }
        if vs_rmq is not None and count in GOAL:
            case["goal_vs_rocketmq"] = GOAL[count]
            case["goal_met"] = vs_rmq >= GOAL[count]
        if client == "alions":
            case["alions_procs"] = results[0].get("processes")
        if vs_master is not None:
            case["vs_master"] = round(vs_master, 3)
            case["vs_master_rounds"] = vs_master_rounds
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
