"""Lone sends over loopback TCP: the broker's CPU per send with one send in flight.

Run: ``.venv/bin/python bench/lone_send.py [--count N] [--rounds R] [--cpu N] [--ab DIR]
[--gap US] [--floor] [--trace] [--split] [--profile]``

The C++ client (PyPI ``rocketmq``, one thread) waits for each answer before its next send, so
every send is a read of one frame, its put and one answer written: the broker's whole
per-read path (trio's wake-up, the socket read, the frame decoder, the codec, dispatch, the
put, the answer's encoding and write) for a single message, with the caches cold between
requests. This bench measures that path without the client's own cost: a broker
(ASYNC_MASTER, ASYNC_FLUSH, 256 MiB commit log files) runs in a child process on 127.0.0.1,
and a grandchild process sends ``--count`` SEND_MESSAGE requests of 1 KiB, each the C++
client's frame (tests/fixtures/remoting/clients/cpp.hex: its JSON header, CPP language, string
ext fields, trailing newline) with its own opaque, one at a time, reading each answer before
the next. The figure is the broker process's CPU (utime + stime from ``/proc``) over the timed
sends, per send (and its threads' run time from ``schedstat``, the scheduler's own clock:
"ran"), and the client's round trip (median). ``--cpu N`` pins both processes to CPU
``N`` (the client then runs while the broker waits and back, as on a busy machine; unpinned,
the figure moves with where the scheduler puts the two: 80-120 us a send here, each process
paying for its core's wake-ups); on a loaded machine the round trip moves much more than the
CPU figure.

``--trace`` counts, per timed send, the broker's scheduler passes (trio's I/O waits), the
task steps of each of its tasks (by task name: which tasks a lone send wakes), the cyclic
garbage collector's runs and time, and, with
``strace`` on the PATH, its system calls by name (``strace -f -c`` attached over the timed
sends; it slows the broker, so the round's times are not comparable, its counts are).

``--split`` also times the broker's pipeline per read over TCP (the handlers' part: from the
reader's ``fire_channel_read`` to the end of its ``fire_channel_read_complete``, the answer's
write excluded; thread CPU time, two clock reads a send more): against the in-process figure
(the same handlers with warm caches) it shows what the socket path's cold caches cost them,
and against the whole figure what trio, the reader and the socket calls cost.

``--profile`` counts the broker's Python calls per send instead (``sys.setprofile`` over the
timed sends: Python functions and C functions called from Python) and prints the most called.

``--floor`` also runs, in every round, a bare trio server in place of the broker: it answers
each frame with a short success answer (trio's wait, one ``readv``, one ``writev``), so its
figures are what the machine, trio and this client cost with no broker code at all; and a bare
``epoll`` loop doing the same without trio (the socket registered once, where trio re-arms its
one-shot registration with an ``epoll_ctl`` every wait): what trio's pass costs.

``--gap US`` makes the client stay busy (spinning) for ``US`` microseconds between an answer and
its next send, as a client with work of its own does (the C++ client through its Python driver
spends ~200 us of CPU a send here): the broker's figures then move towards those
``bench/clients.py`` shows for that client, though the frames and the broker's work are the
same; what it has cached decays while it waits.

``--critical`` records, over the timed sends, the system calls on a send's path in both
processes with the kernel's own timestamps (``perf record`` of the ``raw_syscalls``
tracepoints, on the monotonic clock; no ptrace stop, ~1-2 us a traced call) and splits each
round trip (medians per send, in us): the client's ``sendto`` to the broker's ``epoll_wait``
returning (the wake-up in), that return to its ``readv``, the ``readv``, from the ``readv``'s
return to the answer's ``writev`` (the broker's critical path in Python), the ``writev`` to
the client's ``recvfrom`` returning (the wake-up out); and off the path: from the ``writev``'s
return to the broker's next ``epoll_wait`` (its work after the answer, which overlaps the
client's own) and the client's time from its answer to its next send. The broker's phases
are also given on a CPU (``perf --switch-events``: the time it was switched out taken away;
under load the scheduler may run the client or another process in the middle of a phase,
which its wall time counts). ``--critical-pid PID
--seconds S`` does the broker's side alone for any broker process (e.g. the ``hanet master`` of
a ``bench/clients.py --clients cpp`` run): per ``readv`` of its main thread, the same broker
figures and the time it waited for the next request. Needs ``perf`` and the tracepoints.

``--ab DIR`` also runs the hanet source tree in ``DIR`` (a worktree of another commit with its
built extensions) in every round, the two alternating; each figure's median and range per tree.

A table for humans, then the last line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import atexit
import collections
import gc
import json
import os
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "remoting" / "clients" / "cpp.hex"
SIZE = 1024
WARM = 300


def _template() -> tuple[bytes, bytes]:
    """The C++ client's SEND_MESSAGE header, split around its opaque's value."""
    for line in FIXTURE.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        frame = bytes.fromhex(line.strip())
        header_length = int.from_bytes(frame[4:8], "big")
        header = frame[8 : 8 + header_length]
        if b'"code":10,' in header:
            before, _, rest = header.partition(b'"opaque":')
            _, _, after = rest.partition(b",")
            return before + b'"opaque":', b"," + after
    raise SystemExit(f"no SEND_MESSAGE in {FIXTURE}")


def _frames(count: int) -> list[bytes]:
    before, after = _template()
    body = b"m" * SIZE
    frames = []
    for i in range(count):
        header = before + str(i + 1).encode() + after
        head = (4 + len(header) + len(body)).to_bytes(4, "big") + len(header).to_bytes(4, "big")
        frames.append(head + header + body)
    return frames


def _cpu_ticks(pid: int) -> tuple[int, int]:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])  # utime, stime (fields 14 and 15)


def _run_ns(pid: int) -> int:
    """Nanoseconds the process's threads ran on a CPU (``schedstat``: the scheduler's own
    clock, not sampled by the tick)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, IndexError, ValueError):
            continue  # a thread that ended
    return total


