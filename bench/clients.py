"""Real RocketMQ clients against ``hanet master``: sends of 1 KiB messages, then a pull drain.

Run: ``.venv/bin/python bench/clients.py [--seconds S] [--clients alions,cpp] [--queues N]
[--rounds R] [--ab DIR] [--floor] [--busy-cpus]``

For each client a fresh ``hanet namesrv`` and ``hanet master`` (ASYNC_MASTER, ASYNC_FLUSH) start
as processes, with the bench topic in the master's ``config/topics.json``. The client sends
1 KiB messages for ``--seconds`` (20): npm ``ali-ons`` with 16 sends in flight
(``tests/interop/alions_driver.js bench --in-flight 16``), the C++ client (PyPI ``rocketmq``)
with one thread (``tests/interop/cpp_driver.py bench --in-flight 1``); the driver reports
msgs/s and each send's p50/p99. Then the drain reads every message back with hanet's own
``BrokerClient.pull`` (PULL_MESSAGE over remoting, 32 messages a pull, one pull in flight per
queue on one connection, as a RocketMQ pull consumer), in a child process running the tree
under test's client: msgs/s, each pull's p50/p99 and the client's CPU per message. That drain
is bound by the Python client, so a raw drain follows: the same pulls as
frames built by this script, each answer's header read and its records counted by their size
fields, not decoded; the broker is then the busy side, and its CPU per pulled message is the
figure to compare (the goals use this drain).

``--rounds R`` repeats every run; ``--ab DIR`` also runs the hanet source tree in ``DIR`` (a
worktree of an older commit, with its built extensions) in every round, the order of the two
alternating, and prints each figure's median and range per tree: on a shared machine the
load moves between runs, so compare rounds run side by side, never single figures.

Before the timed sends one put by hanet's client (to another topic) takes the first commit log
file (``--file-size``, 1G as RocketMQ; reserved ahead of the first put and mapped without
being faulted in, as RocketMQ's ``warmMapedFileEnable=false``); that put is timed and reported
apart.
For each phase the broker's CPU (utime + stime of ``/proc/<pid>/stat`` over the phase, in % of
one core; a message's share of each apart: utime is the broker's own work, Python's, stime the
kernel's for it) and its private memory (``Private_Clean + Private_Dirty`` of
``/proc/<pid>/smaps_rollup``, the largest sample, every 0.25 s, and of it the anonymous part:
the rest is mapped file pages, mostly the commit log's written pages), the bench process's own CPU
(the drain's client), the time the broker waited for a CPU while runnable (``schedstat``: other
processes' load) and the load average at the phase's end. RocketMQ 4.9.8's figures are
constants measured elsewhere (its own broker on a machine of this kind with the same clients and
settings, as issue 19 quotes them): the goal is sends at least as fast, drains at least 2x,
private memory no higher. RocketMQ's quoted ~340 MB cannot include its own mapped commit log
(at its quoted send rate for 20 s it stores well over 400 MB of records, written through a
mapping as hanet writes them), so both readings are checked against it: all private memory,
and the anonymous part alone.

``--floor`` also runs, in every round, the C++ client's send phase (the same command) against
the responders of ``bench/_floor.py``, each name server and broker in one, answering without
storing anything: two bare ones (a trio server and a plain ``epoll`` loop) and ``hanet`` (the
same answers through hanet's channel, pipeline and remoting codec), their CPU measured as the
broker's: how far the broker is from a server that does no work, and how much of that is
the framework's (JSON ``floor``).

``--busy-cpus`` runs, beside every send phase, one busy loop a CPU at the lowest priority
(nice 19): the CPUs no longer idle between round trips. With one send in flight a round trip
is the client's CPU then the server's, one after the other, and on these VMs waking an idle
CPU costs enough to move the C++ row by 4-34 % (4 pairs): run with and without it to see how
much of a difference between figures is the machine's state rather than the server's work.

A table for humans, then the last line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import _alions
import _floor
from interop_support import CPP_DRIVER, cpp_client_unavailable_reason, cpp_home

from hanet.client import BrokerClient
from hanet.protocol import (
    DataVersion,
    TopicConfig,
    TopicConfigSerializeWrapper,
    encode_command,
    pull_message_request,
)
from hanet.testing import HanetProcesses, cli_flags

SCRIPT = Path(__file__).resolve()
FLOOR_SCRIPT = Path(_floor.__file__).resolve()
TOPIC = "BenchClients"
WARMUP_TOPIC = "BenchWarmup"
SIZE = 1024
FILE_SIZE = "1G"
"""RocketMQ's commit log file size (``mappedFileSizeCommitLog``), the default of --file-size."""
PULL_BATCH = 32
TICKS = os.sysconf("SC_CLK_TCK")

