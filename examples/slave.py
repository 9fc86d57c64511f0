"""A slave broker: replicates a master's commit log byte for byte, reconnecting forever.

Run (with ``examples/master.py`` running)::

    python examples/slave.py --store /tmp/hanet-slave --master 127.0.0.1:10912

It serves PULL and STATUS on ``--port`` (puts are answered SERVICE_NOT_AVAILABLE), so
``hanet pull --broker 127.0.0.1:10921 --topic TopicTest --queue 0`` reads the replica.
Ctrl-C stops it cleanly; started again, it resumes from where its store ends.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import trio

from hanet.boot import run_until_stopped
from hanet.broker import Broker
from hanet.ha import BrokerConfig, BrokerRole


async def main(args: argparse.Namespace) -> None:
    config = BrokerConfig(
        broker_role=BrokerRole.SLAVE,
        store_path_root_dir=Path(args.store),
        ha_master_address=args.master,  # the master's HA port
        listen_port=args.port,
        mapped_file_size_commit_log=64 * 1024 * 1024,  # must match the master's
        reconnect_interval=args.reconnect,
    )
    broker = Broker(config)
    async with trio.open_nursery() as nursery:
        addresses = await nursery.start(broker.run)
        print(f"SLAVE of {args.master}: broker port {addresses.broker}")
        while True:
            await trio.sleep(args.every)
            status = broker.status()
            link = status.master
            state = "connected" if link is not None and link.connected else "reconnecting"
            print(f"{state}; max offset {status.max_offset}", flush=True)


async def until_stopped(args: argparse.Namespace) -> None:
    """:func:`main` until Ctrl-C or SIGTERM, taken as a cancellation (see run_until_stopped)."""
    await run_until_stopped(main, args)
    print("stopped", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Run a hanet slave broker.")
    parser.add_argument("--store", default="/tmp/hanet-slave", help="store directory")
    parser.add_argument("--master", default="127.0.0.1:10912", help="the master's HA address")
    parser.add_argument("--port", type=int, default=10921, help="broker port (10921)")
    parser.add_argument("--reconnect", type=float, default=5.0, help="reconnect wait (5 s)")
    parser.add_argument("--every", type=float, default=5.0, help="seconds between status lines")
    trio.run(until_stopped, parser.parse_args())