def _strace(pid: int) -> tuple[subprocess.Popen[bytes], Path] | None:
    """``strace -f -c`` attached to ``pid`` (its summary to a file), or None without strace."""
    if shutil.which("strace") is None:
        return None
    fd, name = tempfile.mkstemp(prefix="hanet-bench-lone-send-strace-")
    os.close(fd)
    tracer = subprocess.Popen(
        ["strace", "-f", "-c", "-p", str(pid), "-o", name], stderr=subprocess.PIPE
    )
    assert tracer.stderr is not None
    tracer.stderr.readline()  # "Process N attached": tracing from here
    return tracer, Path(name)


def _strace_counts(tracer: subprocess.Popen[bytes], path: Path) -> dict[str, int]:
    """The calls per system call name of a stopped ``strace -c``."""
    tracer.send_signal(signal.SIGINT)
    tracer.wait(timeout=60)
    counts: dict[str, int] = {}
    for line in path.read_text().splitlines():
        fields = line.split()
        if len(fields) >= 5 and fields[0][0].isdigit() and fields[-1] != "total":
            counts[fields[-1]] = int(fields[3])
    path.unlink()
    return counts


# x86_64 system call numbers (raw_syscalls' ``id``) of the calls on a lone send's path.
_SYSCALLS = {
    19: "readv",
    20: "writev",
    44: "sendto",
    45: "recvfrom",
    46: "sendmsg",
    232: "epoll_wait",
    281: "epoll_pwait",
}
_WAITS = (232, 281)
_SWITCH = -1  # a context switch (perf's --switch-events): exit_ for out, result 1 if preempted


