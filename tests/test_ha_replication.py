"""The HA protocol end to end in virtual time: master and slave over memory streams."""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
import trio.testing
from ha_support import FILE, HA_HEADER, Link, commit_log_bytes, open_store, put, read_frame

from hanet.ha import BrokerConfig, BrokerRole, HAMaster, HASlave
from hanet.store import CommitLogStore, Message, PutStatus, StoreConfig, StoreRole
from hanet.testing import receive_exactly, wait_until

REPORT = struct.Struct(">q")


CONFIG = BrokerConfig(mapped_file_size_commit_log=FILE)


async def test_new_slave_syncs_from_the_last_file_and_follows(
    autojump_clock: trio.testing.MockClock,
    master_store: CommitLogStore,
    slave_store: CommitLogStore,
) -> None:
    put(master_store, 200, queues=2)  # several files
    assert master_store.max_offset > 3 * FILE
    master = HAMaster(master_store, CONFIG)
    async with trio.open_nursery() as nursery:
        link = Link(nursery, master)
        await nursery.start(HASlave(slave_store, CONFIG, connector=link).run)
        last_file = master_store.max_offset - master_store.max_offset % FILE
        await wait_until(lambda: slave_store.max_offset == master_store.max_offset, seconds=60)
        assert slave_store.min_offset == last_file
        put(master_store, 300, queues=2)
        await wait_until(lambda: slave_store.max_offset == master_store.max_offset, seconds=60)
        assert commit_log_bytes(slave_store) == commit_log_bytes(master_store, last_file)
        assert slave_store.dispatch_error is None
        status = master.status()
        assert status.slaves[0].ack_offset == master_store.max_offset
        nursery.cancel_scope.cancel()
    assert link.connects == 1


async def test_full_sync_and_resume_after_restart(
    autojump_clock: trio.testing.MockClock, tmp_path: Path, master_store: CommitLogStore
) -> None:
    put(master_store, 150, queues=2)
    config = BrokerConfig(mapped_file_size_commit_log=FILE, full_sync=True)
    master = HAMaster(master_store, config)
    slave_store = open_store(tmp_path / "s", StoreRole.SLAVE)
    async with trio.open_nursery() as nursery:
        await nursery.start(HASlave(slave_store, config, connector=Link(nursery, master)).run)
        await wait_until(lambda: slave_store.max_offset == master_store.max_offset, seconds=60)
        nursery.cancel_scope.cancel()
    slave_store.close()
    assert slave_store.min_offset == 0
    put(master_store, 150, queues=2)
    slave_store = open_store(tmp_path / "s", StoreRole.SLAVE)
    resumed_from = slave_store.max_offset
    async with trio.open_nursery() as nursery:
        link = Link(nursery, master)
        await nursery.start(HASlave(slave_store, config, connector=link).run)
        await wait_until(lambda: slave_store.max_offset == master_store.max_offset, seconds=60)
        assert master.status().slaves[0].request_offset == resumed_from
        nursery.cancel_scope.cancel()
    assert commit_log_bytes(slave_store) == commit_log_bytes(master_store)
    slave_store.close()


RawMaster = tuple[HAMaster, trio.abc.Stream]


@pytest.fixture
async def raw_master(master_store: CommitLogStore) -> AsyncIterator[RawMaster]:
    master = HAMaster(master_store, CONFIG)
    async with trio.open_nursery() as nursery:
        peer, master_end = trio.testing.memory_stream_pair()
        nursery.start_soon(master.handle_stream, master_end)
        yield master, peer
        nursery.cancel_scope.cancel()


async def test_master_waits_for_a_report_then_sends_heartbeats_every_5_s(
    autojump_clock: trio.testing.MockClock, master_store: CommitLogStore, raw_master: RawMaster
) -> None:
    _, peer = raw_master
    end = put(master_store, 10, queues=2)
    with trio.move_on_after(15):
        await peer.receive_some(1)
        pytest.fail("the master must send nothing before the first report")
    await peer.send_all(REPORT.pack(0))
    offset, body = await read_frame(peer)
    assert (offset, len(body)) == (0, end)
    start = trio.current_time()
    await peer.send_all(REPORT.pack(end))
    times = []
    for _ in range(3):
        assert await read_frame(peer) == (end, b"")
        times.append(trio.current_time() - start)
        await peer.send_all(REPORT.pack(end))
    assert [round(t) for t in times] == [5, 10, 15]


