"""The Broker service and hanet.client over loopback TCP, in-process (real sockets, real time)."""

from __future__ import annotations

import logging
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from broker_support import FILE, config, running

from hanet.broker import Broker, BrokerAddresses
from hanet.client import (
    BrokerClient,
    BrokerConnectionError,
    BrokerProtocolError,
    BrokerRequestError,
    BrokerTimeoutError,
    PullStatus,
    PutMessage,
    PutStatus,
)
from hanet.errors import ConfigError
from hanet.ha import BrokerRole
from hanet.protocol import PutRequest, encode_request
from hanet.store import FlushDiskType, StoreLockedError


def client(addresses: BrokerAddresses, **kwargs: Any) -> Any:
    assert addresses.broker is not None
    return BrokerClient.connect(*addresses.broker, **kwargs)


async def wait_until(predicate: Callable[[], Awaitable[bool]], seconds: float = 10) -> None:
    with trio.fail_after(seconds):
        while not await predicate():  # noqa: ASYNC110 - polls another service's state
            await trio.sleep(0.01)


async def test_put_pull_status(tmp_path: Path) -> None:
    async with running(config(tmp_path)) as (broker, addresses), client(addresses) as c:
        reply = await c.put(
            "TopicTest", b"Hello", tags="TagA", keys="k1 k2", properties={"p": "v"}, queue_id=3
        )
        assert reply.ok and reply.stored
        assert (reply.queue_id, reply.queue_offset, reply.wrote_offset) == (3, 0, 0)
        pulled = await c.pull("TopicTest", 3)
        assert pulled.status is PullStatus.FOUND
        assert (pulled.next_offset, pulled.min_offset, pulled.max_offset) == (1, 0, 1)
        (record,) = pulled.messages
        assert record.body == b"Hello"
        assert record.properties == {"TAGS": "TagA", "KEYS": "k1 k2", "p": "v"}
        assert record.msg_id == reply.msg_id
        assert record.size == reply.wrote_size
        assert record.born_address.startswith("127.0.0.1:")
        assert record.store_address == f"127.0.0.1:{addresses.broker[1]}"  # type: ignore[index]
        status = await c.status()
        assert status.role == "ASYNC_MASTER"
        assert status.max_offset == reply.wrote_offset + reply.wrote_size
        assert status.puts == 1
        assert status.slaves == () and status.master is None
        assert status.ha_address == f"127.0.0.1:{addresses.ha[1]}"  # type: ignore[index]
        now = broker.status()  # one snapshot: two calls may differ in uptime
        assert now == attrs.evolve(status, uptime=now.uptime)


async def test_queues_round_robin_per_topic(tmp_path: Path) -> None:
    cfg = config(tmp_path, default_topic_queue_nums=3)
    async with running(cfg) as (_, addresses), client(addresses) as c:
        a = [(await c.put("A", b"x")).queue_id for _ in range(5)]
        b = [(await c.put("B", b"x")).queue_id for _ in range(2)]
    assert a == [0, 1, 2, 0, 1]
    assert b == [0, 1]


async def test_many_concurrent_requests_pipelined_over_one_connection(tmp_path: Path) -> None:
    replies = []
    async with running(config(tmp_path)) as (broker, addresses), client(addresses) as c:

        async def one(i: int) -> None:
            replies.append(await c.put("T", b"%d" % i, queue_id=0))

        async with trio.open_nursery() as nursery:
            for i in range(300):
                nursery.start_soon(one, i)
        batch = await c.put_batch([PutMessage("T", b"b%d" % i, 1) for i in range(50)])
        assert broker.store.max_offset == max(r.wrote_offset + r.wrote_size for r in batch)
    assert all(r.ok for r in replies)
    assert sorted(r.queue_offset for r in replies) == list(range(300))
    assert len({r.wrote_offset for r in replies}) == 300
    assert [r.queue_offset for r in batch] == list(range(50))