ROCKETMQ_SENDS = {"alions": (23_700, 24_800), "cpp": (3_100, 3_300)}
"""RocketMQ 4.9.8's msgs/s with each client (ali-ons 16 in flight, the C++ client 1 thread)."""
ROCKETMQ_DRAIN = 96_000
ROCKETMQ_CPU = (84, 87)
ROCKETMQ_PRIVATE_MB = 340
ROCKETMQ_4_9_8 = {
    "source": "RocketMQ 4.9.8's own broker, same clients and settings, measured elsewhere on "
    "this machine kind (issue 19)",
    "alions_16_in_flight_msgs_per_sec": ROCKETMQ_SENDS["alions"],
    "cpp_1_thread_msgs_per_sec": ROCKETMQ_SENDS["cpp"],
    "pull_drain_msgs_per_sec": ROCKETMQ_DRAIN,
    "broker_cpu_percent_of_one_core": ROCKETMQ_CPU,
    "broker_private_mb": ROCKETMQ_PRIVATE_MB,
}
"""RocketMQ's figures (constants: not measured by this script)."""

CLIENTS = {
    "alions": "ali-ons 3.12.0, 16 sends in flight",
    "cpp": "C++ client (PyPI rocketmq 0.4.4), 1 thread",
}


# --- the broker process ----------------------------------------------------------------------


def cpu_times(pid: int) -> tuple[float, float]:
    """utime and stime of a process apart, in seconds (``/proc/<pid>/stat`` fields 14 and
    15): its own code (Python's) and the kernel's work for it (system calls, wake-ups)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) "
    return int(fields[11]) / TICKS, int(fields[12]) / TICKS


def runqueue_wait(pid: int) -> float:
    """Seconds the process's threads waited for a CPU while runnable (``schedstat``)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue  # a thread that ended
    return total / 1e9


def private_bytes(pid: int) -> int:
    """Private_Clean + Private_Dirty of ``/proc/<pid>/smaps_rollup``, in bytes."""
    return memory_bytes(pid)[0]


def memory_bytes(pid: int) -> tuple[int, int]:
    """``/proc/<pid>/smaps_rollup``'s private bytes and, of them, the anonymous ones.

    The rest of the private bytes are pages of mapped files (the commit log's written pages,
    the interpreter's and extensions' own): they stay in the page cache whether or not the
    process maps them.
    """
    private = anonymous = 0
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in {"Private_Clean", "Private_Dirty"}:
            private += int(rest.split()[0]) * 1024
        elif name == "Anonymous":
            anonymous = int(rest.split()[0]) * 1024
    return private, anonymous


