"""Benchmark bulk transfer over loopback TCP: hanet channels against raw trio and iperf3.

Run: ``.venv/bin/python bench/bulk.py [--size-mib 1024] [--rounds 3]``

The payload is the HA protocol's transfer frame: a 12-byte header (8-byte offset, 4-byte size)
and a 32 KiB body, ``--size-mib`` MiB of them per transfer. The sender and the receiver are two
processes (each with one ``trio.run``), driven over pipes by this one; each transfer is timed
by the receiver, from the accepted connection to the last byte. In alternating rounds:

- raw trio: one ``send_all`` per frame; the receiver calls ``receive_some(frame size)`` until it
  has every byte (what a hand-written per-frame loop does);
- hanet: the sender writes frames while ``channel.is_writable``, flushes, and waits for
  writability (Netty's idiom); the outbound buffer coalesces them into large ``send_all`` calls.
  The receiver's pipeline is ``LengthFieldBasedFrameDecoder(12 + 32768, 8, 4)`` and a handler
  that counts whole frames;
- iperf3 (``iperf3 -s -1`` and ``iperf3 -c ... -n``), when it is installed; skipped otherwise.

Reported: MB/s of each (median of the rounds) and the ratios hanet/raw (goal >= 1.5) and
hanet/iperf3 (goal >= 0.75). A table for humans, then the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing
import multiprocessing.connection
import shutil
import statistics
import struct
import subprocess
import sys
import time
from typing import Any

import trio

from hanet import (
    ChannelConfig,
    ChannelInboundHandler,
    HandlerContext,
    Server,
    StreamChannel,
    WaterMarks,
    connect,
    serve,
)

HOST = "127.0.0.1"
BODY = 32 * 1024
HEADER = struct.Struct(">qi")
FRAME = HEADER.size + BODY
MIB = 1024 * 1024

# The sender keeps up to 1 MiB queued: enough for the writer to coalesce 256 KiB per send_all
# while the producer refills behind it. The receiver reads 256 KiB at a time (the default).
SENDER_CONFIG = ChannelConfig(water_marks=WaterMarks(low=512 * 1024, high=1024 * 1024))
RECEIVER_CONFIG = ChannelConfig()


def frames_for(total: int) -> int:
    return max(total // FRAME, 1)


def make_frame(offset: int, body: bytes) -> bytes:
    return HEADER.pack(offset, len(body)) + body


# -- receiver process ------------------------------------------------------------------------


class CountFrames(ChannelInboundHandler):
    def __init__(self, expected: int, done: trio.Event) -> None:
        self.expected = expected
        self.frames = 0
        self.done = done

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        if len(msg) != FRAME:
            raise ValueError(f"bad frame of {len(msg)} bytes")
        self.frames += 1
        if self.frames == self.expected:
            self.done.set()


async def receive_raw(listener: trio.SocketListener, frames: int) -> float:
    stream = await listener.accept()
    start = time.perf_counter()
    remaining = frames * FRAME
    async with stream:
        while remaining:
            data = await stream.receive_some(min(FRAME, remaining))
            if not data:
                raise RuntimeError("EOF before the last frame")
            remaining -= len(data)
    return time.perf_counter() - start


async def receive_hanet(
    conn: multiprocessing.connection.Connection, frames: int
) -> tuple[float, int]:
    from hanet.handlers import LengthFieldBasedFrameDecoder

    done = trio.Event()
    counter = CountFrames(frames, done)
    started: list[float] = []

    def init(channel: StreamChannel) -> None:
        started.append(time.perf_counter())
        channel.pipeline.add_last(LengthFieldBasedFrameDecoder(HEADER.size + BODY, 8, 4))
        channel.pipeline.add_last(counter)

    async with trio.open_nursery() as nursery:
        server: Server = await nursery.start(
            functools.partial(serve, init, 0, host=HOST, config=RECEIVER_CONFIG)
        )
        conn.send(server.port)
        await done.wait()
        elapsed = time.perf_counter() - started[0]
        nursery.cancel_scope.cancel()
    return elapsed, counter.frames


async def receiver_loop(conn: multiprocessing.connection.Connection) -> None:
    while True:
        command = await trio.to_thread.run_sync(conn.recv)
        if command[0] == "stop":
            return
        _, mode, frames = command
        if mode == "raw":
            listener = (await trio.open_tcp_listeners(0, host=HOST))[0]
            conn.send(listener.socket.getsockname()[1])
            async with listener:
                elapsed = await receive_raw(listener, frames)
            conn.send((elapsed, frames))
        else:
            conn.send(await receive_hanet(conn, frames))


def receiver_main(conn: multiprocessing.connection.Connection) -> None:
    trio.run(receiver_loop, conn)


# -- sender process --------------------------------------------------------------------------


async def send_raw(port: int, frames: int, body: bytes) -> None:
    stream = await trio.open_tcp_stream(HOST, port)
    async with stream:
        for i in range(frames):
            await stream.send_all(make_frame(i * BODY, body))


async def send_hanet(port: int, frames: int, body: bytes) -> None:
    async with trio.open_nursery() as nursery:
        channel: StreamChannel = await nursery.start(
            functools.partial(connect, HOST, port, lambda ch: None, config=SENDER_CONFIG)
        )
        pipeline = channel.pipeline
        i = 0
        last = None
        pack = HEADER.pack
        while i < frames:
            await channel.wait_writable()
            while channel.is_writable and i < frames:
                # Header and body as two messages, as LengthFieldPrepender emits them: the
                # gathering write sends both without copying the body.
                pipeline.write(pack(i * BODY, BODY))
                last = pipeline.write(body)
                i += 1
            pipeline.flush()
        assert last is not None
        await last  # every byte handed to the kernel before closing
        await channel.close()


async def sender_loop(conn: multiprocessing.connection.Connection) -> None:
    body = bytes(range(256)) * (BODY // 256)
    while True:
        command = await trio.to_thread.run_sync(conn.recv)
        if command[0] == "stop":
            return
        _, mode, port, frames = command
        if mode == "raw":
            await send_raw(port, frames, body)
        else:
            await send_hanet(port, frames, body)
        conn.send("sent")


def sender_main(conn: multiprocessing.connection.Connection) -> None:
    trio.run(sender_loop, conn)


# -- iperf3 ----------------------------------------------------------------------------------


def run_iperf3(total: int, port: int = 5299) -> float | None:
    """Bytes per second iperf3 moved over loopback, or None if iperf3 is not installed."""
    exe = shutil.which("iperf3")
    if exe is None:
        return None
    server = subprocess.Popen(
        [exe, "-s", "-1", "-p", str(port), "-B", HOST],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(50):  # wait for the server to listen
            probe = subprocess.run(
                [exe, "-c", HOST, "-p", str(port), "-n", str(total), "-J"],
                capture_output=True,
                text=True,
                check=False,
            )
            if probe.returncode == 0:
                received = json.loads(probe.stdout).get("end", {}).get("sum_received")
                if received:
                    return float(received["bits_per_second"]) / 8
            time.sleep(0.1)
        return None
    finally:
        server.kill()
        server.wait()


# -- orchestration -------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mib", type=int, default=1024, help="MiB per transfer (1024)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (3)")
    parser.add_argument("--no-iperf3", action="store_true", help="skip iperf3 even if present")
    args = parser.parse_args()
    total = args.size_mib * MIB
    frames = frames_for(total)
    nbytes = frames * FRAME

    rx_parent, rx_child = multiprocessing.Pipe()
    tx_parent, tx_child = multiprocessing.Pipe()
    receiver = multiprocessing.Process(target=receiver_main, args=(rx_child,), daemon=True)
    sender = multiprocessing.Process(target=sender_main, args=(tx_child,), daemon=True)
    receiver.start()
    sender.start()

    def transfer(mode: str) -> float:
        rx_parent.send(("listen", mode, frames))
        port = rx_parent.recv()
        tx_parent.send(("send", mode, port, frames))
        elapsed, got = rx_parent.recv()
        assert tx_parent.recv() == "sent"
        assert got == frames, (mode, got, frames)
        return float(nbytes / elapsed)

    rates: dict[str, list[float]] = {"raw": [], "hanet": [], "iperf3": []}
    try:
        for _ in range(args.rounds):
            rates["raw"].append(transfer("raw"))
            rates["hanet"].append(transfer("hanet"))
            if not args.no_iperf3:
                rate = run_iperf3(nbytes)
                if rate is not None:
                    rates["iperf3"].append(rate)
    finally:
        rx_parent.send(("stop",))
        tx_parent.send(("stop",))
        receiver.join(10)
        sender.join(10)

    med = {k: statistics.median(v) / 1e6 for k, v in rates.items() if v}
    print(f"{frames:,} frames of 12 + {BODY} bytes ({nbytes / MIB:,.0f} MiB), {args.rounds} rounds")
    print(f"{'':34}{'MB/s (median)':>14}{'rounds':>30}")
    labels = {
        "raw": "raw trio, send_all per frame",
        "hanet": "hanet channels + frame decoder",
        "iperf3": "iperf3",
    }
    for key, label in labels.items():
        if key in med:
            each = " ".join(f"{r / 1e6:,.0f}" for r in rates[key])
            print(f"{label:34}{med[key]:>14,.0f}{each:>30}")
        else:
            print(f"{label:34}{'skipped (not installed)':>14}")
    ratio_raw = med["hanet"] / med["raw"]
    ratio_iperf = med["hanet"] / med["iperf3"] if "iperf3" in med else None
    print(f"hanet / raw trio: {ratio_raw:.2f}  (goal >= 1.5)")
    if ratio_iperf is not None:
        print(f"hanet / iperf3:   {ratio_iperf:.2f}  (goal >= 0.75)")
    result = {
        "bench": "bulk",
        "bytes": nbytes,
        "frames": frames,
        "rounds": args.rounds,
        "raw_mb_s": round(med["raw"], 1),
        "hanet_mb_s": round(med["hanet"], 1),
        "iperf3_mb_s": round(med["iperf3"], 1) if "iperf3" in med else None,
        "hanet_over_raw": round(ratio_raw, 3),
        "hanet_over_iperf3": round(ratio_iperf, 3) if ratio_iperf is not None else None,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
