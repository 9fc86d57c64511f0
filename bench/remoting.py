"""The broker port's remoting path: CPU per send and per pull, against a raw trio server.

Run: ``.venv/bin/python bench/remoting.py [--count N] [--rounds R] [--ab DIR]``

Each round starts, as processes, ``hanet master`` (ASYNC_MASTER, ASYNC_FLUSH, 256 MiB commit
log files) and a raw trio server (this script with ``--serve-raw``), in alternating order. One
client (this process, hanet's ``RemotingConnection``, one connection) sends ``--count``
SEND_MESSAGE_V2 requests with 1 KiB bodies, 16 in flight, spread over 4 queues, then drains them
back with PULL_MESSAGE (32 messages a pull, one pull in flight per queue, 4 in flight).

The raw server is the floor a Python server of this protocol stands on: plain trio
``receive_some`` / ``send_all``, frames cut from a ``bytearray``, each request's JSON header
read with ``json.loads``, and an answer of the same size as the broker's (the send answer's
header; a pull answer's header and 32 records of the same size) written per read. It stores
nothing.

For each phase: msgs/s, and the server's CPU (``utime + stime`` of ``/proc/<pid>/stat``) per
message in microseconds; the ratio is hanet's CPU per message over the raw server's.
``--ab DIR`` also runs a second hanet (its source tree in ``DIR``, e.g. a ``git archive`` of
an older commit with the built ``_speedups`` module copied in) in every round, interleaved with
this tree's, so two versions are compared under the same load.

A table for humans, then the last line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

# This tree's hanet, whatever the virtualenv's editable install points at (the servers too).
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hanet.client import RemotingConnection  # noqa: E402
from hanet.protocol import (  # noqa: E402
    MessageProperty,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    SendMessageRequestHeader,
    properties_to_string,
    pull_message_request,
)
from hanet.testing import cli_flags  # noqa: E402

TOPIC = "BenchRemoting"
GROUP = "bench-group"
SIZE = 1024
QUEUES = 4
IN_FLIGHT = 16
PULL_BATCH = 32
TICKS = os.sysconf("SC_CLK_TCK")


# -- the raw trio server ------------------------------------------------------------------------

_OPAQUE = re.compile(rb'"opaque":(-?\d+)')


def _send_answer_template() -> bytes:
    fields = {
        "msgId": "7F00000100002A9F0000000000000000",
        "queueId": "0",
        "queueOffset": "0",
        MessageProperty.MSG_REGION: "DefaultRegion",
        MessageProperty.TRACE_ON: "true",
    }
    header = json.dumps(
        {
            "code": 0,
            "extFields": fields,
            "flag": 1,
            "language": "JAVA",
            "opaque": 0,
            "serializeTypeCurrentRPC": "JSON",
            "version": 409,
        },
        separators=(",", ":"),
    ).encode()
    return header


def _write_ready(ready: Path, port: int) -> None:
    ready.write_text(json.dumps({"broker": f"127.0.0.1:{port}", "pid": os.getpid()}))


async def _serve_raw(ready: Path, record_size: int) -> None:
    """Answer every request frame: its opaque echoed, the answer as large as the broker's."""
    send_header = _send_answer_template()
    pull_body = b"r" * (record_size * PULL_BATCH)

    def answer(frame: bytes) -> bytes:
        mark = int.from_bytes(frame[:4], "big")
        header = json.loads(frame[4 : 4 + (mark & 0xFFFFFF)])
        opaque = header["opaque"]
        if header["code"] == RequestCode.PULL_MESSAGE:
            ext = header["extFields"]
            start = int(ext["queueOffset"])
            fields = (
                f'{{"maxOffset":"{start + PULL_BATCH}","minOffset":"0",'
                f'"nextBeginOffset":"{start + PULL_BATCH}","suggestWhichBrokerId":"0"}}'
            )
            head = (
                f'{{"code":0,"extFields":{fields},"flag":1,"language":"JAVA",'
                f'"opaque":{opaque},"remark":"FOUND","serializeTypeCurrentRPC":"JSON",'
                f'"version":409}}'
            ).encode()
            body = pull_body
        else:
            head = _OPAQUE.sub(b'"opaque":%d' % opaque, send_header)
            body = b""
        prefix = (4 + len(head) + len(body)).to_bytes(4, "big") + len(head).to_bytes(4, "big")
        return prefix + head + body

    async def handle(stream: trio.SocketStream) -> None:
        buffer = bytearray()
        try:
            while True:
                data = await stream.receive_some(256 * 1024)
                if not data:
                    return
                buffer += data
                out = []
                pos = 0
                while len(buffer) - pos >= 4:
                    length = int.from_bytes(buffer[pos : pos + 4], "big")
                    if len(buffer) - pos - 4 < length:
                        break
                    out.append(answer(bytes(buffer[pos + 4 : pos + 4 + length])))
                    pos += 4 + length
                del buffer[:pos]
                if out:
                    await stream.send_all(b"".join(out))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    _write_ready(ready, port)
    await trio.serve_listeners(handle, listeners)


