"""``hanet audit`` / ``stats`` on a real standalone Spark cluster: a master and two workers started
from the installed pyspark (127.0.0.1 only) by the test itself, with the same answers as
``local[2]``. The executors are separate JVMs with their own Python workers, so the data sources
and jobs are shipped and run as they would be on other machines (reading files every executor
can open)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hanet.store import CommitLogStore, Message, StoreConfig
from hanet.testing import cli_flags

pyspark = pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
SPARK_HOME = Path(pyspark.__file__).parent
CONFIG = StoreConfig(mapped_file_size=8192, consume_queue_file_size=400)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def spark_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYSPARK_GATEWAY_PORT", None)
    env.update(
        SPARK_HOME=str(SPARK_HOME),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOG_DIR=str(tmp_path / "logs"),
        SPARK_WORKER_DIR=str(tmp_path / "work"),
        PYSPARK_PYTHON=sys.executable,  # the executors' Python workers import this hanet
        PYTHONPATH=str(ROOT),
    )
    return env


def registered_workers(master_log: Path) -> int:
    """Workers the master has registered, from its log (its web UI port may be taken by
    another Spark on the machine, so the log is what is sure)."""
    try:
        text = master_log.read_text(errors="replace")
    except FileNotFoundError:
        return 0
    return text.count("Registering worker ")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``spark://127.0.0.1:PORT`` with two registered workers of one core each."""
    tmp = tmp_path_factory.mktemp("spark-cluster")
    env = spark_env(tmp)
    port, ui_port = free_port(), free_port()
    url = f"spark://127.0.0.1:{port}"
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    logs = tmp / "process-logs"
    logs.mkdir()
    deploy = "org.apache.spark.deploy"
    master = cli_flags(host="127.0.0.1", port=port, webui_port=ui_port)
    commands = [[spark_class, f"{deploy}.master.Master", *master]]
    for i in range(2):
        worker = cli_flags(host="127.0.0.1", cores=1, memory="1g", webui_port=free_port())
        work = cli_flags(work_dir=tmp / f"work{i}")
        commands.append([spark_class, f"{deploy}.worker.Worker", url, *worker, *work])
    processes: list[subprocess.Popen[bytes]] = []
    master_log = logs / "0.log"
    try:
        for i, command in enumerate(commands):
            with (logs / f"{i}.log").open("wb") as log:
                processes.append(
                    subprocess.Popen(
                        command,
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
            if i == 0:  # the master elected itself before the workers come
                deadline = time.monotonic() + 60
                while "New state: ALIVE" not in master_log.read_text(errors="replace"):
                    assert time.monotonic() < deadline, master_log.read_text()
                    assert processes[0].poll() is None, master_log.read_text()
                    time.sleep(0.2)
        deadline = time.monotonic() + 90
        while registered_workers(master_log) < 2:
            dead = [p for p in processes if p.poll() is not None]
            assert not dead and time.monotonic() < deadline, "\n".join(
                f.read_text() for f in sorted(logs.iterdir())
            )
            time.sleep(0.2)
        yield url
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def make_store(root: Path, count: int, *, corrupt: bool = False) -> None:
    with CommitLogStore.open(root, CONFIG) as store:
        for i in range(count):
            topic = ("Orders", "Payments", "Audit")[i % 3]
            message = Message(topic, b"y" * (20 + i % 50), born_timestamp=1_700_000_000_000 + i)
            assert store.put(message).ok
    if corrupt:  # one flipped body byte: a CRC problem for the audit to report
        path = sorted((root / "commitlog").iterdir())[0]
        data = bytearray(path.read_bytes())
        data[data.find(b"y" * 20) + 5] ^= 0xFF
        path.write_bytes(bytes(data))


def hanet(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hanet", *argv],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )


def comparable(report: dict[str, Any]) -> dict[str, Any]:
    """A report without what depends on where and how fast it ran."""
    drop = {"spark_master", "master", "seconds", "elapsed", "elapsed_seconds", "spark"}
    return {k: v for k, v in report.items() if k not in drop}


def test_audit_and_stats_on_a_standalone_cluster_answer_as_local(
    cluster: str, tmp_path: Path
) -> None:
    store, other = tmp_path / "a", tmp_path / "b"
    make_store(store, 400, corrupt=True)
    make_store(other, 150)
    env = spark_env(tmp_path)
    # each run starts a driver JVM: the cluster runs both verbs, local[2] the audit to compare
    runs = [(cluster, "audit"), (cluster, "stats"), ("local[2]", "audit")]
    reports: dict[tuple[str, str], dict[str, Any]] = {}
    for master, verb in runs:
        # on the cluster the executors read (small stores are otherwise read in the driver)
        on_cluster = ["--driver-rows", "0"] if master == cluster else []
        done = hanet(
            env, verb, str(store), str(other), "--json", "--spark-master", master, *on_cluster
        )
        assert done.returncode == (1 if verb == "audit" else 0), done.stderr[-3000:]
        reports[master, verb] = json.loads(done.stdout)
    audit = reports[cluster, "audit"]
    assert audit["ok"] is False and audit["problems"]  # the flipped byte, found on the cluster
    assert comparable(audit) == comparable(reports["local[2]", "audit"])
    stats = reports[cluster, "stats"]
    assert stats["ok"] is True and stats["scanned"] == 550
    counts: dict[str, int] = {}
    for row in stats["per_minute"]:
        counts[row["topic"]] = counts.get(row["topic"], 0) + row["messages"]
    assert counts == {"Orders": 184, "Payments": 183, "Audit": 183}
