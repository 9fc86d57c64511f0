"""The cost of reporting dropped write futures: writes through a pipeline, with and without
the finalizer.

Usage::

    python bench/write_path.py [--writes 200000] [--repeat 7]

An EmbeddedChannel with three pass-through outbound handlers; each write goes from the tail to
the head's outbound buffer, a flush every 64 writes. Run (a) with the default future,
``WriteFuture``, whose ``__del__`` reports a future collected while pending, and (b) with a
``ChannelFuture``, which has no finalizer (the pipeline records the holding context in both;
both are made by the loop and passed in). The best of ``--repeat`` runs each, interleaved, in
CPU time (steadier than wall time on a shared machine); prints ns per write, the difference
and the ratio, then as the last line one JSON object.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

from hanet import ChannelFuture, ChannelOutboundHandler, HandlerContext, WriteFuture
from hanet.testing import EmbeddedChannel

FLUSH_EVERY = 64


class Pass(ChannelOutboundHandler):
    def write(self, ctx: HandlerContext, msg: Any, future: WriteFuture) -> None:
        ctx.write(msg, future)


def run(writes: int, make_future: Callable[[], ChannelFuture]) -> float:
    """Seconds per write."""
    ch = EmbeddedChannel(Pass(), Pass(), Pass())
    pipeline = ch.pipeline
    sent = ch.outbound_messages
    msg = b"x" * 64
    start = time.process_time()
    for i in range(writes):
        pipeline.write(msg, make_future())  # type: ignore[arg-type]
        if i % FLUSH_EVERY == FLUSH_EVERY - 1:
            pipeline.flush()
            sent.clear()
    return (time.process_time() - start) / writes


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--writes", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    best = {"write_future": float("inf"), "plain_future": float("inf")}
    for _ in range(args.repeat):
        best["write_future"] = min(best["write_future"], run(args.writes, WriteFuture))
        best["plain_future"] = min(best["plain_future"], run(args.writes, ChannelFuture))
    with_ns = best["write_future"] * 1e9
    without_ns = best["plain_future"] * 1e9
    print(f"{'future':>14s} {'ns/write':>9s}")
    print(f"{'WriteFuture':>14s} {with_ns:9.0f}")
    print(f"{'ChannelFuture':>14s} {without_ns:9.0f}")
    print(f"finalizer cost: {with_ns - without_ns:.0f} ns/write ({with_ns / without_ns:.3f} x)")
    print(
        json.dumps(
            {
                "write_future_ns": round(with_ns),
                "plain_future_ns": round(without_ns),
                "ratio": round(with_ns / without_ns, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
