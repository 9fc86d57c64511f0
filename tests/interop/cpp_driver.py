"""Drives PyPI ``rocketmq`` 0.4.4 (Apache's C++ client 1.0.1 in a bundled ``librocketmq.so``,
through ctypes) for hanet's interop tests; the same modes and JSON lines as
``alions_driver.js``::

    python cpp_driver.py <produce|consume|bench> --namesrv HOST:PORT --topic T [options]

Every line on stdout is one JSON object with an ``event`` key; the last one is the summary
(``summary``, or ``bench`` for bench). The C++ client writes its log to
``$HOME/logs/rocketmq-cpp/<pid>_rocketmq-cpp.log.0`` (the C API's log path setter does not move
it), so ``--home DIR`` replaces ``HOME`` before the library loads. Exit status: 0 done, 1 some
sends failed or the client failed, 2 consume timed out before ``--expect`` bodies, 3 bad
arguments.

What the C++ client cannot tell: a send result has no queue id or broker name (``null``), and
its push consumer always starts a new group from the last offset (no ``--from-first``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

CLOSE_CAP = 15.0
"""Seconds a shutdown may take before the driver exits anyway (against a server that accepts
but never answers, the consumer's shutdown takes about 13 s)."""

NO_ROUTE_PAUSE = 0.2
"""Seconds before a send that found no usable route is sent again (once)."""

_out_lock = threading.Lock()


def emit(obj: dict[str, Any]) -> None:
    line = json.dumps(obj, separators=(",", ":"))
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="cpp_driver.py")
    parser.add_argument("mode", choices=["produce", "consume", "bench"])
    parser.add_argument("--namesrv", required=True, help="HOST:PORT of the name server")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group")
    parser.add_argument("--count", type=int, default=10)
    parser.add_argument("--in-flight", type=int, default=1, help="concurrent send_sync threads")
    parser.add_argument("--tag", default="")
    parser.add_argument("--delay-level", type=int, default=0)
    parser.add_argument("--prefix", default="msg")
    parser.add_argument("--fail-first", action="store_true")
    parser.add_argument("--from-first", action="store_true", help="not supported: exits 3")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--expect", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--instance", help="instance name (part of the client id)")
    parser.add_argument("--send-timeout-ms", type=int, default=3000)
    parser.add_argument("--home", help="HOME for the C++ client: its logs/rocketmq-cpp goes here")
    parser.add_argument("--access-key", help="sign requests (RocketMQ's ACL) with this account")
    parser.add_argument("--secret-key", help="the account's secret key")
    args = parser.parse_args(argv)
    for name in ("count", "in_flight", "delay_level", "expect", "seconds", "timeout"):
        if getattr(args, name) < 0:
            parser.error(f"--{name.replace('_', '-')} must not be negative")
    if args.in_flight < 1:
        parser.error("--in-flight must be at least 1")
    if args.from_first:
        parser.error("--from-first: the C++ client's C API cannot set consumeFromWhere")
    if args.group is None:
        args.group = (
            "hanet-interop-consumer" if args.mode == "consume" else "hanet-interop-producer"
        )
    return args


def load_client(home: str | None) -> tuple[ModuleType, ModuleType, ModuleType]:
    """``rocketmq.client``, ``rocketmq.ffi``, ``rocketmq.exceptions``, with ``HOME`` set first
    (the library reads it for its log folder)."""
    if home:
        Path(home).mkdir(parents=True, exist_ok=True)
        os.environ["HOME"] = home
    try:
        return (
            importlib.import_module("rocketmq.client"),
            importlib.import_module("rocketmq.ffi"),
            importlib.import_module("rocketmq.exceptions"),
        )
    except Exception as exc:  # ImportError, or OSError when librocketmq.so cannot load
        emit({"event": "summary", "client": "cpp", "ok": False, "error": error_text(exc)})
        sys.stderr.write(f"cpp_driver: cannot load the rocketmq package: {exc}\n")
        sys.stderr.flush()
        os._exit(1)


def client_log() -> Path:
    return Path(os.environ.get("HOME", "~")).expanduser() / "logs" / "rocketmq-cpp"


def client_id_from_log() -> str | None:
    """The client id the library logged at start (``<pid>-<ip>@<instance>``), if it did."""
    path = client_log() / f"{os.getpid()}_rocketmq-cpp.log.0"
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None
    found = re.search(r"clientID:([^,\s]+)", text)
    return found.group(1) if found else None


def percentile(sorted_values: list[float], p: float) -> float | None:
    if not sorted_values:
        return None
    index = min(len(sorted_values) - 1, max(0, math.ceil(p / 100 * len(sorted_values)) - 1))
    return round(sorted_values[index], 3)


