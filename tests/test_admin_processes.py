"""``hanet admin`` against real processes: a name server and two masters (broker-a, broker-b of
cluster C) managed through ``hanet admin`` subprocesses; an ``ali-ons`` consumer group reset by
``resetOffsetByTime`` while it runs."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from interop_support import alions_command, run_driver, start_driver
from test_interop_clients import NamesrvCluster, bodies, started

from hanet.cli import main
from hanet.client import BrokerClient
from hanet.testing import HanetProcess, split_address, wait_until_blocking

pytestmark = pytest.mark.slow

CONF = "registerNameServerPeriod=1000\nflushConsumerOffsetInterval=500\n"


class Cluster(NamesrvCluster):
    """``hanet namesrv`` and two ``hanet master`` (broker-a, broker-b) of cluster ``C``."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        conf = root / "broker.conf"
        conf.write_text(CONF)
        self.masters = [self._master(name, conf) for name in ("broker-a", "broker-b")]

    def _master(self, name: str, conf: Path) -> HanetProcess:
        ports = ("--listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0")
        names = ("--cluster", "C", "--broker-name", name)
        store = ("--store", str(self.root / name), "--mapped-file-size", "1M")
        return self.add_broker(name, "master", *store, *ports, "--config", str(conf), *names)

    def broker(self, index: int) -> str:
        address: str = self.masters[index].ready["broker"]
        return address

    def text(self, *argv: str) -> str:
        """``hanet admin <argv> -n <name server>`` in this process: its table."""
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(["admin", *argv, "-n", self.namesrv_address]) == 0, argv
        return out.getvalue()

    def admin(self, *argv: str, expect: int = 0) -> Any:
        """``hanet admin <argv> -n <name server> --json`` run by :func:`hanet.cli.main` in this
        process (a new process costs seconds): its JSON document (or its stderr when it exits
        ``expect`` other than 0)."""
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(["admin", *argv, "-n", self.namesrv_address, "--json"])
        assert status == expect, (argv, out.getvalue(), err.getvalue(), self.logs())
        return json.loads(out.getvalue()) if expect == 0 else err.getvalue()

    def admin_process(self, *argv: str, expect: int = 0) -> Any:
        """:meth:`admin` as a ``hanet admin`` subprocess."""
        command = [sys.executable, "-m", "hanet", "admin", *argv, "-n", self.namesrv_address]
        done = subprocess.run(
            [*command, "--json"], capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == expect, (argv, done.stdout, done.stderr, self.logs())
        return json.loads(done.stdout) if expect == 0 else done.stderr


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    running = Cluster(tmp_path).start_all()
    try:
        yield running
    finally:
        running.close()
    running.assert_no_traceback()


def test_two_brokers_managed_through_hanet_admin(cluster: Cluster) -> None:
    a, b = cluster.broker(0), cluster.broker(1)

    def both_listed() -> Any:
        rows = cluster.admin("clusterList")
        return rows if len(rows) == 2 else None

    brokers = wait_until_blocking(both_listed, 10, what="both brokers in clusterList")
    assert {(r["brokerName"], r["addr"]) for r in brokers} == {("broker-a", a), ("broker-b", b)}
    assert all(r["runtime"]["brokerVersionDesc"] == "V4_9_8" for r in brokers)

    created = cluster.admin_process("updateTopic", "-t", "AdminT", "-c", "C", "-r", "2", "-w", "2")
    assert sorted(created["brokers"]) == sorted([a, b])

    def routed() -> Any:
        route = cluster.admin("topicRoute", "-t", "AdminT")
        return route if len(route["queueDatas"]) == 2 else None

    route = wait_until_blocking(routed, 10, what="AdminT routed to both brokers")
    assert route, cluster.logs()
    assert {(q["brokerName"], q["writeQueueNums"], q["perm"]) for q in route["queueDatas"]} == {
        ("broker-a", 2, 6),
        ("broker-b", 2, 6),
    }
    assert "AdminT" in cluster.admin("topicList")["topicList"]

    async def produce() -> None:
        async with BrokerClient.connect(*split_address(a)) as client:
            for i in range(5):
                await client.put("AdminT", b"a%d" % i, queue_id=i % 2)
            await client.commit_offset("AdminG", "AdminT", 0, 1)

    trio.run(produce)
    status = cluster.admin("topicStatus", "-t", "AdminT")
    maxima = {(s["brokerName"], s["queueId"]): s["maxOffset"] for s in status}
    assert maxima == {
        ("broker-a", 0): 3,
        ("broker-a", 1): 2,
        ("broker-b", 0): 0,
        ("broker-b", 1): 0,
    }
    progress = cluster.admin("consumerProgress", "-g", "AdminG", "-t", "AdminT")
    rows = {
        (r["brokerName"], r["queueId"]): (r["brokerOffset"], r["consumerOffset"])
        for r in progress["offsets"]
    }
    assert rows[("broker-a", 0)] == (3, 1)
    assert progress["diffTotal"] == 4

    tables = {
        verb: cluster.text(*argv)
        for verb, *argv in (
            ("clusterList", "clusterList"),
            ("topicStatus", "topicStatus", "-t", "AdminT"),
            ("consumerProgress", "consumerProgress", "-g", "AdminG", "-t", "AdminT"),
            ("topicRoute", "topicRoute", "-t", "AdminT"),
            ("brokerStatus", "brokerStatus", "-b", a),
            ("getBrokerConfig", "getBrokerConfig", "-c", "C"),
        )
    }
    assert tables["clusterList"].splitlines()[0].split()[:3] == ["#Cluster", "Name", "#Broker"]
    assert "broker-b" in tables["clusterList"] and "V4_9_8" in tables["clusterList"]
    assert len(tables["topicStatus"].splitlines()) == 5
    assert "Diff Total: 4" in tables["consumerProgress"]
    assert f"0={b}" in tables["topicRoute"]
    assert "msgPutTotalTodayNow" in tables["brokerStatus"]
    assert tables["getBrokerConfig"].count("brokerName") == 2

    info = cluster.admin("brokerStatus", "-b", a)
    assert info["msgPutTotalTodayNow"] == "5"
    assert cluster.admin("getBrokerConfig", "-b", a)[a]["brokerName"] == "broker-a"
    cluster.admin("updateBrokerConfig", "-b", a, "-k", "slaveReadEnable", "-v", "true")
    assert cluster.admin("getBrokerConfig", "-b", a)[a]["slaveReadEnable"] == "true"
    refused = cluster.admin(
        "updateBrokerConfig", "-c", "C", "-k", "brokerName", "-v", "x", expect=1
    )
    assert "brokerName" in refused and "restart" in refused

    wiped = cluster.admin("wipeWritePerm", "-b", "broker-a")
    assert wiped["topics"][cluster.namesrv_address] >= 2  # TBW102 and AdminT at least
    perms = {
        q["brokerName"]: q["perm"]
        for q in cluster.admin("topicRoute", "-t", "AdminT")["queueDatas"]
    }
    assert perms == {"broker-a": 4, "broker-b": 6}
    time.sleep(1.5)  # broker-a registered again meanwhile: still read-only
    route = cluster.admin("topicRoute", "-t", "AdminT")
    assert {q["brokerName"]: q["perm"] for q in route["queueDatas"]} == perms
    cluster.admin("addWritePerm", "-b", "broker-a")

    cluster.admin_process("deleteTopic", "-t", "AdminT", "-c", "C")
    gone = cluster.admin("topicRoute", "-t", "AdminT", expect=1)
    assert "TOPIC_NOT_EXIST" in gone
    time.sleep(1.5)  # a registration round later the topic is still gone
    assert "AdminT" not in cluster.admin("topicList")["topicList"]
    assert not (Path(cluster.root) / "broker-a" / "consumequeue" / "AdminT").exists()


async def test_an_alions_group_reset_by_time_while_it_runs(cluster: Cluster) -> None:
    alions_command("produce", "127.0.0.1:1", "T")  # skips here when ali-ons cannot run
    topic, group = "AdminReset", "AdminResetGroup"
    await trio.to_thread.run_sync(
        lambda: cluster.admin(
            "updateTopic", "-t", topic, "-b", cluster.broker(0), "-r", "2", "-w", "2"
        )
    )
    namesrv = cluster.namesrv_address
    consumer = alions_command("consume", namesrv, topic, group=group, timeout=120, from_first=True)
    async with start_driver(consumer) as driver:
        await started(driver)
        before = int(time.time() * 1000)
        await trio.sleep(0.05)
        out = await run_driver(
            alions_command("produce", namesrv, topic, count=6, prefix="r"), timeout=40
        )
        assert out.returncode == 0, (out, out.stderr, cluster.logs())
        expected = [f"r-{i}" for i in range(6)]
        with trio.fail_after(30):
            while set(expected) - set(bodies(driver.lines)):  # noqa: ASYNC110 - a process
                await trio.sleep(0.05)
        await trio.sleep(1.5)  # the client commits its offsets (every 5 s at most)
        reset = await trio.to_thread.run_sync(
            lambda: cluster.admin("resetOffsetByTime", "-g", group, "-t", topic, "-s", str(before))
        )
        assert {o["online"] for o in reset["offsets"]} == {True}, reset
        assert sorted(o["offset"] for o in reset["offsets"]) == [0, 0]
        # the running client consumes every message again, from the reset offsets
        with trio.fail_after(30):
            while any(bodies(driver.lines).count(b) < 2 for b in expected):  # noqa: ASYNC110
                await trio.sleep(0.1)
        progress = await trio.to_thread.run_sync(
            lambda: cluster.admin("consumerProgress", "-g", group)
        )
        assert {r["topic"] for r in progress["offsets"]} >= {topic}
        connections = await trio.to_thread.run_sync(
            lambda: cluster.admin("consumerConnection", "-g", group)
        )
        assert len(connections["connectionSet"]) == 1
        assert topic in connections["subscriptionTable"]