class _Perf:
    """``perf record`` of the ``raw_syscalls`` tracepoints (only the calls of
    :data:`_SYSCALLS`) in some processes, on the monotonic clock, started disabled and
    switched on and off through its control fifos (each command acknowledged: the window is
    exact)."""

    def __init__(self, pids: list[int]) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="hanet-bench-lone-send-perf-"))
        self.data = self.dir / "perf.data"
        ctl, ack = self.dir / "ctl", self.dir / "ack"
        os.mkfifo(ctl)
        os.mkfifo(ack)
        ids = " || ".join(f"id == {n}" for n in _SYSCALLS)
        command = ["perf", "record", "-q", "-k", "mono", "-m", "1024", "-D", "-1"]
        command.append("--switch-events")
        command += ["--control", f"fifo:{ctl},{ack}", "-o", str(self.data)]
        command += ["-p", ",".join(str(pid) for pid in pids)]
        for event in ("raw_syscalls:sys_enter", "raw_syscalls:sys_exit"):
            command += ["-e", event, "--filter", ids]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self._ctl = open(ctl, "w")  # noqa: SIM115 - kept open for the run's commands
        self._ack = open(ack)  # noqa: SIM115
        self.command("enable")

    def command(self, what: str) -> None:
        self._ctl.write(what + "\n")
        self._ctl.flush()
        if self._ack.readline().strip("\x00\n") != "ack":  # (perf ends each with a NUL)
            raise SystemExit(f"perf did not acknowledge {what!r}")

    def close(self) -> None:
        """Stop ``perf`` (if it still runs) and remove its files."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def events(self) -> list[tuple[int, float, bool, int, int]]:
        """Stop recording; its events, in time order: (thread id, seconds on the monotonic
        clock, whether an exit, system call number, the exit's result)."""
        try:
            self.command("disable")
            self._ctl.close()
            self._ack.close()
            self.process.send_signal(signal.SIGINT)
            _, err = self.process.communicate(timeout=120)
            script = subprocess.run(
                [
                    "perf",
                    "script",
                    "-i",
                    str(self.data),
                    "-F",
                    "tid,time,event,trace",
                    "--ns",
                    "--show-switch-events",
                ],
                capture_output=True,
                text=True,
                check=False,
            )
        finally:
            self.close()
        events = []
        for line in script.stdout.splitlines():
            fields = line.replace(":", " ").split()
            if len(fields) >= 4 and fields[2] == "PERF_RECORD_SWITCH":
                # tid time PERF_RECORD_SWITCH IN|OUT [preempt]
                preempted = int(fields[3] == "OUT" and "preempt" in fields[4:])
                events.append(
                    (int(fields[0]), float(fields[1]), fields[3] == "OUT", _SWITCH, preempted)
                )
                continue
            # tid time raw_syscalls sys_enter|sys_exit NR n [( args | = result)]
            if len(fields) < 6 or fields[2] != "raw_syscalls" or fields[4] != "NR":
                continue
            exit_ = fields[3] == "sys_exit"
            result = int(fields[7]) if exit_ and len(fields) > 7 else 0
            events.append((int(fields[0]), float(fields[1]), exit_, int(fields[5]), result))
        if not events:
            raise SystemExit(f"perf recorded nothing: {err.decode()[-500:]}{script.stderr[-500:]}")
        events.sort(key=lambda e: e[1])
        return events


def _critical(
    events: list[tuple[int, float, bool, int, int]], broker: int, client: int | None
) -> dict[str, Any]:
    """The phases of each request from ``perf`` events: the broker's main thread ``broker``
    (its epoll waits, the request's ``readv``, the answer's ``writev``, its switches off and
    on a CPU) and, when given, the client's thread ``client`` (its ``sendto``, its
    ``recvfrom`` returning the answer). Median and mean per request, in us, of each phase's
    wall time and, for the broker's phases, of the time it was on a CPU in them (what is
    left once the time it was switched out is taken away: under load the scheduler may run
    the client or another process in the middle of a phase), and the calls and the broker's
    involuntary switches counted per request."""
    phases: dict[str, list[float]] = collections.defaultdict(list)
    counts: collections.Counter[str] = collections.Counter()
    off = 0.0  # the broker's time switched out so far (up to its last switch in)
    out_since: float | None = None
    woke = (0.0, 0.0)  # the broker's last epoll wait that returned events (time, off then)
    sent = 0.0  # the client's last sendto
    request: dict[str, tuple[float, float]] = {}
    requests = 0

    def phase(name: str, start: str, end: str, on_cpu: bool = True) -> None:
        if start in request and end in request:
            (t0, off0), (t1, off1) = request[start], request[end]
            phases[name].append(t1 - t0)
            if on_cpu:
                phases[name + ", on a CPU"].append(t1 - t0 - (off1 - off0))

    def close() -> None:
        if not {"readv", "read", "writev", "wrote"} <= request.keys():
            return
        phase("epoll return to readv", "woke", "readv")
        phase("readv", "readv", "read", on_cpu=False)
        phase("readv to writev (critical, Python)", "read", "writev")
        phase("writev", "writev", "wrote", on_cpu=False)
        phase("writev to next epoll_wait (off the path)", "wrote", "next_wait")
        phase("broker idle in epoll_wait", "next_wait", "next_woke", on_cpu=False)
        phase("sendto to epoll return (wake-up in)", "sent", "woke", on_cpu=False)
        phase("client round trip (sendto to answer)", "sent", "answered", on_cpu=False)
        phase("writev to answer read (wake-up out)", "writev", "answered", on_cpu=False)
        phase("client between answer and next send", "answered", "next_sent", on_cpu=False)

    for tid, t, exit_, nr, result in events:
        if tid == broker:
            if nr == _SWITCH:
                if exit_:  # switched out
                    out_since = t
                    counts["involuntary switch" if result else "switch"] += 1
                elif out_since is not None:
                    off += t - out_since
                    out_since = None
                continue
            if not exit_:
                counts[_SYSCALLS.get(nr, str(nr))] += 1
            at = (t, off)
            if nr in _WAITS:
                if exit_ and result > 0:
                    woke = at
                    if "wrote" in request and "next_woke" not in request:
                        request["next_woke"] = at
                elif not exit_ and "wrote" in request and "next_wait" not in request:
                    request["next_wait"] = at
            elif nr == 19 and not exit_:
                if "readv" in request:  # a new request: the last one is done
                    close()
                    requests += 1
                    request = {}
                request["readv"] = at
                request["woke"] = woke
                if client is not None and sent:
                    request["sent"] = (sent, 0.0)
            elif nr == 19 and "readv" in request and "read" not in request:
                request["read"] = at
            elif nr in (20, 46) and not exit_ and "read" in request and "writev" not in request:
                request["writev"] = at
            elif nr in (20, 46) and exit_ and "writev" in request and "wrote" not in request:
                request["wrote"] = at
        elif tid == client and nr != _SWITCH:
            if not exit_:
                counts[_SYSCALLS.get(nr, str(nr)) + " (client)"] += 1
            if nr == 44 and not exit_:
                sent = t
                if "answered" in request:
                    request["next_sent"] = (t, 0.0)
            elif nr == 45 and exit_ and result > 0 and "writev" in request:
                request["answered"] = (t, 0.0)
    if request:
        close()
        requests += 1
    figures: dict[str, Any] = {"requests": requests}
    for name, values in phases.items():
        figures[name] = {
            "p50_us": round(statistics.median(values) * 1e6, 1),
            "mean_us": round(statistics.fmean(values) * 1e6, 1),
            "n": len(values),
        }
    figures["calls_per_request"] = {
        name: round(n / requests, 3) for name, n in sorted(counts.items()) if n
    }
    return figures


def _client(
    port: int,
    count: int,
    broker_pid: int,
    trace: bool = False,
    gap_us: float = 0.0,
    critical: bool = False,
) -> None:
    """The grandchild: lone sends (each ``gap_us`` after the last answer, the client busy
    meanwhile), one JSON line."""
    frames = _frames(WARM + count)
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buffer = bytearray(1 << 16)
    view = memoryview(buffer)
    trips: list[float] = []
    ticks0 = (0, 0)
    cpu0 = 0.0
    ran0 = 0
    tracer = None
    perf = None
    for i, frame in enumerate(frames):
        if i == WARM:
            time.sleep(0.2)  # the warm-up's answers written, the topic created
            if trace:
                os.kill(broker_pid, signal.SIGUSR1)  # the broker's counts start
                time.sleep(0.1)
                tracer = _strace(broker_pid)
            if critical:
                perf = _Perf([broker_pid, os.getpid()])
                atexit.register(perf.close)  # (a failed send exits: perf stops with it)
            ticks0, cpu0 = _cpu_ticks(broker_pid), time.process_time()
            ran0 = _run_ns(broker_pid)
        if gap_us:
            resume = time.perf_counter() + gap_us / 1e6
            while time.perf_counter() < resume:
                pass
        t0 = time.perf_counter()
        sock.sendall(frame)
        got = 0
        need = 4
        while got < need:
            n = sock.recv_into(view[got:])
            if n == 0:
                raise SystemExit("the broker closed the connection")
            got += n
            if need == 4 and got >= 4:
                need = 4 + int.from_bytes(buffer[:4], "big")
        if got != need:
            raise SystemExit("more than one answer")
        if i >= WARM:
            trips.append(time.perf_counter() - t0)
        header_length = int.from_bytes(buffer[4:8], "big") & 0xFFFFFF
        if b'"code":0' not in buffer[8 : 8 + header_length]:
            raise SystemExit(f"a send was refused: {bytes(buffer[8 : 8 + header_length])!r}")
    ticks1 = _cpu_ticks(broker_pid)
    ran = _run_ns(broker_pid) - ran0
    syscalls = _strace_counts(*tracer) if tracer is not None else {}
    phases = _critical(perf.events(), broker_pid, os.getpid()) if perf is not None else None
    if trace:
        os.kill(broker_pid, signal.SIGUSR2)  # and stop
    user, system = ticks1[0] - ticks0[0], ticks1[1] - ticks0[1]
    tick_us = 1e6 / os.sysconf("SC_CLK_TCK") / count
    client_cpu = time.process_time() - cpu0
    sock.close()
    trips.sort()
    print(
        json.dumps(
            {
                "broker_cpu_us": (user + system) * tick_us,
                "broker_ran_us": ran / count / 1e3,
                "broker_user_us": user * tick_us,
                "broker_system_us": system * tick_us,
                "client_cpu_us": client_cpu / count * 1e6,
                "trip_p50_us": trips[len(trips) // 2] * 1e6,
                "sends_per_sec": count / sum(trips),
                "syscalls_per_send": {
                    name: round(n / count, 3) for name, n in sorted(syscalls.items())
                },
                "critical": phases,
            }
        )
    )


class _Passes:
    """A trio instrument counting scheduler passes and task steps by task name, between the
    client's SIGUSR1 and SIGUSR2 (the timed sends)."""

    def __init__(self) -> None:
        self.on = False
        self.passes = 0
        self.steps: collections.Counter[str] = collections.Counter()
        self.collections = [0, 0, 0]  # the cyclic garbage collector's runs, by generation
        self.gc_seconds = 0.0
        self._gc_started = 0.0

    def before_io_wait(self, timeout: float) -> None:
        if self.on:
            self.passes += 1

    def after_io_wait(self, timeout: float) -> None:
        pass

    def before_task_step(self, task: Any) -> None:
        if self.on:
            self.steps[task.name.rsplit(".", 1)[-1]] += 1

    def on_gc(self, phase: str, info: dict[str, int]) -> None:
        if not self.on:
            return
        if phase == "start":
            self._gc_started = time.perf_counter()
        else:
            self.collections[info["generation"]] += 1
            self.gc_seconds += time.perf_counter() - self._gc_started

    def toggle(self, signum: int, frame: Any) -> None:
        self.on = signum == signal.SIGUSR1


class _Split:
    """The broker's pipeline time per read over TCP: from the reader's
    ``Pipeline.fire_channel_read`` to the end of its ``fire_channel_read_complete`` (the
    handlers: decode, put, answer encoded and flushed; not the answer's write), in the
    thread's CPU time, by wrapping the two methods in this process."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.reads = 0
        self._started = 0.0

    def install(self, pipeline_class: Any) -> None:
        read = pipeline_class.fire_channel_read
        complete = pipeline_class.fire_channel_read_complete

        def fire_channel_read(pipeline: Any, msg: Any) -> None:
            self._started = time.thread_time()
            read(pipeline, msg)

        def fire_channel_read_complete(pipeline: Any) -> None:
            complete(pipeline)
            self.seconds += time.thread_time() - self._started
            self.reads += 1

        pipeline_class.fire_channel_read = fire_channel_read
        pipeline_class.fire_channel_read_complete = fire_channel_read_complete


async def _broker(count: int, profile: bool, trace: bool = False, split: bool = False) -> None:
    """The child: a broker on 127.0.0.1 and the client as its child; the client's line."""
    import trio

    from hanet.broker import Broker  # the child's: the tree under test comes first on sys.path
    from hanet.ha import BrokerConfig

    with tempfile.TemporaryDirectory(prefix="hanet-bench-lone-send-") as tmp:
        config = BrokerConfig(
            store_path_root_dir=Path(tmp),
            listen_host="127.0.0.1",
            listen_port=0,
            ha_listen_port=0,
            mapped_file_size_commit_log=256 * 1024 * 1024,
        )
        async with trio.open_nursery() as nursery:
            broker = Broker(config)
            addresses = await nursery.start(broker.run)
            assert addresses.broker is not None
            port = addresses.broker[1]
            calls: collections.Counter[str] = collections.Counter()
            passes = _Passes()
            timing = _Split()
            if split:
                from hanet.channel import Pipeline

                timing.install(Pipeline)
            if trace:
                signal.signal(signal.SIGUSR1, passes.toggle)
                signal.signal(signal.SIGUSR2, passes.toggle)
                trio.lowlevel.add_instrument(passes)  # type: ignore[arg-type]
                gc.callbacks.append(passes.on_gc)
            if profile:

                def count_call(frame: Any, event: str, arg: Any) -> None:
                    if event == "call":
                        code = frame.f_code
                        calls[f"{Path(code.co_filename).name}:{code.co_name}"] += 1
                    elif event == "c_call":
                        calls[f"C {getattr(arg, '__qualname__', arg)}"] += 1

                sys.setprofile(count_call)
            result = await trio.run_process(
                _client_command(port, count, trace),
                capture_stdout=True,
                cwd=ROOT,
            )
            sys.setprofile(None)
            split_us = timing.seconds / max(timing.reads, 1) * 1e6
            embedded = _embedded(broker, count)
            nursery.cancel_scope.cancel()
    line = json.loads(result.stdout.decode().strip().splitlines()[-1])
    line["embedded_cpu_us"] = embedded
    if split:
        line["pipeline_us"] = split_us
    if trace:
        line["passes_per_send"] = passes.passes / count
        line["gc_per_send"] = [round(n / count, 4) for n in passes.collections]
        line["gc_us_per_send"] = passes.gc_seconds / count * 1e6
        line["steps_per_send"] = {
            name: round(n / count, 3) for name, n in passes.steps.most_common()
        }
    if profile:
        sends = WARM + count
        line["calls_per_send"] = sum(calls.values()) / sends
        line["top_calls"] = [(name, round(n / sends, 2)) for name, n in calls.most_common(400)]
    print(json.dumps(line))


_GAP_US = 0.0  # the child's --gap, handed on to its client


_CRITICAL = False  # the child's --critical, handed on to its client


def _client_command(port: int, count: int, trace: bool = False) -> list[str]:
    """The client's command line (the child's ``--gap`` and ``--critical`` handed on)."""
    command = [sys.executable, __file__, "--client", str(port), "--count", str(count)]
    if trace:
        command.append("--trace")
    if _CRITICAL:
        command.append("--critical")
    if _GAP_US:
        command += ["--gap", str(_GAP_US)]
    return command


def _answers(buffer: bytearray, have: int, answer: bytes) -> tuple[list[bytes], int]:
    """One ``answer`` per whole frame among the first ``have`` bytes of ``buffer``; the bytes
    those frames took."""
    at = 0
    answers = []
    while have - at >= 4:
        size = 4 + int.from_bytes(buffer[at : at + 4], "big")
        if have - at < size:
            break
        at += size
        answers.append(answer)
    return answers, at


def _floor_answer() -> bytes:
    header = b'{"code":0,"flag":1,"language":"JAVA","opaque":0,"serializeTypeCurrentRPC":"JSON"}'
    return (4 + len(header)).to_bytes(4, "big") + len(header).to_bytes(4, "big") + header


async def _floor(count: int) -> None:
    """The child with ``--floor``: instead of a broker, a bare trio server answering every frame
    with the same short success answer (trio's wait, one ``readv``, one ``writev``, the frames
    cut by their length field): the floor of a broker on trio for this client on this machine,
    what no broker code is in."""
    import trio

    answer = _floor_answer()
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]

    async def serve() -> None:
        conn, _ = await listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        fd = conn.fileno()
        buffer = bytearray(1 << 20)
        view = memoryview(buffer)
        have = 0
        while True:
            await trio.lowlevel.wait_readable(fd)
            n = os.readv(fd, [view[have:]])
            if not n:
                return
            have += n
            answers, at = _answers(buffer, have, answer)
            if answers:
                os.writev(fd, answers)
            buffer[: have - at] = buffer[at:have]
            have -= at

    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve)
        result = await trio.run_process(
            _client_command(port, count),
            capture_stdout=True,
            cwd=ROOT,
        )
        nursery.cancel_scope.cancel()
    line = json.loads(result.stdout.decode().strip().splitlines()[-1])
    line["embedded_cpu_us"] = 0.0
    print(json.dumps(line))