class Stop:
    """Set by SIGTERM (or SIGINT): the main thread shuts the client down and exits."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signal: str | None = None

    def install(self) -> None:
        def handler(signum: int, frame: FrameType | None) -> None:
            self.signal = signal.Signals(signum).name
            self.event.set()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)


def wait(event: threading.Event, deadline: float) -> None:
    """Waits for ``event`` or ``deadline`` in short slices so signal handlers run."""
    while not event.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            return
        event.wait(min(left, 0.1))


def finish(code: int, close: Callable[[], None], summary: dict[str, Any]) -> None:
    """Shuts the client down (at most ``CLOSE_CAP`` s), prints the summary, exits."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            close()
            outcome["closed"] = True
        except Exception as exc:
            outcome["closed"] = False
            sys.stderr.write(f"cpp_driver: shutdown failed: {error_text(exc)}\n")

    closer = threading.Thread(target=run, daemon=True)
    closer.start()
    closer.join(CLOSE_CAP)
    summary["closed"] = outcome.get("closed", False)
    if closer.is_alive():
        sys.stderr.write(f"cpp_driver: shutdown took over {CLOSE_CAP} s, exiting anyway\n")
    emit(summary)
    sys.stderr.flush()
    # os._exit: the wrappers' __del__ would shut down and destroy the handles again at exit.
    os._exit(code)


def produce(args: argparse.Namespace, stop: Stop, bench: bool) -> None:
    client, _ffi, _exceptions = load_client(args.home)
    producer = client.Producer(args.group, timeout=args.send_timeout_ms)
    producer.set_namesrv_addr(args.namesrv)
    if args.access_key:
        producer.set_session_credentials(args.access_key, args.secret_key or "", "ALIYUN")
    producer.start()
    client_id = client_id_from_log()
    started = time.monotonic()
    deadline = started + (args.seconds if bench else args.timeout)
    lock = threading.Lock()
    state = {"next": 0, "sent": 0, "failed": 0}
    latencies: list[float] = []
    errors: list[str] = []
    all_done = threading.Event()

    def send(msg: Any) -> Any:
        # The client's first connection to a broker races: while its heartbeat thread is
        # still connecting, a send finds the transport "connecting", fails at once and, with
        # one broker in the route, reports "No route info of this topic" (its retry skips
        # the broker that failed). A send that fails so is sent once more, shortly after.
        try:
            return producer.send_sync(msg)
        except Exception as exc:
            if "No route info of this topic" not in str(exc) or stop.event.is_set():
                raise
        time.sleep(NO_ROUTE_PAUSE)
        return producer.send_sync(msg)

    def take() -> int | None:
        with lock:
            if stop.event.is_set() or time.monotonic() >= deadline:
                return None
            if not bench and state["next"] >= args.count:
                return None
            i = state["next"]
            state["next"] += 1
            return i

    def worker() -> None:
        while (i := take()) is not None:
            body = f"{args.prefix}-{i}"
            msg = client.Message(args.topic)
            msg.set_body(body)
            msg.set_keys(body)
            if args.tag:
                msg.set_tags(args.tag)
            if args.delay_level:
                msg.set_delay_time_level(args.delay_level)
            t0 = time.perf_counter()
            try:
                result = send(msg)
            except Exception as exc:
                with lock:
                    state["failed"] += 1
                    failed = state["failed"]
                    if len(errors) < 10:
                        errors.append(error_text(exc))
                if not bench or failed <= 10:
                    emit({"event": "send_error", "i": i, "body": body, "error": error_text(exc)})
                if bench:
                    time.sleep(0.01)
                continue
            ms = (time.perf_counter() - t0) * 1000
            with lock:
                state["sent"] += 1
                latencies.append(ms)
            if not bench:
                status = result.status.name
                emit(
                    {
                        "event": "sent",
                        "i": i,
                        "body": body,
                        "status": "SEND_OK" if status == "OK" else status,
                        "msgId": result.msg_id,
                        "brokerName": None,
                        "queueId": None,
                        "queueOffset": result.offset,
                        "latencyMs": round(ms, 3),
                    }
                )

    workers = [threading.Thread(target=worker, daemon=True) for _ in range(args.in_flight)]
    for thread in workers:
        thread.start()

    def join_all() -> None:
        for thread in workers:
            thread.join()
        all_done.set()

    threading.Thread(target=join_all, daemon=True).start()
    # A send blocked in the library past the deadline: give it its own timeout, then go.
    wait(all_done, deadline + args.send_timeout_ms / 1000 + 1)
    with lock:
        elapsed = time.monotonic() - started
        sent, failed = state["sent"], state["failed"]
        sorted_latencies = sorted(latencies)
    timed_out = not bench and not stop.event.is_set() and sent + failed < args.count
    summary: dict[str, Any] = {
        "event": "bench" if bench else "summary",
        "client": "cpp",
        "mode": args.mode,
        "topic": args.topic,
        "group": args.group,
        "clientId": client_id,
        "sent": sent,
        "failed": failed,
        "timedOut": timed_out,
        "stoppedBy": stop.signal,
        "elapsedS": round(elapsed, 3),
    }
    if bench:
        summary.update(
            inFlight=args.in_flight,
            msgsPerSec=round(sent / elapsed, 1) if elapsed > 0 else None,
            p50Ms=percentile(sorted_latencies, 50),
            p99Ms=percentile(sorted_latencies, 99),
        )
    else:
        summary["errors"] = errors
    code = 0 if stop.signal or (failed == 0 and (bench or sent >= args.count)) else 1
    finish(code, producer.shutdown, summary)


