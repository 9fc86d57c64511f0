"""``hanet consume`` and ``--namesrv`` on put/pull/status, in-process: a name server and a
master broker registered with it by hand."""

from __future__ import annotations

import json
import sys
from collections import Counter
from contextlib import AbstractAsyncContextManager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
from broker_support import registered_master

from hanet.broker import Broker
from hanet.cli import build_parser
from hanet.client import (
    BrokerClient,
    BrokerError,
    PutMessage,
    PutStatus,
)
from hanet.testing import HanetProcesses, wait_until

TOPIC = "T"


async def verb(*argv: str) -> int:
    args = build_parser().parse_args(list(argv))
    status: int = await args.func(args)
    return status


async def on_topic(name: str, names: str, *flags: str) -> int:
    """``hanet <name> --namesrv <names> --topic TOPIC <flags>``: its exit status."""
    return await verb(name, "--namesrv", names, "--topic", TOPIC, *flags)


def cluster(tmp_path: Path) -> AbstractAsyncContextManager[tuple[str, str, Broker]]:
    """A name server and a master holding ``T`` (4 queues), registered: their addresses."""
    return registered_master(tmp_path / "master", TOPIC, 4)


async def test_put_pull_and_status_through_the_name_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with cluster(tmp_path) as (names, broker_address, broker):
        assert await on_topic("put", names, "--size", "20", "--count", "8", "--json") == 0
        assert json.loads(capsys.readouterr().out)["statuses"] == {"PUT_OK": 8}
        assert broker.store.max_queue_offset(TOPIC, 1) == 2

        # A topic no broker holds yet goes to a registered master, which creates it.
        assert await verb("put", "--namesrv", names, "--topic", "New", "--body", "x") == 0
        assert capsys.readouterr().out.startswith("PUT_OK")

        assert await on_topic("pull", names, "--queue", "1", "--json") == 0
        lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert [m["queue_offset"] for m in lines[:-1]] == [0, 1]
        assert await on_topic("pull", names, "--queue", "1", "--broker-name", "broker-z") == 2
        assert "no broker name 'broker-z'" in capsys.readouterr().err

        assert await verb("status", "--namesrv", names) == 0
        out = capsys.readouterr().out
        assert "broker-a" in out and "master" in out and "DefaultCluster" in out
        assert await verb("status", "--namesrv", names, "--json") == 0
        document = json.loads(capsys.readouterr().out)  # RocketMQ's ClusterInfo
        assert document["clusterAddrTable"] == {"DefaultCluster": ["broker-a"]}
        assert document["brokerAddrTable"]["broker-a"]["brokerAddrs"] == {"0": broker_address}


async def test_consume_every_queue_commit_and_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with cluster(tmp_path) as (names, broker_address, _broker):
        assert await on_topic("put", names, "--size", "20", "--count", "10", "--quiet") == 0
        capsys.readouterr()
        consume = ("consume", "--namesrv", names, "--group", "G", "--topic", TOPIC)
        with trio.fail_after(30):
            assert await verb(*consume, "--from-beginning", "--json", "--max-messages", "6") == 0
        first = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert len(first) == 6
        assert {m["broker_name"] for m in first} == {"broker-a"}
        assert {m["broker_id"] for m in first} == {0}

        # At exit the six were committed: the rest come next, nothing twice (queues the first
        # run never started have no commit: --from-beginning applies to them).
        host, _, port = broker_address.rpartition(":")
        async with BrokerClient.connect(host, int(port)) as client:
            committed = [await client.query_offset("G", TOPIC, q) for q in range(4)]
        assert sum(o or 0 for o in committed) == 6
        with trio.fail_after(30):
            assert await verb(*consume, "--from-beginning", "--json", "--idle-exit", "1.5") == 0
        captured = capsys.readouterr()
        rest = [json.loads(line) for line in captured.out.splitlines()]
        assert len(rest) == 4
        seen = {(m["queue_id"], m["queue_offset"]) for m in first + rest}
        assert len(seen) == 10
        assert "consumed 4 messages" in captured.err

        # A new group without --from-beginning: the broker answers its offset query 0 for a
        # queue whose first message is still in memory (RocketMQ 4.9.8's rule, which a Java
        # consumer follows too), so it starts there.
        with trio.fail_after(30):
            assert await on_topic("consume", names, "--group", "other", "--idle-exit", "1") == 0
        assert len(capsys.readouterr().out.splitlines()) == 10