# -- processes -----------------------------------------------------------------------------------


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return data


async def _start(
    argv: list[str],
    log: Path,
    ready: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> tuple[trio.Process, dict[str, Any]]:
    with log.open("wb") as out:
        process = await trio.lowlevel.open_process(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env, cwd=cwd
        )
    with trio.fail_after(30):
        while (data := _read_json(ready)) is None:
            if process.returncode is not None:
                sys.exit(f"a server exited; see {log}")
            await trio.sleep(0.02)
    return process, data


async def _stop(process: trio.Process) -> None:
    with trio.CancelScope(shield=True):
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            with trio.move_on_after(10):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


# -- the client ----------------------------------------------------------------------------------


def _send_request(queue_id: int) -> RemotingCommand:
    properties = properties_to_string(
        {
            MessageProperty.UNIQ_KEY: "7F0000010000000000000000000000" + f"{queue_id:02X}",
            MessageProperty.WAIT: "true",
            MessageProperty.TAGS: "bench",
        }
    )
    header = SendMessageRequestHeader(
        producer_group="bench-producer",
        topic=TOPIC,
        default_topic="TBW102",
        default_topic_queue_nums=QUEUES,
        queue_id=queue_id,
        sys_flag=0,
        born_timestamp=int(time.time() * 1000),
        flag=0,
        properties=properties,
        reconsume_times=0,
        unit_mode=False,
        batch=False,
    )
    return RemotingCommand.request(
        RequestCode.SEND_MESSAGE_V2,
        header.encode(RequestCode.SEND_MESSAGE_V2),
        b"b" * SIZE,
    )


async def _sends(conn: RemotingConnection, count: int) -> None:
    requests = [_send_request(q) for q in range(QUEUES)]
    per_task = [len(range(i, count, IN_FLIGHT)) for i in range(IN_FLIGHT)]

    async def sender(task: int, n: int) -> None:
        for i in range(n):
            answer = await conn.invoke(requests[(task + i * IN_FLIGHT) % QUEUES])
            if answer.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"send answered {answer.code}: {answer.remark}")

    async with trio.open_nursery() as nursery:
        for task, n in enumerate(per_task):
            nursery.start_soon(sender, task, n)


async def _pulls(conn: RemotingConnection, count: int) -> int:
    """Drain every queue; returns the records' bytes pulled."""
    per_queue = [0] * QUEUES
    for i in range(count):
        per_queue[i % IN_FLIGHT % QUEUES] += 1
    pulled_bytes = 0

    async def drain(queue_id: int, n: int) -> None:
        nonlocal pulled_bytes
        offset = 0
        while offset < n:
            request = pull_message_request(GROUP, TOPIC, queue_id, offset, PULL_BATCH)
            answer = await conn.invoke(request)
            if answer.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"pull answered {answer.code}: {answer.remark}")
            offset = int(answer.fields["nextBeginOffset"])
            pulled_bytes += len(answer.body)

    async with trio.open_nursery() as nursery:
        for queue_id, n in enumerate(per_queue):
            nursery.start_soon(drain, queue_id, n)
    return pulled_bytes


async def _phase(pid: int, run: Any) -> tuple[float, float, Any]:
    cpu0, t0 = _cpu_seconds(pid), time.perf_counter()
    result = await run()
    wall, cpu = time.perf_counter() - t0, _cpu_seconds(pid) - cpu0
    return wall, cpu, result


async def _measure(address: str, pid: int, count: int) -> dict[str, float]:
    host, _, port = address.rpartition(":")
    async with RemotingConnection.connect(host, int(port), max_in_flight=IN_FLIGHT) as conn:
        await _sends(conn, QUEUES * 4)  # creates the topic, warms up
        s_wall, s_cpu, _ = await _phase(pid, lambda: _sends(conn, count))
    # The drain reads what the warm-up and the timed sends stored (a fresh connection).
    total = count + QUEUES * 4
    async with RemotingConnection.connect(host, int(port), max_in_flight=IN_FLIGHT) as conn:
        p_wall, p_cpu, pulled = await _phase(pid, lambda: _pulls(conn, total))
    return {
        "send_msgs_per_sec": count / s_wall,
        "send_cpu_us": s_cpu / count * 1e6,
        "pull_msgs_per_sec": total / p_wall,
        "pull_cpu_us": p_cpu / total * 1e6,
        "record_size": pulled / total,
    }