async def test_pull_statuses_and_bounds(tmp_path: Path) -> None:
    async with running(config(tmp_path)) as (_, addresses), client(addresses) as c:
        unknown = await c.pull("T", 0)
        assert (unknown.status, unknown.next_offset) == (PullStatus.TOPIC_NOT_EXIST, 0)
        for start in range(0, 1100, 550):
            await c.put_batch([PutMessage("T", b"m%d" % i, 0) for i in range(start, start + 550)])
        empty = await c.pull("T", 1)  # a queue of the topic that holds nothing yet
        assert (empty.status, empty.next_offset) == (PullStatus.NO_MESSAGE_IN_QUEUE, 0)
        most = await c.pull("T", 0, 0, max_messages=5000)
        assert len(most.messages) == 1024 and most.next_offset == 1024
        assert [m.queue_offset for m in most.messages] == list(range(1024))
        rest = await c.pull("T", 0, 1024, max_messages=5000)
        assert len(rest.messages) == 76 and rest.next_offset == 1100
        at_end = await c.pull("T", 0, 1100)
        assert (at_end.status, at_end.next_offset) == (PullStatus.OFFSET_OVERFLOW_ONE, 1100)
        beyond = await c.pull("T", 0, 5000)
        assert (beyond.status, beyond.next_offset) == (PullStatus.OFFSET_OVERFLOW_BADLY, 1100)


async def test_refused_put_keeps_the_connection(tmp_path: Path) -> None:
    async with running(config(tmp_path)) as (_, addresses), client(addresses) as c:
        bad = await c.put("bad topic!", b"x")
        assert bad.status is PutStatus.MESSAGE_ILLEGAL and not bad.stored and bad.detail
        assert (await c.put("good", b"x")).ok


async def raw_exchange(address: tuple[str, int], data: bytes) -> bytes:
    """Send ``data``, return everything read until the broker closes the connection."""
    stream = await trio.open_tcp_stream(*address)
    async with stream:
        await stream.send_all(data)
        received = b""
        with trio.fail_after(5):
            while chunk := await stream.receive_some():
                received += chunk
    return received


@pytest.mark.parametrize(
    ("garbage", "logged"),
    [
        (struct.pack(">I", 5) + b"\x7e\x00\x00\x00\x01", "unknown request opcode"),
        (struct.pack(">I", 3) + b"\x01\x00\x00", "no opcode"),
        (struct.pack(">I", 100_000), "exceeds 1024"),
    ],
)
async def test_malformed_requests_close_only_their_connection(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, garbage: bytes, logged: str
) -> None:
    caplog.set_level(logging.WARNING, "hanet.broker")
    async with running(config(tmp_path), max_frame_length=1024) as (_, addresses):
        assert addresses.broker is not None
        async with client(addresses) as c:
            good = await raw_exchange(addresses.broker, garbage)
            assert good == b""
            assert (await c.put("T", b"still served")).ok
    assert any(logged in r.getMessage() and "closing" in r.getMessage() for r in caplog.records)


async def test_an_answer_is_given_for_each_of_several_requests_in_one_segment(
    tmp_path: Path,
) -> None:
    async with running(config(tmp_path)) as (_, addresses):
        assert addresses.broker is not None
        frames = b"".join(
            struct.pack(">I", len(body)) + body
            for body in (
                bytes(encode_request(PutRequest(i, (PutMessage("T", b"x"),)))) for i in range(5)
            )
        )
        stream = await trio.open_tcp_stream(*addresses.broker)
        async with stream:
            await stream.send_all(frames)
            received = b""
            with trio.fail_after(5):
                while received.count(b"\x81") < 5 or len(received) < 5 * 4:
                    received += await stream.receive_some()
        ids = []
        pos = 0
        while pos < len(received):
            (length,) = struct.unpack_from(">I", received, pos)
            ids.append(struct.unpack_from(">I", received, pos + 5)[0])
            pos += 4 + length
        assert ids == [0, 1, 2, 3, 4]


async def test_sync_master_answers_with_the_slaves_acks(tmp_path: Path) -> None:
    master_cfg = config(tmp_path / "m", broker_role=BrokerRole.SYNC_MASTER, slave_timeout=2.0)
    async with running(master_cfg) as (master, addresses), client(addresses) as c:
        alone = await c.put("T", b"before any slave", queue_id=1)
        assert alone.status is PutStatus.SLAVE_NOT_AVAILABLE and alone.stored
        assert addresses.ha is not None
        slave_cfg = config(
            tmp_path / "s",
            broker_role=BrokerRole.SLAVE,
            ha_master_address=f"127.0.0.1:{addresses.ha[1]}",
            full_sync=True,
        )
        async with running(slave_cfg) as (slave, slave_addresses), client(slave_addresses) as sc:

            async def slave_connected() -> bool:
                return any(s.ack_offset >= 0 for s in (await c.status()).slaves)

            await wait_until(slave_connected)
            replies = await c.put_batch([PutMessage("T", b"%d" % i, 0) for i in range(20)])
            assert {r.status for r in replies} == {PutStatus.PUT_OK}
            assert slave.store.max_offset >= replies[-1].wrote_offset + replies[-1].wrote_size
            link = (await sc.status()).master
            assert link is not None and link.connected and link.connects == 1
            refused = await sc.put("T", b"to a slave")
            assert refused.status is PutStatus.SERVICE_NOT_AVAILABLE and not refused.stored

            async def replayed() -> bool:
                return bool((await sc.status()).max_offset == master.store.max_offset)

            await wait_until(replayed)
            pulled = await sc.pull("T", 0, 0, 100)
            assert [m.body for m in pulled.messages] == [b"%d" % i for i in range(20)]
            (seen,) = (await c.status()).slaves
            assert seen.lag_bytes == 0 and seen.state == "transferring"


