"""Benchmark reading a commit log through a running broker (HANET_READ_LOG) against its files.

Run: ``.venv/bin/python bench/spark_live_read.py [--size-mib 64] [--message-bytes 1024]
[--repeat 3] [--tls]``

A store of ``--size-mib`` of records (16 MiB files) is written in a temporary directory and
served by a ``hanet master`` process (``--tls``: over TLS). Each round reads every record,
with the 12 columns ``hanet audit`` asks for, in this process, without Spark:

- files: ``hanet.spark.commit_log_batches`` over the store's ranges (the ``commitlog``
  source's partition reader);
- broker: ``hanet.spark.remote_batches`` over the broker's ranges (what a Spark task does with
  ``option("brokers", ...)``), over loopback, 4 MiB per request.

One line per round (MB/s each way and the ratio broker / files), then the last line is one
JSON object with every round's figures. The temporary store is removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trustme

from hanet.spark import (
    AUDIT_COLUMNS,
    TlsFiles,
    commit_log_batches,
    find_stores,
    plan_broker,
    plan_commit_log,
    remote_batches,
)
from hanet.store import CommitLogStore, Message, StoreConfig

FILE_SIZE = 16 * 1024 * 1024
ROOT = Path(__file__).resolve().parents[1]


def write_store(root: Path, size: int, message_bytes: int) -> int:
    """Records until ``size`` bytes are stored; returns the bytes written."""
    with CommitLogStore.open(root, StoreConfig(mapped_file_size=FILE_SIZE)) as store:
        i = 0
        while store.max_offset < size:
            message = Message(
                f"Topic{i % 4}",
                bytes([i % 256]) * message_bytes,
                queue_id=i % 4,
                properties={"TAGS": f"t{i % 8}", "KEYS": f"k{i}"},
            )
            assert store.put(message).ok
            i += 1
        return store.max_offset


def start_master(base: Path, root: Path, tls: bool) -> tuple[subprocess.Popen[bytes], str]:
    ready = base / "ready.json"
    argv = [
        sys.executable,
        "-m",
        "hanet",
        "master",
        "--store",
        str(root),
        "--listen",
        "127.0.0.1:0",
        "--ha-listen",
        "127.0.0.1:0",
        "--mapped-file-size",
        str(FILE_SIZE),
        "--ready-file",
        str(ready),
    ]
    if tls:
        argv += ["--tls-cert", str(base / "broker.crt"), "--tls-key", str(base / "broker.key")]
    process = subprocess.Popen(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    deadline = time.monotonic() + 60
    while not ready.exists() or not ready.read_text().strip().endswith("}"):
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the master did not start")
        time.sleep(0.05)
    return process, json.loads(ready.read_text())["broker"]


def read_files(root: Path) -> tuple[float, int]:
    started = time.perf_counter()
    rows = 0
    for store in find_stores(str(root)):
        for part in plan_commit_log(store):
            for batch in commit_log_batches(part, columns=AUDIT_COLUMNS):
                rows += batch.num_rows
    return time.perf_counter() - started, rows


def read_broker(address: str, tls: TlsFiles | None) -> tuple[float, int]:
    started = time.perf_counter()
    rows = 0
    for part in plan_broker(address, tls=tls):
        for batch in remote_batches(part, columns=AUDIT_COLUMNS):
            rows += batch.num_rows
    return time.perf_counter() - started, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=64)
    parser.add_argument("--message-bytes", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tls", action="store_true")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="hanet-live-read-"))
    process = None
    try:
        root = base / "store"
        size = write_store(root, args.size_mib * 1024 * 1024, args.message_bytes)
        tls = None
        if args.tls:
            ca = trustme.CA()
            ca.cert_pem.write_to_path(str(base / "ca.pem"))
            leaf = ca.issue_cert("127.0.0.1")
            leaf.private_key_and_cert_chain_pem.write_to_path(str(base / "broker.crt"))
            leaf.private_key_pem.write_to_path(str(base / "broker.key"))
            tls = TlsFiles.load(str(base / "ca.pem"))
        process, address = start_master(base, root, args.tls)
        rounds: list[dict[str, Any]] = []
        for n in range(args.repeat):
            file_seconds, file_rows = read_files(root)
            broker_seconds, broker_rows = read_broker(address, tls)
            assert file_rows == broker_rows, (file_rows, broker_rows)
            figures = {
                "round": n + 1,
                "rows": file_rows,
                "files_mb_s": round(size / file_seconds / 1e6, 1),
                "broker_mb_s": round(size / broker_seconds / 1e6, 1),
                "ratio": round(file_seconds / broker_seconds, 3),
            }
            rounds.append(figures)
            print(
                f"round {n + 1}: {file_rows} rows, files {figures['files_mb_s']} MB/s, "
                f"broker{' (TLS)' if args.tls else ''} {figures['broker_mb_s']} MB/s, "
                f"broker / files {figures['ratio']}x",
                flush=True,
            )
        ratios = [r["ratio"] for r in rounds]
        print(
            json.dumps(
                {
                    "bench": "spark_live_read",
                    "size_bytes": size,
                    "tls": args.tls,
                    "rounds": rounds,
                    "ratio_min": min(ratios),
                    "ratio_max": max(ratios),
                }
            )
        )
    finally:
        if process is not None:
            process.terminate()
            process.wait(10)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