class Phase:
    """Measures the broker (and this process) over a phase: CPU, largest private memory.
    ``who`` names the measured process in the figures (``broker``, ``responder``)."""

    def __init__(self, pid: int, who: str = "broker") -> None:
        self.pid = pid
        self.who = who
        self.peak = self.peak_anonymous = 0

    async def sample(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            self._sample()
            await trio.sleep(0.25)

    def _sample(self) -> None:
        private, anonymous = memory_bytes(self.pid)
        self.peak = max(self.peak, private)
        self.peak_anonymous = max(self.peak_anonymous, anonymous)

    def __enter__(self) -> Phase:
        self.started = time.perf_counter()
        self.user, self.system = cpu_times(self.pid)
        self.wait = runqueue_wait(self.pid)
        self.own = _own_cpu()
        self.peak = self.peak_anonymous = 0
        self._sample()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.started
        self._sample()
        user, system = cpu_times(self.pid)
        self.user, self.system = user - self.user, system - self.system
        self.broker_cpu = (self.user + self.system) / self.seconds * 100
        self.broker_wait = (runqueue_wait(self.pid) - self.wait) / self.seconds * 100
        self.own_cpu = (_own_cpu() - self.own) / self.seconds * 100
        self.load = os.getloadavg()

    def figures(self, messages: int | None = None) -> dict[str, Any]:
        """The phase's figures; with ``messages``, the broker's CPU time per message too, and
        of it the user time (Python's work) and the system time (the kernel's) apart."""
        per_message = user = system = None
        if messages:
            per_message = round(self.broker_cpu / 100 * self.seconds / messages * 1e6, 1)
            user = round(self.user / messages * 1e6, 1)
            system = round(self.system / messages * 1e6, 1)
        who = self.who
        return {
            f"{who}_cpu_percent": round(self.broker_cpu, 1),
            f"{who}_cpu_us_per_msg": per_message,
            f"{who}_user_us_per_msg": user,
            f"{who}_system_us_per_msg": system,
            f"{who}_runqueue_wait_percent": round(self.broker_wait, 1),
            f"{who}_private_mb": round(self.peak / 2**20, 1),
            f"{who}_private_anonymous_mb": round(self.peak_anonymous / 2**20, 1),
            "bench_process_cpu_percent": round(self.own_cpu, 1),
            "loadavg": [round(x, 2) for x in self.load],
        }


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _write_topic(store: Path, queues: int) -> None:
    wrapper = TopicConfigSerializeWrapper(
        {TOPIC: TopicConfig(TOPIC, queues, queues)}, DataVersion(int(time.time() * 1000), 1)
    )
    (store / "config").mkdir(parents=True, exist_ok=True)
    (store / "config" / "topics.json").write_text(json.dumps(wrapper.to_json()))


# --- the clients ------------------------------------------------------------------------------


def send_command(client: str, namesrv: str, seconds: float) -> list[str]:
    """The driver's bench command: bodies ``<prefix>-<i>`` of about ``SIZE`` bytes."""
    if client == "alions":
        return _alions.bench_command(namesrv, TOPIC, seconds, 16, SIZE, f"bench-{client}")
    prefix = "x" * (SIZE - 8)  # "-<i>" adds 2..8 bytes
    common = cli_flags(namesrv=namesrv, topic=TOPIC, seconds=seconds)
    common += cli_flags(prefix=prefix, group=f"bench-{client}")
    cpp = cli_flags(home=cpp_home(), in_flight=1)
    return [sys.executable, str(CPP_DRIVER), "bench", *common, *cpp]


def unavailable(client: str) -> str | None:
    if client == "alions":
        return _alions.unavailable()
    return cpp_client_unavailable_reason()


BUSY_LOOP = "while True: pass  # bench/clients.py --busy-cpus"
"""What each of ``--busy-cpus``'s processes runs (with ``nice -n 19``: the lowest priority)."""

_busy_cpus = False  # --busy-cpus (set once by main)


async def run_sends(cmd: list[str], seconds: float) -> dict[str, Any]:
    """Run a driver's bench command; its bench line. With ``--busy-cpus``, one busy loop a
    CPU at the lowest priority (nice 19) runs beside it."""
    if not _busy_cpus:
        return await _alions.run_bench(cmd)  # either driver prints the same bench line
    loops = []
    try:
        for _ in range(os.cpu_count() or 1):
            command = ["nice", "-n", "19", sys.executable, "-c", BUSY_LOOP]
            loops.append(await trio.lowlevel.open_process(command))
        return await _alions.run_bench(cmd)
    finally:
        for loop in loops:
            loop.kill()
        with trio.CancelScope(shield=True):
            for loop in loops:
                await loop.wait()


def send_figures(sent: dict[str, Any]) -> dict[str, Any]:
    """A driver's bench line as the figures of a send phase."""
    return {
        "msgs_per_sec": sent.get("msgsPerSec"),
        "sent": sent.get("sent"),
        "failed": sent.get("failed"),
        "p50_ms": sent.get("p50Ms"),
        "p99_ms": sent.get("p99Ms"),
        "in_flight": sent.get("inFlight"),
        "seconds": sent.get("elapsedS"),
    }


async def drain(address: tuple[str, int], queues: int) -> dict[str, Any]:
    """Pulls every message of the topic's queues; msgs/s and each pull's latency."""
    latencies: list[float] = []
    counts = [0]
    async with BrokerClient.connect(*address) as client:
        ends = [await client.max_offset(TOPIC, q) for q in range(queues)]
        started = time.perf_counter()
        cpu = _own_cpu()

        async def queue(queue_id: int) -> None:
            offset = 0
            while offset < ends[queue_id]:
                t0 = time.perf_counter()
                result = await client.pull(TOPIC, queue_id, offset, PULL_BATCH)
                latencies.append(time.perf_counter() - t0)
                if not result.messages:
                    raise RuntimeError(f"queue {queue_id}: {result.status} at {offset}")
                counts[0] += len(result.messages)
                offset = result.next_offset

        async with trio.open_nursery() as nursery:
            for q in range(queues):
                nursery.start_soon(queue, q)
        seconds = time.perf_counter() - started
        cpu = _own_cpu() - cpu
    latencies.sort()
    n = len(latencies)
    return {
        "messages": counts[0],
        "expected": sum(ends),
        "msgs_per_sec": round(counts[0] / seconds, 1),
        "client_cpu_us_per_msg": round(cpu / counts[0] * 1e6, 2) if counts[0] else None,
        "pulls": n,
        "pull_p50_ms": round(latencies[n // 2] * 1e3, 3) if n else None,
        "pull_p99_ms": round(latencies[min(n - 1, int(n * 0.99))] * 1e3, 3) if n else None,
        "seconds": round(seconds, 3),
    }


async def drain_in(tree: Path | None, address: tuple[str, int], queues: int) -> dict[str, Any]:
    """:func:`drain` in a child process whose hanet is ``tree``'s (None: this tree's), so
    that ``--ab`` compares the client's decoding of the answers too."""
    cwd = tree or SCRIPT.parents[1]
    command = [sys.executable, str(SCRIPT), "--drain-child"]
    command += [f"{address[0]}:{address[1]}", "--queues", str(queues)]
    env = dict(os.environ, PYTHONPATH=str(cwd))
    done = await trio.run_process(command, capture_stdout=True, cwd=cwd, env=env)
    result: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return result


def _pull_frame(queue_id: int, offset: int, opaque: int) -> bytes:
    group = "bench-raw-drain"
    command = pull_message_request(group, TOPIC, queue_id, offset, PULL_BATCH, opaque=opaque)
    return encode_command(command)


_FRAME_HEAD = struct.Struct(">II")
_RECORD_SIZE = struct.Struct(">i")


async def raw_drain(address: tuple[str, int], queues: int) -> dict[str, Any]:
    """Pulls every message of the topic's queues as the Python client does (32 a pull, one
    pull in flight per queue, one connection), but without decoding them: each answer's
    JSON header is read and its records counted by their size fields. The client's cost is
    a small part of the broker's, so this drain measures the broker."""
    async with BrokerClient.connect(*address) as client:
        ends = [await client.max_offset(TOPIC, q) for q in range(queues)]
    stream = await trio.open_tcp_stream(*address)
    latencies: list[float] = []
    sent_at: dict[int, float] = {}
    offsets = [0] * queues
    count = 0
    opaque = 0
    buffer = bytearray()
    started = time.perf_counter()
    async with stream:

        async def pull(queue_id: int) -> None:
            nonlocal opaque
            opaque += 1
            sent_at[opaque] = time.perf_counter()
            owner[opaque] = queue_id
            await stream.send_all(_pull_frame(queue_id, offsets[queue_id], opaque))

        owner: dict[int, int] = {}
        for q in range(queues):
            if ends[q]:
                await pull(q)
        while sent_at:
            data = await stream.receive_some(1 << 20)
            if not data:
                raise RuntimeError("the broker closed the drain's connection")
            buffer += data
            start = 0  # the frames of this read are cut at offsets, the buffer once after them
            next_pulls: list[int] = []
            while len(buffer) - start >= 8:
                length, mark = _FRAME_HEAD.unpack_from(buffer, start)
                if len(buffer) - start < 4 + length:
                    break
                header_len = mark & 0xFFFFFF
                header = json.loads(bytes(buffer[start + 8 : start + 8 + header_len]))
                end = start + 4 + length
                ident = header["opaque"]
                latencies.append(time.perf_counter() - sent_at.pop(ident))
                queue_id = owner.pop(ident)
                if header["code"] != 0:
                    raise RuntimeError(f"queue {queue_id}: pull answered {header}")
                pos = start + 8 + header_len
                while pos < end:  # each record starts with its total size
                    (size,) = _RECORD_SIZE.unpack_from(buffer, pos)
                    pos += size
                    count += 1
                offsets[queue_id] = int(header["extFields"]["nextBeginOffset"])
                start = end
                if offsets[queue_id] < ends[queue_id]:
                    next_pulls.append(queue_id)
            del buffer[:start]
            for queue_id in next_pulls:
                await pull(queue_id)
    seconds = time.perf_counter() - started
    latencies.sort()
    n = len(latencies)
    return {
        "messages": count,
        "expected": sum(ends),
        "msgs_per_sec": round(count / seconds, 1),
        "pulls": n,
        "pull_p50_ms": round(latencies[n // 2] * 1e3, 3) if n else None,
        "pull_p99_ms": round(latencies[min(n - 1, int(n * 0.99))] * 1e3, 3) if n else None,
        "seconds": round(seconds, 3),
    }


async def one_client(
    client: str, args: argparse.Namespace, root: Path, tree: Path | None = None
) -> dict[str, Any]:
    directory = root / f"{client}-{'B' if tree else 'A'}"
    directory.mkdir()
    _write_topic(directory / "master", args.queues)
    processes = HanetProcesses(directory, close_signal=signal.SIGTERM)
    try:
        quiet = ("--log-level", "WARNING")
        namesrv = await processes.start("namesrv", *quiet, "namesrv", "--listen", "127.0.0.1:0")
        ns_ready = namesrv.ready
        flags = cli_flags(store=directory / "master", listen="127.0.0.1:0", ha_listen="127.0.0.1:0")
        flags += cli_flags(
            role="ASYNC_MASTER", flush="ASYNC_FLUSH", mapped_file_size=args.file_size
        )
        flags += cli_flags(namesrv=ns_ready["namesrv"])
        # ``python -m`` puts its working directory first on sys.path: --ab runs in the tree.
        env = None if tree is None else dict(os.environ, PYTHONPATH=str(tree))
        master = await processes.start("master", *quiet, "master", *flags, env=env, cwd=tree)
        ready = master.ready
        pid = int(ready["pid"])
        broker = master.address()
        idle_private = private_bytes(pid)
        async with BrokerClient.connect(*broker) as warm:
            t0 = time.perf_counter()  # the first put creates the first commit log file
            reply = await warm.put(WARMUP_TOPIC, b"w" * SIZE)
            first_put = time.perf_counter() - t0
            if not reply.ok:
                sys.exit(f"the warm-up put answered {reply.status.value}")
        warm_private = private_bytes(pid)
        await trio.sleep(0.5)  # the registration reaches the name server
        cmd = send_command(client, ns_ready["namesrv"], args.seconds)
        profile = None
        async with trio.open_nursery() as nursery:
            with Phase(pid) as sending:
                await nursery.start(sending.sample)
                async with trio.open_nursery() as spy:
                    if args.profile:
                        profile = args.profile / f"broker-{client}.txt"
                        spy.start_soon(py_spy, pid, profile, args.seconds)
                    sent = await run_sends(cmd, args.seconds)
            nursery.cancel_scope.cancel()
        async with trio.open_nursery() as nursery:
            with Phase(pid) as draining:
                await nursery.start(draining.sample)
                drained = await drain_in(tree, broker, args.queues)
            nursery.cancel_scope.cancel()
        async with trio.open_nursery() as nursery:
            with Phase(pid) as raw_draining:
                await nursery.start(raw_draining.sample)
                raw_drained = await raw_drain(broker, args.queues)
            nursery.cancel_scope.cancel()
    finally:
        processes.close()
    return {
        "client": client,
        "what": CLIENTS[client],
        "send": {**send_figures(sent), **sending.figures(sent.get("sent"))},
        "tree": str(tree) if tree else "this tree",
        "drain": {
            "how": "hanet BrokerClient.pull, 32 a pull (the tree's client, a child process)",
            **drained,
            **draining.figures(drained["messages"]),
        },
        "raw_drain": {
            "how": "PULL_MESSAGE frames, 32 a pull, records counted not decoded",
            **raw_drained,
            **raw_draining.figures(raw_drained["messages"]),
        },
        "warmup": {
            "first_put_seconds": round(first_put, 3),
            "broker_private_mb_idle": round(idle_private / 2**20, 1),
            "broker_private_mb_after_first_put": round(warm_private / 2**20, 1),
        },
        "profile": None if profile is None else top_of_profile(profile),
    }


# --- the floor: the C++ client's sends against responders that store nothing --------------------

FLOOR_LABELS = {name: name if name == "hanet" else f"bare {name}" for name in _floor.RESPONDERS}
"""Each responder's name in the output: the bare trio and epoll servers, hanet's framework."""
FLOOR_RESPONDERS = {
    name: f"{label} responder, C++ 1 thread" for name, label in FLOOR_LABELS.items()
}
_SEND_FIGURES = ("msgs_per_sec", "p50_ms", "p99_ms")
_CPU_FIGURES = ("cpu_us_per_msg", "user_us_per_msg", "system_us_per_msg")


async def _line(stream: trio.abc.ReceiveStream, pending: bytearray) -> dict[str, Any]:
    """The next JSON line of ``stream`` (what follows it stays in ``pending``)."""
    while b"\n" not in pending:
        data = await stream.receive_some()
        if not data:
            raise RuntimeError(f"the responder ended its output early: {bytes(pending)!r}")
        pending += data
    line, _, rest = bytes(pending).partition(b"\n")
    pending[:] = rest
    result: dict[str, Any] = json.loads(line)
    return result


async def floor_run(responder: str, seconds: float) -> dict[str, Any]:
    """The C++ client's send phase (the same command as against hanet) against a responder
    of ``bench/_floor.py`` in a child process, acting as its name server and broker;
    the responder's CPU and memory measured as the broker's are."""
    process = await trio.lowlevel.open_process(
        [sys.executable, str(FLOOR_SCRIPT), responder],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=SCRIPT.parents[1],
    )
    assert process.stdin is not None and process.stdout is not None
    pending = bytearray()
    try:
        with trio.fail_after(30):
            ready = await _line(process.stdout, pending)
        cmd = send_command("cpp", ready["address"], seconds)
        async with trio.open_nursery() as nursery:
            with Phase(process.pid, "responder") as sending:
                await nursery.start(sending.sample)
                sent = await run_sends(cmd, seconds)
            nursery.cancel_scope.cancel()
        await process.stdin.aclose()  # the responder's signal to stop
        with trio.fail_after(30):
            answered = await _line(process.stdout, pending)
            await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    return {
        "responder": responder,
        "what": FLOOR_RESPONDERS[responder],
        **send_figures(sent),
        "answered_sends": answered["answered_sends"],
        "connections": answered["connections"],
        **sending.figures(sent.get("sent")),
    }


async def floor_round(
    round_number: int, seconds: float, runs: list[dict[str, Any]]
) -> dict[str, Any]:
    """Every responder, their order reversed every other round; next to them, the C++ send figures
    of this tree's broker in the same round (when it ran)."""
    order = list(FLOOR_RESPONDERS) if round_number % 2 else list(FLOOR_RESPONDERS)[::-1]
    figures = {name: await floor_run(name, seconds) for name in order}
    entry: dict[str, Any] = {"round": round_number}
    entry.update({name: figures[name] for name in FLOOR_RESPONDERS})
    broker = next(
        (
            run["send"]
            for run in runs
            if run["round"] == round_number
            and run["client"] == "cpp"
            and run["tree"] == "this tree"
        ),
        None,
    )
    if broker is not None:
        entry["broker"] = {name: broker[name] for name in _SEND_FIGURES} | {
            f"broker_{name}": broker[f"broker_{name}"] for name in _CPU_FIGURES
        }
        entry["broker_over_floor"] = {
            name: {
                "msgs_per_sec": _ratio(broker["msgs_per_sec"], figures[name]["msgs_per_sec"]),
                "cpu_us_per_msg": _ratio(
                    broker["broker_cpu_us_per_msg"], figures[name]["responder_cpu_us_per_msg"]
                ),
            }
            for name in FLOOR_RESPONDERS
        }
    return entry


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a is not None and b else None


def _print_floor(entry: dict[str, Any]) -> None:
    """One line a round: each responder's figures, then the broker's beside them."""

    def figures(f: dict[str, Any], who: str) -> str:
        return (
            f"{f['msgs_per_sec']} msgs/s (p50 {f['p50_ms']} ms, p99 {f['p99_ms']} ms), "
            f"{f[f'{who}_cpu_us_per_msg']} us a send ({f[f'{who}_user_us_per_msg']} user, "
            f"{f[f'{who}_system_us_per_msg']} sys)"
        )

    parts = [f"{FLOOR_LABELS[name]} {figures(entry[name], 'responder')}" for name in FLOOR_LABELS]
    if "broker" in entry:
        parts.append(f"broker {figures(entry['broker'], 'broker')}")
    load = entry[next(iter(FLOOR_RESPONDERS))]["loadavg"][0]
    print(f"round {entry['round']} floor: {'; '.join(parts)}; load {load}", flush=True)


async def py_spy(pid: int, out: Path, seconds: float) -> None:
    """``py-spy record`` of the broker for the send phase (collapsed stacks in ``out``)."""
    record = ["-p", str(pid), "-o", str(out), "--format", "raw", "--nonblocking"]
    record += cli_flags(duration=max(1, int(seconds)))
    await trio.run_process(
        ["py-spy", "record", *record], capture_stdout=True, capture_stderr=True, check=False
    )


def top_of_profile(path: Path, count: int = 15) -> dict[str, Any]:
    """The functions with the most samples in a collapsed-stack file: on top (self) and
    anywhere on the stack (total), in % of the samples."""
    own: dict[str, int] = {}
    total: dict[str, int] = {}
    samples = 0
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return {"error": f"no profile written to {path}"}
    for line in lines:
        stack, _, number = line.rpartition(" ")
        if not stack or not number.isdigit():
            continue
        n = int(number)
        samples += n
        frames = [
            f.split(" (")[0] + " (" + f.split(" (")[1].split(":")[0].rsplit("/", 1)[-1] + ")"
            if " (" in f
            else f
            for f in stack.split(";")
        ]
        own[frames[-1]] = own.get(frames[-1], 0) + n
        for frame in set(frames):
            total[frame] = total.get(frame, 0) + n

    def top(table: dict[str, int]) -> list[tuple[str, float]]:
        ranked = sorted(table.items(), key=lambda item: -item[1])[:count]
        return [(name, round(100 * n / max(samples, 1), 1)) for name, n in ranked]

    return {"file": str(path), "samples": samples, "self": top(own), "total": top(total)}


def _table(runs: list[dict[str, Any]], floors: list[dict[str, Any]]) -> None:
    """Every run's phases (then the floor's, per round): the server's CPU is the broker's, or
    the floor responder's; ``us/msg`` its CPU a message, ``user`` and ``sys`` that split."""
    print()
    print(
        f"{'run':<48}{'msgs/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'server CPU':>12}"
        f"{'us/msg':>8}{'user':>7}{'sys':>7}{'private MB':>12}{'of it anon':>12}{'load 1m':>9}"
    )

    def row(name: str, f: dict[str, Any], who: str) -> None:
        p50 = f.get("p50_ms", f.get("pull_p50_ms"))
        p99 = f.get("p99_ms", f.get("pull_p99_ms"))
        print(
            f"{name:<48}{f['msgs_per_sec'] or 0:>9,.0f}{p50 or 0:>9.2f}{p99 or 0:>9.2f}"
            f"{f[f'{who}_cpu_percent']:>11.1f}%{f[f'{who}_cpu_us_per_msg'] or 0:>8.1f}"
            f"{f[f'{who}_user_us_per_msg'] or 0:>7.1f}{f[f'{who}_system_us_per_msg'] or 0:>7.1f}"
            f"{f[f'{who}_private_mb']:>12.1f}{f[f'{who}_private_anonymous_mb']:>12.1f}"
            f"{f['loadavg'][0]:>9.2f}"
        )

    for run in runs:
        tag = f"[{run.get('round', 1)}{'B' if run['tree'] != 'this tree' else 'A'}] "
        for phase in ("send", "drain", "raw_drain"):
            name = tag + (run["what"] if phase == "send" else f"  {phase.replace('_', ' ')}")
            row(name, run[phase], "broker")
    for entry in floors:
        for responder in FLOOR_RESPONDERS:
            figures = entry[responder]
            row(f"[{entry['round']}] floor: {figures['what']}", figures, "responder")
    (a_low, a_high), (c_low, c_high) = ROCKETMQ_SENDS["alions"], ROCKETMQ_SENDS["cpp"]
    print(
        f"RocketMQ 4.9.8 (measured elsewhere, issue 19): ali-ons 16 in flight {a_low:,}-"
        f"{a_high:,} msgs/s, C++ 1 thread {c_low:,}-{c_high:,} msgs/s, pull drain "
        f"~{ROCKETMQ_DRAIN:,} msgs/s, broker {ROCKETMQ_CPU[0]}-{ROCKETMQ_CPU[1]} % of a core, "
        f"~{ROCKETMQ_PRIVATE_MB} MB private"
    )


_COMPARED = {
    "send_msgs_per_sec": ("send", "msgs_per_sec"),
    "send_broker_us_per_msg": ("send", "broker_cpu_us_per_msg"),
    "send_broker_user_us_per_msg": ("send", "broker_user_us_per_msg"),
    "send_broker_system_us_per_msg": ("send", "broker_system_us_per_msg"),
    "drain_msgs_per_sec": ("drain", "msgs_per_sec"),
    "drain_client_us_per_msg": ("drain", "client_cpu_us_per_msg"),
    "drain_broker_us_per_msg": ("drain", "broker_cpu_us_per_msg"),
    "raw_drain_msgs_per_sec": ("raw_drain", "msgs_per_sec"),
    "raw_drain_broker_us_per_msg": ("raw_drain", "broker_cpu_us_per_msg"),
}


def _compare(runs: list[dict[str, Any]], floors: list[dict[str, Any]]) -> dict[str, Any]:
    """Per client and tree (and per floor responder): each figure of every round, its median
    and range."""
    out: dict[str, Any] = {}
    for run in runs:
        key = f"{run['client']} {'B' if run['tree'] != 'this tree' else 'A'}"
        row = out.setdefault(key, {name: [] for name in _COMPARED})
        for name, (phase, figure) in _COMPARED.items():
            row[name].append(run[phase][figure])
    for entry in floors:
        for responder in FLOOR_RESPONDERS:
            figures = entry[responder]
            names = {f"send_{name}": name for name in _SEND_FIGURES}
            names |= {f"send_responder_{name}": f"responder_{name}" for name in _CPU_FIGURES}
            row = out.setdefault(f"floor {responder}", {name: [] for name in names})
            for name, figure in names.items():
                row[name].append(figures[figure])
    for key, row in out.items():
        for name, rounds in row.items():
            values = [v for v in rounds if v is not None]
            row[name] = {
                "rounds": values,
                "median": statistics.median(values) if values else None,
                "range": [min(values), max(values)] if values else None,
            }
        out[key] = row
    return out


def _figure(value: float) -> str:
    """A median or bound: milliseconds under 10 to the microsecond, the rest to a tenth."""
    return f"{value:.3f}" if abs(value) < 10 else f"{value:,.1f}"


async def main(args: argparse.Namespace) -> None:
    global _busy_cpus
    _busy_cpus = args.busy_cpus
    runs: list[dict[str, Any]] = []
    floors: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    trees: list[Path | None] = [None] if args.ab is None else [None, args.ab]
    with tempfile.TemporaryDirectory(prefix="hanet-bench-clients-") as tmp:
        for r in range(args.rounds):
            for client in args.clients.split(","):
                if client not in CLIENTS:
                    sys.exit(f"unknown client {client!r}: want {', '.join(CLIENTS)}")
                if client in skipped:
                    continue
                reason = unavailable(client)
                if reason is not None:
                    print(f"{client}: skipped ({reason})", flush=True)
                    skipped[client] = reason
                    continue
                for tree in trees if r % 2 == 0 else trees[::-1]:  # A/B order alternates
                    root = Path(tmp) / f"round-{r + 1}"
                    root.mkdir(exist_ok=True)
                    run = await one_client(client, args, root, tree)
                    run["round"] = r + 1
                    s, d, w = run["send"], run["drain"], run["raw_drain"]
                    label = f"round {r + 1} {'B' if tree else 'A'} {CLIENTS[client]}"
                    print(
                        f"{label}: {s['msgs_per_sec']} msgs/s (p50 {s['p50_ms']} ms, p99 "
                        f"{s['p99_ms']} ms), broker {s['broker_cpu_percent']} % CPU "
                        f"{s['broker_cpu_us_per_msg']} us/msg, {s['broker_private_mb']} MB "
                        f"private; drain {d['msgs_per_sec']} msgs/s (client "
                        f"{d['client_cpu_us_per_msg']} us/msg, broker "
                        f"{d['broker_cpu_us_per_msg']} us/msg); raw drain "
                        f"{w['msgs_per_sec']} msgs/s, broker {w['broker_cpu_us_per_msg']} "
                        f"us/msg; load {s['loadavg'][0]}",
                        flush=True,
                    )
                    runs.append(run)
            if args.floor and "floor" not in skipped:
                reason = unavailable("cpp")
                if reason is None:
                    entry = await floor_round(r + 1, args.seconds, runs)
                    _print_floor(entry)
                    floors.append(entry)
                else:
                    print(f"floor: skipped ({reason})", flush=True)
                    skipped["floor"] = reason
    _table(runs, floors)
    compared = _compare(runs, floors)
    if args.ab is not None or args.rounds > 1 or floors:
        print()
        for key, row in compared.items():
            figures = ", ".join(
                f"{name} {_figure(v['median'])} ({_figure(v['range'][0])}-{_figure(v['range'][1])})"
                for name, v in row.items()
                if v["median"] is not None
            )
            print(f"{key} (median, range over {args.rounds} rounds): {figures}")
    goals: dict[str, bool] = {}
    for run in runs:
        if run["tree"] != "this tree":
            continue
        client, send, drained = run["client"], run["send"], run["raw_drain"]
        goals[f"{client}_sends_at_least_rocketmq"] = (send["msgs_per_sec"] or 0) >= ROCKETMQ_SENDS[
            client
        ][0]
        goals[f"{client}_drain_at_least_2x"] = drained["msgs_per_sec"] >= 2 * ROCKETMQ_DRAIN
        goals[f"{client}_private_memory_no_higher"] = (
            max(send["broker_private_mb"], drained["broker_private_mb"]) <= ROCKETMQ_PRIVATE_MB
        )
        goals[f"{client}_private_anonymous_memory_no_higher"] = (
            max(send["broker_private_anonymous_mb"], drained["broker_private_anonymous_mb"])
            <= ROCKETMQ_PRIVATE_MB
        )
    print(
        json.dumps(
            {
                "bench": "clients",
                "seconds": args.seconds,
                "size": SIZE,
                "queues": args.queues,
                "file_size": args.file_size,
                "cpus": os.cpu_count(),
                "rounds": args.rounds,
                "ab": str(args.ab) if args.ab else None,
                "busy_cpus": args.busy_cpus,
                "runs": runs,
                "compared": compared,
                "floor": floors if args.floor else None,
                "skipped": skipped,
                "rocketmq_4_9_8": ROCKETMQ_4_9_8,
                "goals": goals,
            }
        )
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds of sends (20)")
    parser.add_argument(
        "--clients", default="alions,cpp", help="comma-separated: alions, cpp (both)"
    )
    parser.add_argument("--queues", type=int, default=8, help="the topic's queues (8)")
    parser.add_argument(
        "--file-size", default=FILE_SIZE, help=f"commit log file size ({FILE_SIZE}, K/M/G)"
    )
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="record the broker with py-spy during each send phase into DIR (py-spy on PATH)",
    )
    parser.add_argument("--rounds", type=int, default=1, help="rounds of every run (1)")
    parser.add_argument(
        "--floor",
        action="store_true",
        help="in every round, also run the C++ client's sends against responders that store "
        "nothing (a bare trio server, an epoll loop, and hanet's pipeline and codec; name "
        "server and broker in one)",
    )
    parser.add_argument(
        "--busy-cpus",
        action="store_true",
        help="during every send phase, keep each CPU from idling with a busy loop at nice 19 "
        "(the row's figures depend on whether the CPUs idle between round trips)",
    )
    parser.add_argument(
        "--ab",
        type=Path,
        default=None,
        metavar="DIR",
        help="also run the hanet source tree in DIR (e.g. a worktree of an older commit with "
        "its built extensions), interleaved with this tree's in every round",
    )
    parser.add_argument("--drain-child", metavar="HOST:PORT", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.drain_child:
        host, _, port = arguments.drain_child.rpartition(":")
        print(json.dumps(trio.run(drain, (host, int(port)), arguments.queues)))
        sys.exit(0)
    if arguments.ab is not None:
        arguments.ab = arguments.ab.resolve()
    trio.run(main, arguments)