async def test_sync_master_times_out_every_waiting_put_together(tmp_path: Path) -> None:
    cfg = config(tmp_path, broker_role=BrokerRole.SYNC_MASTER, slave_timeout=0.3)
    async with running(cfg) as (_, addresses), client(addresses) as c:
        assert addresses.ha is not None
        # A "slave" that reports once and then never acknowledges anything.
        stalled = await trio.open_tcp_stream(*addresses.ha)
        async with stalled:
            await stalled.send_all(struct.pack(">q", 0))

            async def connected() -> bool:
                return any(s.ack_offset >= 0 for s in (await c.status()).slaves)

            await wait_until(connected)
            statuses = []

            async def one() -> None:
                statuses.append((await c.put("T", b"x")).status)

            start = trio.current_time()
            async with trio.open_nursery() as nursery:
                for _ in range(10):
                    nursery.start_soon(one)
            elapsed = trio.current_time() - start
    assert statuses == [PutStatus.FLUSH_SLAVE_TIMEOUT] * 10
    assert 0.3 <= elapsed < 2.5  # together: ten waits one after the other would take 3 s


async def test_sync_flush_puts_are_on_disk_when_answered(tmp_path: Path) -> None:
    cfg = config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH)
    async with running(cfg) as (broker, addresses), client(addresses) as c:
        replies = await c.put_batch([PutMessage("T", b"x" * 100) for _ in range(10)])
        assert all(r.ok for r in replies)
        assert broker.store.flushed_offset >= replies[-1].wrote_offset + replies[-1].wrote_size
        in_process = await broker.put([PutMessage("T", b"direct")])
        assert in_process[0].ok


async def test_clean_shutdown_removes_abort_and_a_second_broker_is_refused(
    tmp_path: Path,
) -> None:
    async with running(config(tmp_path)) as (broker, _):
        assert (tmp_path / "abort").exists()
        with pytest.raises(StoreLockedError):
            await Broker(config(tmp_path)).run()
        assert broker.store.max_offset == 0
    assert not (tmp_path / "abort").exists()
    with pytest.raises(RuntimeError, match="not running"):
        _ = broker.store


def test_a_slave_needs_its_master_address(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="haMasterAddress"):
        Broker(config(tmp_path, broker_role=BrokerRole.SLAVE))


# -- client errors ---------------------------------------------------------------------------


@asynccontextmanager
async def fake_server(
    handler: Callable[[trio.SocketStream], Awaitable[None]],
) -> AsyncIterator[int]:
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
        yield listeners[0].socket.getsockname()[1]
        nursery.cancel_scope.cancel()


async def test_client_connect_refused() -> None:
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    await listener.aclose()
    with pytest.raises(BrokerConnectionError, match=f"cannot connect to 127.0.0.1:{port}"):
        async with BrokerClient.connect("127.0.0.1", port):
            pass  # pragma: no cover


async def test_client_request_timeout() -> None:
    async def silent(stream: trio.SocketStream) -> None:
        await trio.sleep_forever()

    async with (
        fake_server(silent) as port,
        BrokerClient.connect("127.0.0.1", port, request_timeout=0.2) as c,
    ):
        with pytest.raises(BrokerTimeoutError):
            await c.status()


async def test_client_malformed_answer() -> None:
    async def garbage(stream: trio.SocketStream) -> None:
        await stream.receive_some()
        await stream.send_all(struct.pack(">I", 5) + b"\x55\x00\x00\x00\x01")
        await trio.sleep_forever()

    async with fake_server(garbage) as port, BrokerClient.connect("127.0.0.1", port) as c:
        with pytest.raises(BrokerProtocolError, match="malformed answer"):
            await c.status()
        assert not c.is_connected
        with pytest.raises(BrokerProtocolError):
            await c.status()