async def test_several_reports_in_one_read_use_the_last(
    autojump_clock: trio.testing.MockClock, master_store: CommitLogStore, raw_master: RawMaster
) -> None:
    _, peer = raw_master
    put(master_store, 300, queues=2)
    # a record boundary in the middle, from the consume queue
    target = master_store.consume_queue_entry("T", 0, 40)
    assert target is not None
    await peer.send_all(REPORT.pack(0) + REPORT.pack(5000) + REPORT.pack(target[0]))
    offset, _ = await read_frame(peer)
    assert offset == target[0]


async def test_a_100_kib_message_goes_out_in_32_kib_frames(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    store = CommitLogStore.open(tmp_path / "m", StoreConfig(mapped_file_size=1 << 20))
    try:
        master = HAMaster(store, BrokerConfig())
        async with trio.open_nursery() as nursery:
            peer, master_end = trio.testing.memory_stream_pair()
            nursery.start_soon(master.handle_stream, master_end)
            await peer.send_all(REPORT.pack(0))
            await trio.sleep(1)
            start = store.max_offset
            store.put(Message(topic="Big", body=b"x" * 102400))
            sizes: list[int] = []
            while sum(sizes) < store.max_offset - start:
                _, body = await read_frame(peer)
                sizes.append(len(body))
            assert sizes[:3] == [32768, 32768, 32768] and len(sizes) == 4
            nursery.cancel_scope.cancel()
    finally:
        store.close()


async def test_housekeeping_closes_a_silent_slave_at_20_s(
    autojump_clock: trio.testing.MockClock, master_store: CommitLogStore, raw_master: RawMaster
) -> None:
    master, peer = raw_master
    start = trio.current_time()
    with pytest.raises(EOFError):
        while True:
            await read_frame(peer)
    assert 20 <= trio.current_time() - start < 21
    assert "housekeeping" in master.status().closed[0].state


@pytest.mark.parametrize(("request_offset", "reason"), [(10**9, "outside the master's")])
async def test_out_of_range_request_is_closed_and_shown(
    autojump_clock: trio.testing.MockClock,
    master_store: CommitLogStore,
    raw_master: RawMaster,
    request_offset: int,
    reason: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    master, peer = raw_master
    put(master_store, 200, queues=2)
    # 10**9 lies beyond the data (7, inside the first record, is served: see
    # test_ha_master_integrity.py)
    await peer.send_all(REPORT.pack(request_offset))
    with pytest.raises(EOFError):
        await read_frame(peer)
    assert reason in master.status().closed[0].state
    assert reason in caplog.text


async def test_report_beyond_max_closes(
    autojump_clock: trio.testing.MockClock, master_store: CommitLogStore, raw_master: RawMaster
) -> None:
    master, peer = raw_master
    end = put(master_store, 5, queues=2)
    await peer.send_all(REPORT.pack(end))
    await peer.send_all(REPORT.pack(end + 1))
    with pytest.raises(EOFError):
        while True:
            await read_frame(peer)
    assert "beyond the master's max offset" in master.status().closed[0].state


class FakeMaster:
    """Plays RocketMQ's master against our slave over a memory stream."""

    def __init__(self, nursery: trio.Nursery) -> None:
        self.nursery = nursery
        self.peers: list[trio.abc.Stream] = []
        self.connect_times: list[float] = []
        self.arrived = trio.Event()

    async def __call__(self) -> trio.abc.Stream:
        slave_end, master_end = trio.testing.memory_stream_pair()
        self.peers.append(master_end)
        self.connect_times.append(trio.current_time())
        self.arrived.set()
        self.arrived = trio.Event()
        return slave_end


async def test_slave_reports_verifies_and_reconnects_after_5_s(
    autojump_clock: trio.testing.MockClock,
    slave_store: CommitLogStore,
    master_store: CommitLogStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    end = put(master_store, 3, queues=2)
    data = master_store.read(0, end)
    async with trio.open_nursery() as nursery:
        fake = FakeMaster(nursery)
        await nursery.start(HASlave(slave_store, CONFIG, connector=fake).run)
        await wait_until(lambda: fake.peers, seconds=60)
        peer = fake.peers[0]
        assert REPORT.unpack(await receive_exactly(peer, 8)) == (0,)
        # an empty slave accepts a heartbeat at any offset, then data at its start
        await peer.send_all(HA_HEADER.pack(0, 0))
        await peer.send_all(HA_HEADER.pack(0, len(data)) + data)
        assert REPORT.unpack(await receive_exactly(peer, 8)) == (end,)
        # idle: a report every 5 s
        t0 = trio.current_time()
        assert REPORT.unpack(await receive_exactly(peer, 8)) == (end,)
        assert round(trio.current_time() - t0) == 5
        # a heartbeat with a wrong offset: the slave closes and reconnects 5 s later
        await peer.send_all(HA_HEADER.pack(end + 100, 0))
        await wait_until(lambda: len(fake.peers) == 2, seconds=60)
        assert "master pushed offset not equal the max phy offset in slave" in caplog.text
        assert f"SLAVE: {end} MASTER: {end + 100}" in caplog.text
        gap = fake.connect_times[1] - fake.connect_times[0]
        assert gap >= 5
        assert REPORT.unpack(await receive_exactly(fake.peers[1], 8)) == (end,)
        # silence from the master: closed after 20 s, reconnect 5 s later
        t1 = fake.connect_times[1]
        await wait_until(lambda: len(fake.peers) == 3, seconds=60)
        assert round(fake.connect_times[2] - t1) == 25
        nursery.cancel_scope.cancel()
    assert slave_store.max_offset == end


async def test_sync_put_statuses(
    autojump_clock: trio.testing.MockClock,
    master_store: CommitLogStore,
    slave_store: CommitLogStore,
) -> None:
    config = BrokerConfig(broker_role=BrokerRole.SYNC_MASTER, mapped_file_size_commit_log=FILE)
    master = HAMaster(master_store, config)
    end = put(master_store, 1, queues=2)
    assert await master.wait_for_replicas(end) is PutStatus.SLAVE_NOT_AVAILABLE
    async with trio.open_nursery() as nursery:
        await nursery.start(HASlave(slave_store, config, connector=Link(nursery, master)).run)
        await wait_until(
            lambda: master.status().slaves and master.status().slaves[0].ack_offset >= 0, seconds=60
        )
        end = put(master_store, 1, queues=2)
        assert await master.wait_for_replicas(end) is PutStatus.PUT_OK
        # a raw peer that never acks: FLUSH_SLAVE_TIMEOUT after 3 s
        nursery.cancel_scope.cancel()


async def test_sync_put_times_out_when_the_slave_does_not_ack(
    autojump_clock: trio.testing.MockClock, master_store: CommitLogStore, raw_master: RawMaster
) -> None:
    master, peer = raw_master
    master.config = BrokerConfig(
        broker_role=BrokerRole.SYNC_MASTER, mapped_file_size_commit_log=FILE
    )
    await peer.send_all(REPORT.pack(0))
    await trio.sleep(0.1)
    end = put(master_store, 1, queues=2)
    start = trio.current_time()
    assert await master.wait_for_replicas(end) is PutStatus.FLUSH_SLAVE_TIMEOUT
    assert round(trio.current_time() - start, 1) == 3.0


@pytest.mark.parametrize(("isr", "expected"), [(2, PutStatus.PUT_OK), (3, PutStatus.PUT_OK)])
async def test_two_slaves_in_sync_replicas(
    autojump_clock: trio.testing.MockClock,
    tmp_path: Path,
    master_store: CommitLogStore,
    isr: int,
    expected: PutStatus,
) -> None:
    config = BrokerConfig(mapped_file_size_commit_log=FILE, in_sync_replicas=isr)
    master = HAMaster(master_store, config)
    stores = [open_store(tmp_path / f"s{i}", StoreRole.SLAVE) for i in range(2)]
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(HASlave(stores[0], config, connector=Link(nursery, master)).run)
            await wait_until(
                lambda: [s.ack_offset >= 0 for s in master.status().slaves] == [True], seconds=60
            )
            end = put(master_store, 1, queues=2)
            status = await master.wait_for_replicas(end)
            assert status is (PutStatus.PUT_OK if isr == 2 else PutStatus.SLAVE_NOT_AVAILABLE)
            await nursery.start(HASlave(stores[1], config, connector=Link(nursery, master)).run)
            await wait_until(
                lambda: [s.ack_offset >= 0 for s in master.status().slaves] == [True, True],
                seconds=60,
            )
            end = put(master_store, 1, queues=2)
            assert await master.wait_for_replicas(end) is expected
            await wait_until(
                lambda: all(s.max_offset == master_store.max_offset for s in stores), seconds=60
            )
            nursery.cancel_scope.cancel()
        assert commit_log_bytes(stores[0]) == commit_log_bytes(stores[1])
    finally:
        for s in stores:
            s.close()