async def test_a_consumer_stopped_by_a_signal_commits_what_it_consumed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with cluster(tmp_path) as (names, broker_address, _broker):
        assert await on_topic("put", names, "--size", "20", "--count", "8", "--quiet") == 0
        capsys.readouterr()
        # Cancelled (what SIGTERM does) with the commit interval far away.
        with trio.move_on_after(3):
            await on_topic(
                "consume", names, "--group", "G", "--from-beginning", "--commit-interval", "60"
            )
        assert len(capsys.readouterr().out.splitlines()) == 8
        host, _, port = broker_address.rpartition(":")
        async with BrokerClient.connect(host, int(port)) as client:
            committed = [await client.query_offset("G", TOPIC, q) for q in range(4)]
        assert committed == [2, 2, 2, 2]


async def test_two_consumers_of_a_group_share_the_queues(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with cluster(tmp_path) as (names, _broker_address, _broker):
        assert await on_topic("put", names, "--size", "20", "--count", "40", "--quiet") == 0
        capsys.readouterr()
        consume = ["consume", "--namesrv", names, "--topic", TOPIC, "--group", "G"]
        consume += ["--from-beginning", "--idle-exit", "3"]
        async with trio.open_nursery() as nursery:
            for client in ("one", "two"):
                nursery.start_soon(partial(verb, *consume, "--client-id", client))
        captured = capsys.readouterr()
        lines = captured.out.splitlines()
        assert len(lines) >= 40  # at least once: a queue may change hands once at the start
        assert len(set(lines)) == 40
        assert "held" in captured.err
        held_lines = [line for line in captured.err.splitlines() if "held" in line]
        held = sorted(line.split("held ")[1].split(" (")[0] for line in held_lines)
        assert held == ["broker-a/0, broker-a/1", "broker-a/2, broker-a/3"], captured.err


async def test_consume_without_a_name_server_keeps_trying(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with trio.fail_after(30):
        assert (
            await verb(
                "consume",
                "--namesrv",
                "127.0.0.1:1",
                "--topic",
                TOPIC,
                "--group",
                "G",
                "--idle-exit",
                "1",
            )
            == 0
        )
    assert "consumed 0 messages" in capsys.readouterr().err


# -- real processes ---------------------------------------------------------------------------


def consumed(path: Path) -> list[dict[str, Any]]:
    """The complete JSON lines ``hanet consume --json`` wrote so far."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    return [json.loads(line) for line in text.split("\n")[:-1] if line]


@pytest.mark.slow
async def test_a_consumer_group_continues_on_the_slave_after_the_master_is_killed(
    processes: HanetProcesses, tmp_path: Path
) -> None:
    """Name server, SYNC_MASTER, slave and ``hanet consume`` as processes: the master is
    killed with SIGKILL half-way; every PUT_OK message is consumed at least once (from the
    slave after the kill); the master restarted, the consumer reads from it again."""
    conf = tmp_path / "broker.conf"
    conf.write_text("registerNameServerPeriod=500\n", encoding="utf-8")
    namesrv = await processes.start("namesrv", "namesrv", "--listen", "127.0.0.1:0")
    ns = namesrv.ready["namesrv"]
    member = ["--config", str(conf), "--namesrv", ns, "--slave-read-enable"]
    member += ["--listen", "127.0.0.1:0", "--mapped-file-size", "262144"]
    role = ["--ha-listen", "127.0.0.1:0", "--role", "SYNC_MASTER"]
    argv = ["master", "--store", str(tmp_path / "master"), *member, *role]
    master = await processes.start("master", *argv)
    argv = ["slave", "--store", str(tmp_path / "slave"), *member]
    await processes.start("slave", *argv, "--reconnect-interval", "0.2")  # finds its master

    acked: set[bytes] = set()

    async def produce(address: str, start: int, count: int) -> None:
        host, _, port = address.rpartition(":")
        async with BrokerClient.connect(host, int(port)) as client:
            for first in range(start, start + count, 50):
                batch = [PutMessage(TOPIC, b"m%06d" % i) for i in range(first, first + 50)]
                for message, reply in zip(batch, await client.put_batch(batch), strict=True):
                    if reply.status is PutStatus.PUT_OK:
                        acked.add(message.body)

    # A SYNC_MASTER answers PUT_OK once the slave has the message: wait for the slave.
    with trio.fail_after(20):
        while not acked:
            await produce(master.ready["broker"], 0, 50)
            await trio.sleep(0.2)
    await produce(master.ready["broker"], 50, 1950)
    assert len(acked) == 2000

    out = tmp_path / "consumer.jsonl"
    group = ["--namesrv", ns, "--group", "G", "--topic", TOPIC, "--from-beginning", "--json"]
    pace = ["--rate", "500", "--retry-interval", "1", "--commit-interval", "1", "--timeout", "3"]
    argv = ["consume", *group, *pace]
    consumer = processes.add("consumer", *argv, stdout=out, ready_file=False)
    await consumer.start()
    await wait_until(lambda: len(consumed(out)) >= 1000, 30)
    await master.kill()

    def missing() -> set[bytes]:
        assert consumer.running
        return acked - {m["body"].encode() for m in consumed(out)}

    await wait_until(lambda: not missing(), 40, 0.1)
    after_kill = len(consumed(out))
    assert any(m["broker_id"] == 1 for m in consumed(out)[1100:])  # read from the slave

    # The master returns (a new port, registered): the consumer goes back to it once the
    # route shows it (the slave has every message too: until then it reads from there).
    await master.start()
    with trio.fail_after(30):
        seq = 2000
        while not any(m["broker_id"] == 0 for m in consumed(out)[after_kill:]):
            try:
                await produce(master.ready["broker"], seq, 50)
            except BrokerError:
                pass  # the slave not connected yet: no PUT_OK
            seq += 50
            await trio.sleep(0.3)
    await wait_until(lambda: not missing(), 30, 0.1)
    assert await consumer.stop() == 0
    everything = consumed(out)
    assert {m["body"].encode() for m in everything} >= acked  # every PUT_OK one, at least once
    deliveries = Counter((m["queue_id"], m["queue_offset"]) for m in everything)
    duplicates = sum(n - 1 for n in deliveries.values())
    summary = consumer.text()
    assert f"consumed {len(everything)} messages" in summary, summary
    print(f"{len(acked)} PUT_OK, {len(everything)} delivered, {duplicates} duplicates")


@pytest.mark.slow
async def test_the_consumers_demo_runs_small(tmp_path: Path) -> None:
    work = tmp_path / "demo"
    result = await trio.run_process(
        [
            sys.executable,
            "-m",
            "hanet",
            "demo",
            "--consumers",
            "--messages",
            "600",
            "--size",
            "64",
            "--dir",
            str(work),
        ],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    out = result.stdout.decode()
    assert result.returncode == 0, out + result.stderr.decode()
    out = " ".join(out.translate(str.maketrans("│┃", "  ")).split())  # table cells wrap
    assert "master killed (SIGKILL)" in out and "every PUT_OK message consumed" in out
    assert "600 PUT_OK of 600 sent" in out and "duplicates" in out
    lines = [json.loads(line) for line in (work / "consumer.jsonl").read_text().splitlines()]
    assert {m["broker_id"] for m in lines} == {0, 1}  # from the master, then the slave
    assert "SIGTERM" in (work / "consumer.log").read_text()  # stopped cleanly, committed


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--commit-interval", "nan"), ("--commit-interval", "0"), ("--pull-batch", "0")],
)
async def test_bad_consumer_settings_are_one_line_errors(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Checked by the consumer's own settings (NaN too), before anything connects."""
    assert await on_topic("consume", "127.0.0.1:1", "--group", "G", flag, value) == 2
    err = capsys.readouterr().err
    assert "--commit-interval" in err and flag.lstrip("-").replace("-", "_") in err
    assert "Traceback" not in err
