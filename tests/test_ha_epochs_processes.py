"""Epochs with real processes over loopback: a failover to a slave that then wrote on its own,
the old master rejoining as a slave (refused by default, truncated with ``--ha-divergence
truncate``; nothing acknowledged lost), and a master broker port without epochs (RocketMQ
4.9.8's answer to an unknown request) still followed as before."""

from __future__ import annotations

import signal
from functools import partial
from pathlib import Path

import pytest
import trio
from cluster_support import Cluster, cluster
from test_cli_processes import (
    FAST,
    FILE,
    connect,
    connected_slaves,
    in_sync,
    status_of,
)

from hanet.boot import serve_listeners
from hanet.channel import StreamChannel
from hanet.client import PutMessage, PutStatus
from hanet.protocol import RemotingDispatcher, remoting_pipeline
from hanet.store import CommitLogReader, EpochFile, compare_commit_logs
from hanet.testing import HanetProcess, cli_flags, wait_until

pytestmark = pytest.mark.slow


async def put_numbered(proc: HanetProcess, first: int, count: int) -> list[tuple[bytes, PutStatus]]:
    """Put ``count`` numbered messages; each body with its status."""
    messages = [
        PutMessage("Epochs", b"epoch-test %06d " % i + b"." * 300)
        for i in range(first, first + count)
    ]
    async with connect(proc) as client:
        replies = await client.put_batch(messages)
    return [(m.body, r.status) for m, r in zip(messages, replies, strict=True)]


def bodies(root: Path) -> set[bytes]:
    return {r.body for _, r in CommitLogReader(root / "commitlog", FILE).records() if r.body}


async def restart_master(c: Cluster, old: HanetProcess, store: str, *extra: str) -> HanetProcess:
    assert await c.stop(old) == 0
    same_ports = cli_flags(listen=old.ready["broker"], ha_listen=old.ready["ha"])
    flags = cli_flags(store=c.root / store, mapped_file_size=FILE)
    return await c.start("master", "master", *flags, *same_ports, *FAST, *extra)


async def slave_of(c: Cluster, master: HanetProcess, store: str, *extra: str) -> HanetProcess:
    return await c.slave(master, store, "--master-broker", master.ready["broker"], *extra)


async def test_failover_then_the_old_master_rejoins_refused_then_truncated(
    tmp_path: Path,
) -> None:
    acked: list[bytes] = []
    async with cluster(tmp_path) as c:
        a = await c.master("a", "--role", "SYNC_MASTER")
        b = await slave_of(c, a, "b")
        for term in range(3):  # A's terms: epochs 1, 2, 3
            if term:
                a = await restart_master(c, a, "a", "--role", "SYNC_MASTER")

            async def slave_back(master: HanetProcess = a) -> bool:
                return await connected_slaves(master) >= 1

            await wait_until(slave_back)
            results = await put_numbered(a, term * 100, 100)
            assert {s for _, s in results} == {PutStatus.PUT_OK}  # on both A and B
            acked += [body for body, _ in results]
        await wait_until(partial(in_sync, a, b))
        assert [e.epoch for e in EpochFile.load(tmp_path / "a").entries] == [1, 2, 3]
        # B leaves; A takes 30 more it cannot replicate (not acknowledged), then dies
        assert await c.stop(b) == 0
        unacked = await put_numbered(a, 300, 30)
        assert PutStatus.PUT_OK not in {s for _, s in unacked}
        await c.stop(a, signal.SIGKILL)
        # B becomes the master (epoch 4 where its log ends) and takes puts of its own
        b = await c.master("b")
        point = EpochFile.load(tmp_path / "b").entries[-1].start_offset
        assert [e.epoch for e in EpochFile.load(tmp_path / "b").entries] == [1, 2, 3, 4]
        assert (await status_of(b)).epoch == 4
        results = await put_numbered(b, 1000, 100)
        assert {s for _, s in results} == {PutStatus.PUT_OK}
        acked += [body for body, _ in results]
        # A rejoins as B's slave: its log goes past the point, so it refuses (the default)
        a = await slave_of(c, b, "a")

        async def refusing() -> bool:
            link = (await status_of(a)).master
            return link is not None and link.epoch_diverged_at is not None

        await wait_until(refusing)
        link = (await status_of(a)).master
        assert link is not None and link.epoch_diverged_at == point and not link.connected
        assert f"diverged from the master at offset {point}" in (link.epoch_check or "")
        assert f"diverged from the master at offset {point}" in a.text()
        assert f"diverged from this master at offset {point}" in b.text()  # both sides
        assert not (tmp_path / "a" / "cut").exists()
        assert await c.stop(a) == 0
        # with --ha-divergence truncate it cuts there (keeping the bytes aside) and follows
        a = await slave_of(c, b, "a", "--ha-divergence", "truncate")
        await wait_until(partial(in_sync, b, a))
        link = (await status_of(a)).master
        assert link is not None and link.epoch_diverged_at is None
        assert f"diverged at {point}: truncated" in (link.epoch_check or "")
        assert await c.stop(a) == 0
        assert await c.stop(b) == 0
    comparison = compare_commit_logs(tmp_path / "b", tmp_path / "a")
    assert comparison.identical, comparison.mismatch
    assert [e.epoch for e in EpochFile.load(tmp_path / "a").entries] == [1, 2, 3, 4]
    (kept,) = (tmp_path / "a" / "cut").iterdir()
    assert any(kept.iterdir())
    held = bodies(tmp_path / "b")
    assert set(acked) <= held  # nothing acknowledged lost
    assert not {body for body, _ in unacked} & held


async def old_broker_port(task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
    """A remoting server with no hanet requests: what RocketMQ 4.9.8 answers a request code it
    does not know (REQUEST_CODE_NOT_SUPPORTED, " request type N not supported")."""
    dispatcher = RemotingDispatcher({}, port="a RocketMQ 4.9.8 broker port")

    def initialize(channel: StreamChannel) -> None:
        for name, handler in remoting_pipeline():
            channel.pipeline.add_last(handler, name)
        channel.pipeline.add_last(dispatcher, "dispatch")

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        await nursery.start(partial(serve_listeners, initialize, listeners))
        task_status.started(f"127.0.0.1:{port}")


async def test_a_master_without_epochs_is_still_followed(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c, trio.open_nursery() as nursery:
        old_port = await nursery.start(old_broker_port)
        master = await c.master("master")
        assert [r for _, r in await put_numbered(master, 0, 200)] == [PutStatus.PUT_OK] * 200
        slave = await c.slave(master, "slave", "--master-broker", old_port)
        never_asks = await c.slave(master, "slave2")  # no broker port to ask: as a 4.9.8 slave
        await wait_until(partial(in_sync, master, slave, never_asks))
        link = (await status_of(slave)).master
        assert link is not None and link.epoch_diverged_at is None
        assert "keeps no epochs (a RocketMQ 4.9.8 broker)" in (link.epoch_check or "")
        link = (await status_of(never_asks)).master
        assert link is not None and "broker port is not known" in (link.epoch_check or "")
        assert await c.stop(slave) == 0
        assert await c.stop(never_asks) == 0
        assert await c.stop(master) == 0
        nursery.cancel_scope.cancel()
    for name in ("slave", "slave2"):
        comparison = compare_commit_logs(tmp_path / "master", tmp_path / name)
        assert comparison.identical, comparison.mismatch
        assert not (tmp_path / name / "epoch").exists()  # nothing adopted
