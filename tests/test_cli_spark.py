"""``hanet audit|diff|stats`` as a user runs them: a separate process, stdout a pipe.

Each test here that runs a job starts its own JVM (10-20 s), so there are few of them; the jobs
themselves are tested in test_spark_pipeline.py on one shared session.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hanet.store import CommitLogStore, Message, StoreConfig

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[1]
CONFIG = StoreConfig(mapped_file_size=4096, consume_queue_file_size=400)


def make_store(root: Path, count: int) -> None:
    with CommitLogStore.open(root, CONFIG) as store:
        for i in range(count):
            topic = ("Orders", "Payments")[i % 2]
            message = Message(topic, b"x" * (30 + i), born_timestamp=1_700_000_000_000 + i)
            assert store.put(message).ok


def hanet(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m hanet ARGV`` with stdout and stderr pipes (not terminals)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), HANET_SPARK_CDS="0")  # no 150 MB archive
    env.pop("PYSPARK_GATEWAY_PORT", None)
    return subprocess.run(
        [sys.executable, "-m", "hanet", *argv],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=timeout,
    )


def test_stats_on_a_pipe_is_quiet_and_counts_each_store(tmp_path: Path) -> None:
    master, slave = tmp_path / "master", tmp_path / "slave"
    make_store(master, 30)
    make_store(slave, 20)  # a slave that is behind: its counts are its own
    done = hanet("stats", str(master), str(slave), "--json", "--driver-rows", "0")
    assert done.returncode == 0, done.stderr
    assert "[Stage" not in done.stderr
    assert "WARN" not in done.stderr
    assert "Setting default log level" not in done.stderr
    report = json.loads(done.stdout)  # stdout is the JSON document and nothing else
    assert "stores read by the executors" in done.stderr
    assert report["command"] == "stats"
    assert report["ok"] is True
    assert report["scanned"] == 50
    counts: dict[tuple[str, str], int] = {}
    for row in report["per_minute"]:
        key = (row["store"], row["topic"])
        counts[key] = counts.get(key, 0) + row["messages"]
    assert counts == {
        (str(master), "Orders"): 15,
        (str(master), "Payments"): 15,
        (str(slave), "Orders"): 10,
        (str(slave), "Payments"): 10,
    }
    latency = {(r["store"], r["topic"]): r["messages"] for r in report["latency"]}
    assert latency == counts
    assert [r["size"] for r in report["largest"]] == sorted(
        (r["size"] for r in report["largest"]), reverse=True
    )


def test_an_unreachable_master_is_one_line_and_status_2(tmp_path: Path) -> None:
    make_store(tmp_path / "store", 3)
    started = time.monotonic()
    done = hanet("stats", str(tmp_path / "store"), "--spark-master", "spark://127.0.0.1:1")
    assert time.monotonic() - started < 60
    assert done.returncode == 2
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("hanet: cannot reach the Spark master spark://127.0.0.1:1")


def test_a_small_audit_with_json_says_what_it_does_on_stderr(tmp_path: Path) -> None:
    make_store(tmp_path / "store", 40)
    done = hanet("audit", str(tmp_path / "store"), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)  # the progress lines are not on stdout
    assert (report["scanned"], report["problem_count"]) == (40, 0)
    assert [row["messages"] for row in report["stores"]] == [40]
    # pyspark may warn first (pandas 3 installed, say); a stage past 5 s (a loaded machine)
    # shows its progress lines among them
    progress = [line for line in done.stderr.splitlines() if line.startswith("hanet: stage ")]
    assert all(" tasks, " in line for line in progress)
    lines = [line for line in done.stderr.splitlines() if line not in progress]
    at = next(i for i, line in enumerate(lines) if line.startswith("Spark "))
    assert "stores read in the driver" in lines[at]
    assert lines[at + 1] == f"auditing {tmp_path / 'store'}"
    assert lines[at + 2].startswith("scanned 40 rows in ")
    assert lines[-1] == f"{tmp_path / 'store'}: 40 messages, {report['stores'][0]['bytes']} " + (
        "bytes in 2 files, no problems"
    )
    assert "WARN" not in done.stderr


def test_remote_without_a_connect_server_is_one_line_and_status_2(tmp_path: Path) -> None:
    make_store(tmp_path / "store", 3)
    done = hanet("audit", str(tmp_path / "store"), "--json", "--remote", "sc://127.0.0.1:1")
    assert done.returncode == 2
    assert done.stdout == ""
    line = done.stderr.strip().splitlines()[-1]
    # with pyspark's Connect client installed it is the connection that fails; without, the
    # message says what to install
    assert line.startswith(
        ("hanet: cannot reach Spark Connect at sc://127.0.0.1:1", "hanet: --remote needs")
    ), done.stderr


def test_spark_connect_on_a_taken_port_is_one_line_and_status_2() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = hanet("spark-connect", "--listen", f"127.0.0.1:{port}")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == f"hanet: 127.0.0.1:{port} is taken: something listens there already\n"