def _floor_epoll(count: int) -> None:
    """:func:`_floor` without trio: a plain ``epoll`` loop, the socket registered once
    (level-triggered, no re-arming), so one ``epoll_wait``, one ``readv`` and one ``writev`` a
    frame: the floor of any Python server, what trio's pass costs set against :func:`_floor`."""
    answer = _floor_answer()
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    client = subprocess.Popen(
        _client_command(port, count),
        stdout=subprocess.PIPE,
        cwd=ROOT,
    )
    conn, _ = listener.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn.setblocking(False)
    fd = conn.fileno()
    poller = select.epoll()
    poller.register(fd, select.EPOLLIN)
    buffer = bytearray(1 << 20)
    view = memoryview(buffer)
    have = 0
    while True:
        poller.poll(-1, 1)
        n = os.readv(fd, [view[have:]])
        if not n:
            break
        have += n
        answers, at = _answers(buffer, have, answer)
        if answers:
            os.writev(fd, answers)
        buffer[: have - at] = buffer[at:have]
        have -= at
    out, _ = client.communicate()
    line = json.loads(out.decode().strip().splitlines()[-1])
    line["embedded_cpu_us"] = 0.0
    print(json.dumps(line))


def _embedded(broker: Any, count: int) -> float:
    """The same lone sends without sockets or trio: each frame a read-only view (as a TCP
    channel hands a read on) into the port's pipeline on an ``EmbeddedChannel``, its answer
    taken; this process's CPU per send (the Python path alone, caches warm)."""
    from hanet.testing import EmbeddedChannel

    channel = EmbeddedChannel()
    broker.port.initialize(channel)
    reads = [memoryview(frame).toreadonly() for frame in _frames(WARM + count)]
    for read in reads[:WARM]:
        channel.write_inbound(read)
        channel.read_outbound()
    started = time.process_time()
    for read in reads[WARM:]:
        channel.write_inbound(read)
        channel.read_outbound()
    return (time.process_time() - started) / count * 1e6