def consume(args: argparse.Namespace, stop: Stop) -> None:
    client, ffi, exceptions = load_client(args.home)
    consumer = client.PushConsumer(args.group)
    consumer.set_namesrv_addr(args.namesrv)
    if args.access_key:
        consumer.set_session_credentials(args.access_key, args.secret_key or "", "ALIYUN")
    if args.instance:
        consumer.set_instance_name(args.instance)
    lock = threading.Lock()
    failed_once: set[str] = set()
    done: set[str] = set()
    counts = {"deliveries": 0}
    reached = threading.Event()
    client_id: list[str | None] = [None]
    success = ffi._CConsumeStatus.CONSUME_SUCCESS.value
    later = ffi._CConsumeStatus.RECONSUME_LATER.value

    def on_message(_consumer: Any, handle: Any) -> int:
        # Registered raw (not through PushConsumer.subscribe, whose wrapper re-raises a
        # callback's exception into ctypes): RECONSUME_LATER makes the client send the
        # message back to the broker (CONSUMER_SEND_MSG_BACK), the retry path.
        try:
            msg = client.RecvMessage(handle)
            body = msg.body.decode("utf-8", "replace")
            with lock:
                refuse = args.fail_first and body not in failed_once and body not in done
                counts["deliveries"] += 1
                if refuse:
                    failed_once.add(body)
                else:
                    done.add(body)
                    if args.expect and len(done) >= args.expect:
                        reached.set()
            tags = msg.tags
            emit(
                {
                    "event": "received",
                    "body": body,
                    "msgId": msg.id,
                    "originMsgId": None,
                    "topic": msg.topic,
                    "tags": tags.decode("utf-8", "replace") if tags else None,
                    "brokerName": None,
                    "queueId": msg.queue_id,
                    "queueOffset": msg.queue_offset,
                    "reconsumeTimes": msg.reconsume_times,
                    "clientId": client_id[0],
                    "action": "retry" if refuse else "ok",
                }
            )
            return int(later if refuse else success)
        except Exception as exc:  # never let an exception cross into the C++ thread
            emit({"event": "error", "error": f"callback: {error_text(exc)}"})
            return int(later)

    exceptions.ffi_check(
        ffi.dll.Subscribe(consumer._handle, args.topic.encode(), (args.tag or "*").encode())
    )
    consumer._register_callback(on_message)
    started = time.monotonic()
    try:
        consumer.start()
    except Exception as exc:
        emit({"event": "error", "error": error_text(exc)})
    client_id[0] = client_id_from_log()
    emit(
        {
            "event": "started",
            "client": "cpp",
            "clientId": client_id[0],
            "group": args.group,
            "topic": args.topic,
        }
    )

    def stopper() -> None:
        stop.event.wait()
        reached.set()

    threading.Thread(target=stopper, daemon=True).start()
    wait(reached, started + args.timeout)
    with lock:
        distinct = len(done)
        deliveries = counts["deliveries"]
    timed_out = not stop.event.is_set() and not (args.expect and distinct >= args.expect)
    summary = {
        "event": "summary",
        "client": "cpp",
        "mode": "consume",
        "topic": args.topic,
        "group": args.group,
        "clientId": client_id[0],
        "deliveries": deliveries,
        "distinct": distinct,
        "expected": args.expect,
        "timedOut": timed_out,
        "stoppedBy": stop.signal,
        "elapsedS": round(time.monotonic() - started, 3),
    }
    finish(2 if timed_out and args.expect else 0, consumer.shutdown, summary)


def main(argv: list[str] | None = None) -> None:
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:
        raise SystemExit(3 if exc.code else 0) from None
    stop = Stop()
    stop.install()
    if args.mode == "consume":
        consume(args, stop)
    else:
        produce(args, stop, bench=args.mode == "bench")


if __name__ == "__main__":
    main()
