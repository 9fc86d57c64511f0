"""Frame decoding: LengthFieldBasedFrameDecoder in a pipeline vs Twisted's Int32StringReceiver.

Usage::

    python bench/decode.py [--mib 64] [--repeat 3]

The same bytes (4-byte big-endian length + payload, 64-byte and 1 KiB payloads) are fed in
64 KiB reads to (a) an EmbeddedChannel with ``LengthFieldBasedFrameDecoder(..., 0, 4, 0, 4)``
and one consuming handler, and (b) Twisted's ``Int32StringReceiver`` with a counting
``stringReceived``. Prints a table, then as the last line one JSON object.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from hanet import ChannelInboundHandler, HandlerContext
from hanet.handlers import LengthFieldBasedFrameDecoder
from hanet.testing import EmbeddedChannel

READ = 64 * 1024


def make_reads(payload: int, total: int) -> tuple[list[bytes], int]:
    frame = len(b"x" * payload).to_bytes(4, "big") + b"x" * payload
    count = total // len(frame)
    stream = frame * count
    return [stream[i : i + READ] for i in range(0, len(stream), READ)], count


class Count(ChannelInboundHandler):
    def __init__(self) -> None:
        self.frames = 0

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        self.frames += 1


def run_hanet(reads: list[bytes], payload: int) -> tuple[float, int]:
    counter = Count()
    ch = EmbeddedChannel(LengthFieldBasedFrameDecoder(payload + 4, 0, 4, 0, 4), counter)
    start = time.perf_counter()
    for data in reads:
        ch.write_inbound(data)
    return time.perf_counter() - start, counter.frames


def run_twisted(reads: list[bytes], payload: int) -> tuple[float, int]:
    from twisted.protocols.basic import Int32StringReceiver

    class Receiver(Int32StringReceiver):  # type: ignore[misc,unused-ignore]
        MAX_LENGTH = payload + 4
        frames = 0

        def stringReceived(self, string: bytes) -> None:
            self.frames += 1

    receiver = Receiver()
    start = time.perf_counter()
    for data in reads:
        receiver.dataReceived(data)  # type: ignore[no-untyped-call,unused-ignore]
    return time.perf_counter() - start, receiver.frames


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=64, help="bytes per run, in MiB")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    figures: dict[str, float] = {}
    print(f"{'payload':>8s} {'hanet frames/s':>15s} {'twisted frames/s':>17s} {'ratio':>6s}")
    for payload in (64, 1024):
        reads, count = make_reads(payload, args.mib << 20)
        best = {"hanet": 0.0, "twisted": 0.0}
        for _ in range(args.repeat):
            for name, fn in (("hanet", run_hanet), ("twisted", run_twisted)):
                seconds, frames = fn(reads, payload)
                assert frames == count, (name, frames, count)
                best[name] = max(best[name], frames / seconds)
        ratio = best["hanet"] / best["twisted"]
        print(f"{payload:8d} {best['hanet']:15,.0f} {best['twisted']:17,.0f} {ratio:6.2f}")
        figures[f"hanet_{payload}_fps"] = round(best["hanet"])
        figures[f"twisted_{payload}_fps"] = round(best["twisted"])
        figures[f"ratio_{payload}"] = round(ratio, 3)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
