"""A master broker: a store, an HA port for slaves, a broker port for producers and consumers.

Run::

    python examples/master.py --store /tmp/hanet-master
    python examples/slave.py --store /tmp/hanet-slave          # in another terminal
    hanet put --broker 127.0.0.1:10911 --topic TopicTest --size 1024 --count 10000

``--sync`` makes it a SYNC_MASTER: a put is answered once a slave has acknowledged it. Ctrl-C
stops it cleanly (the store is flushed and closed).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import trio

from hanet.boot import run_until_stopped
from hanet.broker import Broker, BrokerAddresses
from hanet.client import BrokerClient
from hanet.ha import BrokerConfig, BrokerRole


async def main(args: argparse.Namespace) -> None:
    config = BrokerConfig(
        broker_role=BrokerRole.SYNC_MASTER if args.sync else BrokerRole.ASYNC_MASTER,
        store_path_root_dir=Path(args.store),
        listen_port=args.port,  # producers and consumers (hanet.client, hanet put/pull)
        ha_listen_port=args.ha_port,  # slaves
        mapped_file_size_commit_log=64 * 1024 * 1024,
    )
    broker = Broker(config)
    async with trio.open_nursery() as nursery:
        addresses: BrokerAddresses = await nursery.start(broker.run)
        print(f"{config.broker_role.value}: broker port {addresses.broker}, HA port {addresses.ha}")

        # A producer can live in the same process: it talks to the broker port like any other.
        assert addresses.broker is not None
        async with BrokerClient.connect(*addresses.broker) as client:
            reply = await client.put("TopicTest", b"hello from examples/master.py", tags="hello")
            print(f"put: {reply.status.value} at offset {reply.wrote_offset}, id {reply.msg_id}")

        while True:  # a status line every few seconds until Ctrl-C
            await trio.sleep(args.every)
            status = broker.status()
            slaves = ", ".join(
                f"{s.address} acked {s.ack_offset} (lag {s.lag_bytes} B)" for s in status.slaves
            )
            print(f"max offset {status.max_offset}; slaves: {slaves or 'none'}", flush=True)


async def until_stopped(args: argparse.Namespace) -> None:
    """:func:`main` until Ctrl-C or SIGTERM, taken as a cancellation (see run_until_stopped)."""
    await run_until_stopped(main, args)
    print("stopped", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Run a hanet master broker.")
    parser.add_argument("--store", default="/tmp/hanet-master", help="store directory")
    parser.add_argument("--port", type=int, default=10911, help="broker port (10911)")
    parser.add_argument("--ha-port", type=int, default=10912, help="HA port (10912)")
    parser.add_argument("--sync", action="store_true", help="SYNC_MASTER instead of ASYNC")
    parser.add_argument("--every", type=float, default=5.0, help="seconds between status lines")
    trio.run(until_stopped, parser.parse_args())