async def test_client_connection_lost_fails_every_request_in_flight() -> None:
    async def hang_up(stream: trio.SocketStream) -> None:
        await stream.receive_some()
        await trio.sleep(0.1)
        await stream.aclose()

    failures = []
    async with fake_server(hang_up) as port, BrokerClient.connect("127.0.0.1", port) as c:

        async def one() -> None:
            try:
                await c.put("T", b"x")
            except BrokerConnectionError as exc:
                failures.append(exc)

        async with trio.open_nursery() as nursery:
            for _ in range(5):
                nursery.start_soon(one)
    assert len(failures) == 5


async def test_an_error_in_the_block_propagates_unwrapped(tmp_path: Path) -> None:
    async with running(config(tmp_path)) as (_, addresses):
        with pytest.raises(KeyError):
            async with client(addresses):
                raise KeyError("mine")


async def test_client_rejects_unencodable_requests(tmp_path: Path) -> None:
    async with running(config(tmp_path)) as (_, addresses), client(addresses) as c:
        with pytest.raises(ValueError, match="cannot encode"):
            await c.put("T" * 70_000, b"x")
        assert (await c.put("T", b"fine")).ok


async def test_a_pull_never_serves_a_record_that_fails_its_crc(tmp_path: Path) -> None:
    async with running(config(tmp_path)) as (broker, addresses), client(addresses) as c:
        replies = [await c.put("T", b"payload %d" % i, queue_id=0) for i in range(3)]
        bad = replies[1].wrote_offset
        body_at = bad + replies[1].wrote_size - (1 + 1 + 2) - 1  # after the body: topic, props
        path = tmp_path / "commitlog" / ("0" * 20)
        with path.open("r+b") as f:  # a byte flipped on disk, under the live mapping
            f.seek(body_at)
            byte = f.read(1)
            f.seek(body_at)
            f.write(bytes([byte[0] ^ 0xFF]))
        first = await c.pull("T", 0, 0, max_messages=1)
        assert [m.body for m in first.messages] == [b"payload 0"]
        with pytest.raises(BrokerRequestError, match=f"invalid record at offset {bad}: body CRC"):
            await c.pull("T", 0, 1)
        assert broker.store.max_offset == replies[2].wrote_offset + replies[2].wrote_size


async def test_a_client_pointed_at_the_ha_port_says_which_port_it_reached(
    tmp_path: Path,
) -> None:
    async with running(config(tmp_path)) as (_, addresses):
        assert addresses.ha is not None
        async with BrokerClient.connect(*addresses.ha, request_timeout=5) as c:
            with pytest.raises(BrokerConnectionError, match="not an HA port"):
                await c.status()


async def test_a_slave_pointed_at_the_broker_port_is_named_in_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with running(config(tmp_path)) as (_, addresses):
        assert addresses.broker is not None
        stream = await trio.open_tcp_stream(*addresses.broker)
        await stream.send_all(struct.pack(">q", 0))  # a new slave's first report
        with trio.fail_after(5):
            assert await stream.receive_some(100) == b""
    assert "an HA slave pointed at the broker port?" in caplog.text


async def test_a_diverged_slave_says_so_in_its_status(tmp_path: Path) -> None:
    from hanet.store import CommitLogStore, Message, StoreConfig

    with CommitLogStore.open(tmp_path / "s", StoreConfig(mapped_file_size=FILE)) as ahead:
        ahead.put(Message("T", b"only on the slave"))
    master_cfg = config(tmp_path / "m", ha_send_heartbeat_interval=0.2)
    async with running(master_cfg) as (_, m_addr):
        assert m_addr.ha is not None
        slave_cfg = config(
            tmp_path / "s",
            broker_role=BrokerRole.SLAVE,
            ha_master_address=f"127.0.0.1:{m_addr.ha[1]}",
            reconnect_interval=0.05,
        )
        async with running(slave_cfg) as (_, s_addr), client(s_addr) as c:

            async def diverged() -> bool:
                link = (await c.status()).master
                return link is not None and link.diverged

            await wait_until(diverged)
            link = (await c.status()).master
            assert link is not None and link.refused_offset == ahead.max_offset