def _run_child(
    tree: Path | None,
    count: int,
    profile: bool,
    cpu: int | None = None,
    trace: bool = False,
    floor: str | None = None,
    split: bool = False,
    gap_us: float = 0.0,
    critical: bool = False,
) -> dict[str, Any]:
    cwd = tree or ROOT
    command = [sys.executable, str(Path(__file__).resolve()), "--child", "--count", str(count)]
    if floor is not None:
        command += ["--floor", floor]
    if gap_us:
        command += ["--gap", str(gap_us)]
    if critical:
        command.append("--critical")
    if cpu is not None:
        command += ["--cpu", str(cpu)]
    if profile and floor is None:
        command.append("--profile")
    if trace and floor is None:
        command.append("--trace")
    if split and floor is None:
        command.append("--split")
    out = subprocess.run(
        command,
        check=False,
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=600,
        env=dict(os.environ, PYTHONPATH=str(cwd)),
    )
    if out.returncode != 0:
        sys.exit(f"the measuring process failed ({cwd}):\n{out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _print_critical(figures: dict[str, Any]) -> None:
    for name, phase in figures.items():
        if isinstance(phase, dict) and "p50_us" in phase:
            print(f"    {phase['p50_us']:7.1f} us p50 ({phase['mean_us']:7.1f} mean): {name}")
    calls = ", ".join(f"{name} {n}" for name, n in figures["calls_per_request"].items())
    print(f"    calls a request: {calls}")


def critical_of(pid: int, seconds: float) -> dict[str, Any]:
    """``--critical-pid``: the broker side of :func:`_critical` for any broker process (its
    main thread) over ``seconds``."""
    perf = _Perf([pid])
    try:
        time.sleep(seconds)
    except BaseException:
        perf.close()
        raise
    return _critical(perf.events(), pid, None)


def main(args: argparse.Namespace) -> None:
    trees: list[tuple[str, Path | None]] = [("A", None)]
    if args.ab is not None:
        trees.append(("B", args.ab))
    if args.floor:
        trees += [("floor trio", None), ("floor epoll", None)]
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in trees}
    keys = (
        "broker_cpu_us",
        "broker_user_us",
        "broker_ran_us",
        "embedded_cpu_us",
        "trip_p50_us",
        "sends_per_sec",
    )
    for r in range(args.rounds):
        for name, tree in trees if r % 2 == 0 else trees[::-1]:
            floor = name.split()[1] if name.startswith("floor") else None
            result = _run_child(
                tree,
                args.count,
                args.profile,
                args.cpu,
                args.trace,
                floor,
                args.split,
                args.gap,
                args.critical,
            )
            result["load"] = os.getloadavg()[0]
            rows[name].append(result)
            extra = f", {result['calls_per_send']:.1f} calls" if "calls_per_send" in result else ""
            if "pipeline_us" in result:
                extra += f", pipeline {result['pipeline_us']:.1f} us over TCP"
            print(
                f"round {r + 1} {name}: broker {result['broker_cpu_us']:6.1f} us CPU a send "
                f"({result['broker_user_us']:.1f} user, {result['broker_ran_us']:.1f} ran), "
                f"in process {result['embedded_cpu_us']:.1f} us, "
                f"round trip p50 {result['trip_p50_us']:6.1f} us, "
                f"{result['sends_per_sec']:7.0f} sends/s{extra} (load {result['load']:.2f})",
                flush=True,
            )
            if "passes_per_send" in result:
                print(f"    {result['passes_per_send']:.3f} scheduler passes a send")
                print(
                    f"    garbage collections a send by generation {result['gc_per_send']}, "
                    f"{result['gc_us_per_send']:.2f} us a send"
                )
                for task, n in result["steps_per_send"].items():
                    print(f"    {n:6.3f} steps a send: task {task}")
                for call, n in result["syscalls_per_send"].items():
                    print(f"    {n:6.3f} calls a send: {call}")
            if result.get("critical"):
                _print_critical(result["critical"])
            if "top_calls" in result:
                for call, n in result["top_calls"]:
                    print(f"    {n:6.2f}  {call}")
    summary: dict[str, Any] = {}
    print()
    for name, tree in trees:
        label = (
            "bare trio server"
            if name == "floor trio"
            else "bare epoll loop"
            if name == "floor epoll"
            else str(tree)
            if tree
            else "this tree"
        )
        figures: dict[str, Any] = {"tree": label}
        for key in keys:
            values = [round(row[key], 1) for row in rows[name]]
            figures[key] = {
                "median": statistics.median(values),
                "range": [min(values), max(values)],
                "rounds": values,
            }
        figures["loads"] = [round(row["load"], 2) for row in rows[name]]
        if any(row.get("critical") for row in rows[name]):
            figures["critical"] = [row.get("critical") for row in rows[name]]  # per round
        summary[name] = figures
        c, t = figures["broker_cpu_us"], figures["trip_p50_us"]
        print(
            f"{name} ({figures['tree']}): broker {c['median']:.1f} us CPU a send "
            f"({c['range'][0]:.1f}-{c['range'][1]:.1f}), round trip {t['median']:.1f} us "
            f"({t['range'][0]:.1f}-{t['range'][1]:.1f}); median (range)"
        )
    ratios = {}
    if "B" in summary:
        for key in keys:
            ratios[key] = round(summary["A"][key]["median"] / summary["B"][key]["median"], 3)
        print(
            f"A / B: {ratios['broker_cpu_us']:.2f} of the broker's CPU a send, "
            f"{ratios['trip_p50_us']:.2f} of the round trip"
        )
    print(
        json.dumps(
            {
                "bench": "lone_send",
                "count": args.count,
                "rounds": args.rounds,
                "size": SIZE,
                "cpus": os.cpu_count(),
                "pinned_cpu": args.cpu,
                "loadavg": os.getloadavg(),
                "trees": summary,
                "a_over_b": ratios,
            }
        )
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=20_000, help="timed sends a round (20000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (3)")
    parser.add_argument(
        "--ab", type=Path, default=None, help="also run this hanet tree (a worktree) each round"
    )
    parser.add_argument(
        "--profile", action="store_true", help="count the broker's Python calls per send"
    )
    parser.add_argument(
        "--cpu", type=int, default=None, help="pin the broker and the client to this CPU"
    )
    parser.add_argument(
        "--trace",
        action="store_true",
        help="count the broker's scheduler passes, task steps and system calls per send",
    )
    parser.add_argument(
        "--floor",
        nargs="?",
        const="both",
        default=None,
        help="also run a bare trio server and a bare epoll loop answering each frame (no broker "
        "code) each round",
    )
    parser.add_argument(
        "--split",
        action="store_true",
        help="also time the broker's pipeline per read over TCP (thread CPU time)",
    )
    parser.add_argument(
        "--gap",
        type=float,
        default=0.0,
        help="microseconds the client stays busy between an answer and its next send (0)",
    )
    parser.add_argument(
        "--critical",
        action="store_true",
        help="split each round trip by the system calls on its path (perf record)",
    )
    parser.add_argument(
        "--critical-pid",
        type=int,
        default=None,
        help="only the broker side of --critical, for this broker process, over --seconds",
    )
    parser.add_argument(
        "--seconds", type=float, default=5.0, help="seconds of --critical-pid's record (5)"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--client", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client is not None:
        _client(args.client, args.count, os.getppid(), args.trace, args.gap, args.critical)
    elif args.critical_pid is not None:
        figures = critical_of(args.critical_pid, args.seconds)
        print(f"broker {args.critical_pid}, {args.seconds} s (load {os.getloadavg()[0]:.2f}):")
        _print_critical(figures)
        print(json.dumps({"bench": "lone_send_critical", "loadavg": os.getloadavg(), **figures}))
    elif args.child:
        import trio

        _GAP_US = args.gap
        _CRITICAL = args.critical
        if args.cpu is not None:
            os.sched_setaffinity(0, {args.cpu})  # the client, its child, inherits it
        if args.floor == "epoll":
            _floor_epoll(args.count)
        elif args.floor is not None:
            trio.run(_floor, args.count)
        else:
            trio.run(_broker, args.count, args.profile, args.trace, args.split)
    else:
        main(args)
