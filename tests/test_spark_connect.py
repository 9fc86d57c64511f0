"""``hanet audit --remote sc://...`` on a real Spark Connect server, the one the installed
pyspark ships, started by the test with ``hanet spark-connect`` (127.0.0.1, a free port) and
stopped with SIGTERM: the same answers as a local run, twice on the same warm server (the route
by which repeated small audits skip Spark's start-up)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hanet.store import CommitLogStore, Message, StoreConfig

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")
for _client in ("grpc", "grpc_status", "pandas", "zstandard", "google.rpc"):
    pytest.importorskip(
        _client, reason="needs pyspark's Connect client: pip install hanet[connect]"
    )

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
CONFIG = StoreConfig(mapped_file_size=8192, consume_queue_file_size=400)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``sc://127.0.0.1:PORT`` of ``hanet spark-connect`` on local[2] (a free port), stopped
    with SIGTERM at the end (exit status 0, the server gone)."""
    command = [sys.executable, "-m", "hanet", "spark-connect", "--listen", "127.0.0.1:0"]
    log = tmp_path_factory.mktemp("spark-connect") / "stderr.log"
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            [*command, "--spark-master", "local[2]"],
            env=environment(),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # EOF when it failed (it gives up after 120 s)
        assert line.startswith("Spark Connect on sc://127.0.0.1:"), log.read_text()[-3000:]
        url = line.split()[3]
        yield url
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
        host, port = url.removeprefix("sc://").split(":")
        with pytest.raises(OSError):  # the server went with it
            socket.create_connection((host, int(port)), timeout=5).close()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_GATEWAY_PORT"}
    env["HANET_SPARK_CDS"] = "0"  # the local run leaves no 150 MB archive behind
    return env


def make_store(root: Path, count: int) -> None:
    with CommitLogStore.open(root, CONFIG) as store:
        for i in range(count):
            topic = ("Orders", "Payments", "Audit")[i % 3]
            message = Message(topic, b"y" * (20 + i % 50), born_timestamp=1_700_000_000_000 + i)
            assert store.put(message).ok
    path = sorted((root / "commitlog").iterdir())[0]  # one flipped body byte: a CRC problem
    data = bytearray(path.read_bytes())
    data[data.find(b"y" * 20) + 5] ^= 0xFF
    path.write_bytes(bytes(data))


def hanet(*argv: str, status: int) -> tuple[dict[str, Any], str]:
    """``hanet ARGV --json``: its report and stderr (its exit status checked)."""
    done = subprocess.run(
        [sys.executable, "-m", "hanet", *argv, "--json"],
        check=False,
        capture_output=True,
        text=True,
        env=environment(),
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == status, done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout)
    return report, done.stderr


def audit(store: Path, *flags: str) -> tuple[dict[str, Any], str]:
    return hanet("audit", str(store), *flags, status=1)  # the flipped byte is a problem


def comparable(report: dict[str, Any]) -> dict[str, Any]:
    """A report without what depends on where and how fast it ran."""
    return {k: v for k, v in report.items() if k not in ("seconds", "spark")}


def test_audit_through_spark_connect_answers_as_local_and_reuses_the_server(
    server: str, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    make_store(store, 300)
    local, _ = audit(store, "--spark-master", "local[2]")
    assert local["problem_count"] >= 1 and local["scanned"] == 300
    for _ in range(2):  # the second run finds the server as the first left it
        remote, stderr = audit(store, "--remote", server)
        assert remote["spark"].endswith("over Spark Connect"), remote["spark"]
        assert comparable(remote) == comparable(local)
        assert "Traceback" not in stderr


def test_stats_and_diff_through_spark_connect(server: str, tmp_path: Path) -> None:
    store, copy = tmp_path / "store", tmp_path / "copy"
    make_store(store, 120)
    shutil.copytree(store, copy)
    counted, _ = hanet("stats", str(store), "--remote", server, status=0)
    assert counted["scanned"] == 120  # (a CRC failure is still a record)
    topics: dict[str, int] = {}
    for row in counted["per_minute"]:
        topics[row["topic"]] = topics.get(row["topic"], 0) + row["messages"]
    assert topics == {"Orders": 40, "Payments": 40, "Audit": 40}
    same, _ = hanet("diff", str(store), str(copy), "--remote", server, status=0)
    assert (same["ok"], same["differing"], same["master_records"]) == (True, 0, 120)
