"""A handler of one's own in the slave's HA pipeline: transfer metrics.

Each slave connection's pipeline is built from handlers (see :class:`hanet.ha.HASlave`)::

    IdleStateHandler -> transfer frame decoder -> TransferFrameDecoder -> OffsetVerifier
      -> CommitLogReplayHandler -> OffsetReporter -> [the handlers you add]

Handlers added with ``slave_handlers`` (a factory called once per connection, since a
reconnect builds a new pipeline) see every :class:`hanet.handlers.ha.TransferFrame` after it was
verified and written to the store. This one counts frames, bytes and heartbeats and prints a
line per second.

Run (with ``examples/master.py`` running)::

    python examples/custom_pipeline.py --store /tmp/hanet-metrics-slave
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import trio

from hanet import ChannelInboundHandler, HandlerContext
from hanet.boot import run_until_stopped
from hanet.broker import Broker
from hanet.ha import BrokerConfig, BrokerRole
from hanet.handlers.ha import TransferFrame


class Metrics:
    """Counters shared by every connection's handler."""

    def __init__(self) -> None:
        self.frames = 0
        self.bytes = 0
        self.heartbeats = 0
        self.connections = 0


class TransferMetrics(ChannelInboundHandler):
    """Counts what the master sends; passes everything on unchanged (sans-IO, never blocks)."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def channel_active(self, ctx: HandlerContext) -> None:
        self.metrics.connections += 1
        ctx.fire_channel_active()

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        if isinstance(msg, TransferFrame):
            if msg.is_heartbeat:
                self.metrics.heartbeats += 1
            else:
                self.metrics.frames += 1
                self.metrics.bytes += len(msg.body)
        ctx.fire_channel_read(msg)


async def main(args: argparse.Namespace) -> None:
    metrics = Metrics()
    config = BrokerConfig(
        broker_role=BrokerRole.SLAVE,
        store_path_root_dir=Path(args.store),
        ha_master_address=args.master,
        mapped_file_size_commit_log=64 * 1024 * 1024,
    )
    broker = Broker(
        config,
        serve_broker_port=False,  # replicate only
        slave_handlers=lambda: [TransferMetrics(metrics)],  # a new handler per connection
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        last = 0
        while True:
            await trio.sleep(1)
            rate = (metrics.bytes - last) / (1024 * 1024)
            last = metrics.bytes
            print(
                f"connections {metrics.connections}  frames {metrics.frames}  "
                f"bytes {metrics.bytes}  ({rate:.1f} MiB/s)  heartbeats {metrics.heartbeats}",
                flush=True,
            )


async def until_stopped(args: argparse.Namespace) -> None:
    """:func:`main` until Ctrl-C or SIGTERM, taken as a cancellation (see run_until_stopped)."""
    await run_until_stopped(main, args)
    print("stopped", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="A slave with a metrics handler of its own.")
    parser.add_argument("--store", default="/tmp/hanet-metrics-slave", help="store directory")
    parser.add_argument("--master", default="127.0.0.1:10912", help="the master's HA address")
    trio.run(until_stopped, parser.parse_args())
