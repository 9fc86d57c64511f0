"""``hanet consume`` and ``--namesrv`` on put/pull/status, in-process: a name server and a
master broker registered with it by hand."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from hanet.broker import Broker, BrokerAddresses
from hanet.cli import build_parser
from hanet.client import BrokerClient, BrokerRegistration, NameServerClient
from hanet.ha import BrokerConfig
from hanet.namesrv import NameServer

FILE = 64 * 1024
TOPIC = "T"


async def verb(*argv: str) -> int:
    args = build_parser().parse_args(list(argv))
    status: int = await args.func(args)
    return status


@asynccontextmanager
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[str, str, Broker]]:
    """A name server and a master holding ``T`` (4 queues), registered: their addresses."""
    async with trio.open_nursery() as nursery:
        server = NameServer(("127.0.0.1", 0))
        names_address = await nursery.start(server.run)
        config = BrokerConfig(
            store_path_root_dir=tmp_path / "master",
            listen_port=0,
            ha_listen_port=0,
            mapped_file_size_commit_log=FILE,
        )
        broker = Broker(config)
        addresses: BrokerAddresses = await nursery.start(broker.run)
        assert addresses.broker is not None and addresses.ha is not None
        broker_address = f"127.0.0.1:{addresses.broker[1]}"
        registration = BrokerRegistration(
            "DefaultCluster", "broker-a", 0, "ASYNC_MASTER", broker_address,
            f"127.0.0.1:{addresses.ha[1]}", ((TOPIC, 4),),
        )  # fmt: skip
        await NameServerClient([names_address]).register_broker(registration)
        yield f"127.0.0.1:{names_address[1]}", broker_address, broker
        nursery.cancel_scope.cancel()


async def test_put_pull_and_status_through_the_name_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with cluster(tmp_path) as (names, _broker_address, broker):
        assert await verb("put", "--namesrv", names, "--topic", TOPIC, "--size", "20",
                          "--count", "8", "--json") == 0  # fmt: skip
        assert json.loads(capsys.readouterr().out)["statuses"] == {"PUT_OK": 8}
        assert broker.store.max_queue_offset(TOPIC, 1) == 2

        # A topic no broker holds yet goes to a registered master, which creates it.
        assert await verb("put", "--namesrv", names, "--topic", "New", "--body", "x") == 0
        assert capsys.readouterr().out.startswith("PUT_OK")

        assert await verb("pull", "--namesrv", names, "--topic", TOPIC, "--queue", "1",
                          "--json") == 0  # fmt: skip
        lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert [m["queue_offset"] for m in lines[:-1]] == [0, 1]
        assert await verb("pull", "--namesrv", names, "--topic", TOPIC, "--queue", "1",
                          "--broker-name", "broker-z") == 2  # fmt: skip
        assert "no broker name 'broker-z'" in capsys.readouterr().err

        assert await verb("status", "--namesrv", names) == 0
        out = capsys.readouterr().out
        assert "broker-a" in out and "ASYNC_MASTER" in out and "s ago" in out
        assert await verb("status", "--namesrv", names, "--json") == 0
        (member,) = json.loads(capsys.readouterr().out)["brokers"]
        assert (member["broker_name"], member["broker_id"], member["role"]) == (
            "broker-a", 0, "ASYNC_MASTER",
        )  # fmt: skip


async def test_consume_every_queue_commit_and_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with cluster(tmp_path) as (names, broker_address, _broker):
        assert await verb("put", "--namesrv", names, "--topic", TOPIC, "--size", "20",
                          "--count", "10", "--quiet") == 0  # fmt: skip
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

        # A new group without --from-beginning starts at the end: nothing.
        with trio.fail_after(30):
            assert await verb("consume", "--namesrv", names, "--group", "other",
                              "--topic", TOPIC, "--idle-exit", "1") == 0  # fmt: skip
        assert capsys.readouterr().out == ""


async def test_a_consumer_stopped_by_a_signal_commits_what_it_consumed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with cluster(tmp_path) as (names, broker_address, _broker):
        assert await verb("put", "--namesrv", names, "--topic", TOPIC, "--size", "20",
                          "--count", "8", "--quiet") == 0  # fmt: skip
        capsys.readouterr()
        # Cancelled (what SIGTERM does) with the commit interval far away.
        with trio.move_on_after(3):
            await verb("consume", "--namesrv", names, "--group", "G", "--topic", TOPIC,
                       "--from-beginning", "--commit-interval", "60")  # fmt: skip
        assert len(capsys.readouterr().out.splitlines()) == 8
        host, _, port = broker_address.rpartition(":")
        async with BrokerClient.connect(host, int(port)) as client:
            committed = [await client.query_offset("G", TOPIC, q) for q in range(4)]
        assert committed == [2, 2, 2, 2]


async def test_consume_without_a_name_server_keeps_trying(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with trio.fail_after(30):
        assert await verb("consume", "--namesrv", "127.0.0.1:1", "--group", "G",
                          "--topic", TOPIC, "--idle-exit", "1") == 0  # fmt: skip
    assert "consumed 0 messages" in capsys.readouterr().err