async def _one(
    kind: str, tree: Path | None, args: argparse.Namespace, work: Path
) -> dict[str, float]:
    directory = Path(tempfile.mkdtemp(prefix=f"{kind}-", dir=work))
    ready = directory / "ready.json"
    if kind == "raw":
        argv = [sys.executable, __file__, *cli_flags(serve_raw=ready, record_size=args.record_size)]
        env = cwd = None
    else:
        argv = [sys.executable, "-m", "hanet", "--log-level", "WARNING", "master"]
        argv += cli_flags(store=directory / "store", listen="127.0.0.1:0", ha_listen="127.0.0.1:0")
        argv += cli_flags(mapped_file_size="256M", ready_file=ready)
        # ``python -m`` puts its working directory first on sys.path: run it in the tree.
        cwd = tree or ROOT
        env = dict(os.environ, PYTHONPATH=str(cwd))
    process, info = await _start(argv, directory / "server.log", ready, env, cwd)
    try:
        return await _measure(info["broker"], process.pid, args.count)
    finally:
        await _stop(process)


async def main(args: argparse.Namespace) -> None:
    kinds: list[tuple[str, Path | None]] = [("hanet", None), ("raw", None)]
    if args.ab is not None:
        kinds.insert(1, ("hanet-B", args.ab))
    rows: dict[str, list[dict[str, float]]] = {k: [] for k, _ in kinds}
    with tempfile.TemporaryDirectory(prefix="hanet-bench-remoting-") as tmp:
        for r in range(args.rounds):
            order = kinds if r % 2 == 0 else kinds[::-1]
            for kind, tree in order:
                result = await _one(kind.split("-")[0], tree, args, Path(tmp))
                if kind == "hanet" and not r:
                    args.record_size = round(result["record_size"])
                rows[kind].append(result)
                print(
                    f"round {r + 1} {kind:<8} send {result['send_msgs_per_sec']:>8,.0f}/s "
                    f"{result['send_cpu_us']:6.1f} us/msg   pull "
                    f"{result['pull_msgs_per_sec']:>8,.0f}/s {result['pull_cpu_us']:6.1f} us/msg",
                    flush=True,
                )
    summary: dict[str, Any] = {}
    print()
    print(f"{'server':<9}{'send/s':>10}{'send us':>9}{'pull/s':>10}{'pull us':>9}  (median; range)")
    for kind, _ in kinds:
        med = {k: statistics.median(r[k] for r in rows[kind]) for k in rows[kind][0]}
        summary[kind] = {k: round(v, 1) for k, v in med.items()}
        summary[kind]["rounds"] = [{k: round(v, 1) for k, v in r.items()} for r in rows[kind]]
        lo = min(r["send_cpu_us"] for r in rows[kind])
        hi = max(r["send_cpu_us"] for r in rows[kind])
        plo = min(r["pull_cpu_us"] for r in rows[kind])
        phi = max(r["pull_cpu_us"] for r in rows[kind])
        print(
            f"{kind:<9}{med['send_msgs_per_sec']:>10,.0f}{med['send_cpu_us']:>9.1f}"
            f"{med['pull_msgs_per_sec']:>10,.0f}{med['pull_cpu_us']:>9.1f}"
            f"  (send {lo:.1f}-{hi:.1f} us, pull {plo:.1f}-{phi:.1f} us)"
        )
    raw = summary["raw"]

    def ratio(kind: str, key: str) -> float | None:
        """``kind``'s CPU over the raw server's; None when the raw run was too short for the
        clock's 10 ms ticks to see any (a larger ``--count``)."""
        return round(summary[kind][key] / raw[key], 2) if raw[key] else None

    ratios = {
        kind: {
            "send_cpu_ratio": ratio(kind, "send_cpu_us"),
            "pull_cpu_ratio": ratio(kind, "pull_cpu_us"),
        }
        for kind, _ in kinds
        if kind != "raw"
    }
    for kind, found in ratios.items():
        send, pull = found["send_cpu_ratio"], found["pull_cpu_ratio"]
        print(
            f"{kind}: CPU per send {'?' if send is None else f'{send:.2f}'}x the raw server's, "
            f"per pulled message {'?' if pull is None else f'{pull:.2f}'}x"
            + (
                " (? : the raw run was too short to measure: a larger --count)"
                if None in (send, pull)
                else ""
            )
        )
    print(
        json.dumps(
            {
                "bench": "remoting",
                "count": args.count,
                "rounds": args.rounds,
                "size": SIZE,
                "in_flight": IN_FLIGHT,
                "pull_batch": PULL_BATCH,
                "cpus": os.cpu_count(),
                "loadavg": os.getloadavg(),
                "servers": summary,
                "ratios": ratios,
            }
        )
    )


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=40_000, help="sends per round (40000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (3)")
    parser.add_argument(
        "--ab", default=None, metavar="DIR", help="also run the hanet source tree in DIR"
    )
    parser.add_argument("--serve-raw", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--record-size", type=int, default=SIZE + 160, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ab is not None:
        args.ab = Path(args.ab).resolve()
    return args


if __name__ == "__main__":
    arguments = _parse()
    if arguments.serve_raw is not None:
        trio.run(_serve_raw, arguments.serve_raw, arguments.record_size)
    else:
        trio.run(main, arguments)
