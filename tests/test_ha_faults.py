"""Replication through injected faults: a black-holed master and a flipped header byte in
virtual time; a partition during SYNC puts over loopback TCP through a FaultProxy."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import ha_support
import trio
import trio.testing
from broker_support import config
from ha_support import open_store

from hanet.broker import Broker, BrokerAddresses
from hanet.client import BrokerClient, PutStatus
from hanet.ha import BrokerConfig, BrokerRole, HAMaster, HASlave
from hanet.store import (
    CommitLogStore,
    StoreRole,
    compare_commit_logs,
)
from hanet.testing import FaultProxy, Faults, relay, wait_until

FILE = 64 * 1024


class FaultyLink:
    """A slave connector: each connection is a relay to the master through ``to_slave``."""

    def __init__(self, nursery: trio.Nursery, master: HAMaster) -> None:
        self.nursery = nursery
        self.master = master
        self.to_slave = Faults()
        self.to_master = Faults()
        self.connects = 0
        self.scope = trio.CancelScope()

    async def __call__(self) -> trio.abc.Stream:
        self.connects += 1
        slave_end, near = trio.testing.memory_stream_pair()
        far, master_end = trio.testing.memory_stream_pair()
        self.scope = trio.CancelScope()
        self.nursery.start_soon(
            partial(relay, near, far, self.to_master, self.to_slave, cancel_scope=self.scope)
        )
        self.nursery.start_soon(self.master.handle_stream, master_end)
        return slave_end

    def cut(self) -> None:
        """Close the current connection (both ends see EOF)."""
        self.scope.cancel()


def put(store: CommitLogStore, n: int) -> None:
    ha_support.put(store, n, 300, queues=2)


@attrs.frozen
class Replication:
    master_store: CommitLogStore
    slave_store: CommitLogStore
    link: FaultyLink
    slave: HASlave

    async def caught_up(self) -> None:
        master, slave = self.master_store, self.slave_store
        await wait_until(lambda: slave.max_offset == master.max_offset, seconds=120)


@asynccontextmanager
async def replicating(
    tmp_path: Path, records: int, first_flip: int | None = None, **settings: Any
) -> AsyncIterator[Replication]:
    """A master's store of ``records`` messages replicated to a slave's through a
    :class:`FaultyLink` (``first_flip``: a byte flipped on the way to the slave, from the
    start), caught up; when the block ends, the two commit logs are the same."""
    master_store = open_store(tmp_path / "m", size=FILE)
    slave_store = open_store(tmp_path / "s", StoreRole.SLAVE, FILE)
    try:
        put(master_store, records)
        config = BrokerConfig(mapped_file_size_commit_log=FILE, **settings)
        async with trio.open_nursery() as nursery:
            link = FaultyLink(nursery, HAMaster(master_store, config))
            if first_flip is not None:
                link.to_slave.flip(first_flip)
            slave = HASlave(slave_store, config, connector=link)
            nursery.start_soon(slave.run)
            replication = Replication(master_store, slave_store, link, slave)
            await replication.caught_up()
            yield replication
            nursery.cancel_scope.cancel()
    finally:
        master_store.close()
        slave_store.close()
    assert compare_commit_logs(tmp_path / "m", tmp_path / "s").identical


async def test_black_holed_master_is_dropped_after_housekeeping(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with replicating(tmp_path, 20, reconnect_interval=1.0) as replication:
        link, slave = replication.link, replication.slave
        link.to_slave.black_hole = True  # the master's bytes vanish; nothing closes
        silenced = trio.current_time()
        await wait_until(lambda: link.connects == 2, seconds=120)
        waited = trio.current_time() - silenced
        assert 20.0 <= waited <= 20.0 + 5.0 + 1.5  # housekeeping, +heartbeat slack, +reconnect
        assert "nothing received" in (slave.status().last_close_reason or "")
        link.to_slave.black_hole = False
        put(replication.master_store, 5)
        await replication.caught_up()


async def test_flipped_header_byte_in_transit_is_refetched(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with replicating(tmp_path, 50, reconnect_interval=0.5) as replication:
        link = replication.link
        # The next connection's first header gets a flipped byte in its offset field: the
        # slave (not empty, so it knows the offset to expect) refuses it and reconnects.
        link.to_slave.flip(3)
        link.cut()
        await wait_until(lambda: link.connects == 2, seconds=120)
        put(replication.master_store, 150)
        await replication.caught_up()
        assert link.connects >= 3  # the bad header closed the second connection
        assert "not equal" in (replication.slave.status().last_close_reason or "")


def broker_config(root: Path, **changes: Any) -> BrokerConfig:
    fast = config(
        root,
        ha_send_heartbeat_interval=0.2,
        ha_housekeeping_interval=1.5,
        reconnect_interval=0.2,
        slave_timeout=0.5,
    )
    return attrs.evolve(fast, **changes)


async def test_partition_during_sync_puts_then_catch_up(tmp_path: Path) -> None:
    master = Broker(broker_config(tmp_path / "m", broker_role=BrokerRole.SYNC_MASTER))
    async with trio.open_nursery() as nursery:
        addresses: BrokerAddresses = await nursery.start(master.run)
        assert addresses.ha is not None and addresses.broker is not None
        proxy = FaultProxy(addresses.ha)
        proxy_address = await nursery.start(proxy.run)
        slave = Broker(
            broker_config(
                tmp_path / "s",
                broker_role=BrokerRole.SLAVE,
                ha_master_address=f"127.0.0.1:{proxy_address[1]}",
            ),
            serve_broker_port=False,
        )
        await nursery.start(slave.run)
        async with BrokerClient.connect(*addresses.broker) as client:
            statuses: list[PutStatus] = []
            with trio.fail_after(20):
                while (await client.put("T", b"warm-up")).status is not PutStatus.PUT_OK:  # noqa: ASYNC110
                    await trio.sleep(0.05)  # until the slave has connected
                for i in range(20):
                    statuses.append((await client.put("T", b"before %d" % i)).status)
                assert set(statuses) == {PutStatus.PUT_OK}

                proxy.partition()
                during = [(await client.put("T", b"during %d" % i)).status for i in range(3)]
                assert during[0] is PutStatus.FLUSH_SLAVE_TIMEOUT
                # the master's housekeeping drops the silent slave: refused at once after that
                alone = PutStatus.SLAVE_NOT_AVAILABLE
                while (await client.put("T", b"alone")).status is not alone:  # noqa: ASYNC110
                    await trio.sleep(0.1)

                proxy.heal()
                while (await client.put("T", b"after")).status is not PutStatus.PUT_OK:  # noqa: ASYNC110
                    await trio.sleep(0.1)
                status = await client.status()
                max_offset = status.max_offset
                while slave.store.max_offset < max_offset:  # noqa: ASYNC110
                    await trio.sleep(0.05)
        nursery.cancel_scope.cancel()
    assert compare_commit_logs(tmp_path / "m", tmp_path / "s").identical


async def test_flipped_body_byte_in_transit_is_refetched(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    body_byte = 12 + 5000  # a body byte of the first transfer
    settings = {"reconnect_interval": 0.5, "full_sync": True}
    async with replicating(tmp_path, 200, body_byte, **settings) as replication:
        assert replication.link.connects >= 2
        assert "failed validation" in (replication.slave.status().last_close_reason or "")


async def test_an_empty_slave_given_a_corrupt_first_header_starts_over(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    header_offset_byte = 3  # the first header's offset: 0 becomes 0xFF00000000
    settings = {"reconnect_interval": 0.5, "full_sync": True}
    async with replicating(tmp_path, 100, header_offset_byte, **settings) as replication:
        assert replication.link.connects >= 2
