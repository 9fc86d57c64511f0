"""Wire compatibility over real loopback TCP, against peers written from docs/protocol.md alone.

The peers use plain blocking sockets (in a worker thread) and ``struct``: no hanet code. One
plays RocketMQ's slave against our master, the other RocketMQ's master against our slave.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from hanet.ha import BrokerConfig, HAMaster, HASlave
from hanet.store import CommitLogStore, Message, StoreConfig, StoreRole

FILE = 8192
REPORT = struct.Struct(">q")
HEADER = struct.Struct(">qi")


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError(f"peer closed after {len(data)} of {n} bytes")
        data += chunk
    return data


def recv_frame(sock: socket.socket) -> tuple[int, bytes]:
    offset, size = HEADER.unpack(recv_exactly(sock, 12))
    return offset, recv_exactly(sock, size)


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[tuple[CommitLogStore, CommitLogStore]]:
    master = CommitLogStore.open(tmp_path / "m", StoreConfig(mapped_file_size=FILE))
    slave = CommitLogStore.open(
        tmp_path / "s", StoreConfig(mapped_file_size=FILE, role=StoreRole.SLAVE)
    )
    yield master, slave
    master.close()
    slave.close()


def fill(store: CommitLogStore, n: int) -> None:
    for i in range(n):
        store.put(Message(topic="TopicTest", body=b"m%05d" % i * 20, queue_id=i % 4))


async def test_a_rocketmq_slave_against_our_master(
    stores: tuple[CommitLogStore, CommitLogStore],
) -> None:
    master_store, _ = stores
    fill(master_store, 100)
    high = master_store.max_offset
    last_file = high - high % FILE
    expected = master_store.read(last_file, high - last_file)
    config = BrokerConfig(ha_listen_port=0, ha_send_heartbeat_interval=0.3)
    master = HAMaster(master_store, config)

    def rocketmq_slave(port: int) -> list[tuple[int, int]]:
        frames = []
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(REPORT.pack(0))  # a new slave
            offset, body = recv_frame(sock)
            assert (offset, body) == (last_file, expected)
            frames.append((offset, len(body)))
            sock.sendall(REPORT.pack(offset + len(body)))
            beat_offset, beat = recv_frame(sock)  # an idle master: a heartbeat
            frames.append((beat_offset, len(beat)))
            sock.sendall(REPORT.pack(high + 1))  # a bogus ack beyond max: closed
            with pytest.raises((EOFError, ConnectionResetError)):
                recv_frame(sock)
        return frames

    async with trio.open_nursery() as nursery:
        _, port = await nursery.start(master.serve)
        frames = await trio.to_thread.run_sync(rocketmq_slave, port)
        nursery.cancel_scope.cancel()
    assert frames == [(last_file, high - last_file), (high, 0)]
    assert "beyond the master's max offset" in master.status().closed[0].state


async def test_a_rocketmq_master_against_our_slave(
    stores: tuple[CommitLogStore, CommitLogStore],
) -> None:
    source, slave_store = stores
    fill(source, 30)
    data = source.read(0, source.max_offset)

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    config = BrokerConfig(ha_master_address=f"127.0.0.1:{port}", reconnect_interval=0.2)

    def rocketmq_master() -> list[int]:
        reports = []
        listener.settimeout(10)
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(10)
            reports.append(REPORT.unpack(recv_exactly(conn, 8))[0])
            conn.sendall(HEADER.pack(0, 0))  # a heartbeat before any data (as RocketMQ)
            conn.sendall(HEADER.pack(0, len(data)) + data)
            reports.append(REPORT.unpack(recv_exactly(conn, 8))[0])
            conn.sendall(HEADER.pack(len(data) + 8, 0))  # wrong offset: the slave closes
            with pytest.raises((EOFError, ConnectionResetError)):
                while True:
                    recv_exactly(conn, 8)
        conn, _ = listener.accept()  # and reconnects
        with conn:
            reports.append(REPORT.unpack(recv_exactly(conn, 8))[0])
        return reports

    async with trio.open_nursery() as nursery:
        await nursery.start(HASlave(slave_store, config).run)
        reports = await trio.to_thread.run_sync(rocketmq_master)
        nursery.cancel_scope.cancel()
    listener.close()
    assert reports == [0, len(data), len(data)]
    assert slave_store.read(0, len(data)) == data
    assert slave_store.dispatch_error is None
