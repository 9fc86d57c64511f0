"""Benchmark opening a store after ``kill -9`` (the ``abort`` file present) against reading the
same commit log files once.

Run: ``.venv/bin/python bench/recovery.py [--size-mib 2048] [--message-bytes 1024]
[--file-mib 1024] [--repeat 3] [--profile] [--dir bench/out/recovery]``

The store: ``--size-mib`` of records with ``--message-bytes`` bodies in ``--file-mib`` commit
log files (pre-encoded records written straight into the files, as ``bench/spark_scan.py``
does), then opened once and closed cleanly (its consume queues and checkpoint built); reused
by later runs with the same parameters. Each trial is a fresh process that opens the store
(``CommitLogStore.open``: the recovery walk with the native scanner when built, truncation,
re-dispatch of the walked records) and then kills itself with SIGKILL, so the next trial finds
the ``abort`` file again. The first kill happens before the first trial.

Figures (warm page cache, best of ``--repeat``): the open after a kill, reading every commit
log file once (``readinto`` of 1 MiB chunks), reading only the files the recovery walked, and
the ratios. ``--profile`` prints the top functions of one open (cProfile).

A table for humans, then the last line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from spark_scan import generate  # bench/ is the script's directory

from hanet.store import CommitLogStore, StoreConfig
from hanet.store.lowlevel import NATIVE_SCANNER

DEFAULT_DIR = Path(__file__).resolve().parent / "out" / "recovery"
CHUNK = 1 << 20

_TRIAL = """
import cProfile, io, json, os, pstats, signal, sys, time
from pathlib import Path
from hanet.store import CommitLogStore, StoreConfig
root, file_size, profile = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
abnormal = (root / "abort").exists()
profiler = cProfile.Profile() if profile else None
started = time.perf_counter()
if profiler:
    profiler.enable()
store = CommitLogStore.open(root, StoreConfig(mapped_file_size=file_size))
if profiler:
    profiler.disable()
seconds = time.perf_counter() - started
r = store.recovery
report = {"seconds": seconds, "abnormal": abnormal, "start_offset": r.start_offset,
          "end_offset": r.end_offset, "records": r.records}
if profiler:
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(12)
    report["profile"] = out.getvalue()
print(json.dumps(report), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def trial(root: Path, file_size: int, profile: bool = False) -> dict[str, Any]:
    """Open the store in a fresh process that then dies by SIGKILL; its report."""
    out = subprocess.run(
        [sys.executable, "-c", _TRIAL, str(root), str(file_size), "1" if profile else "0"],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != -9:
        raise RuntimeError(f"the trial did not die by SIGKILL ({out.returncode}): {out.stderr}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def read_files(paths: list[Path]) -> tuple[int, float]:
    """(bytes, seconds) for reading ``paths`` once, 1 MiB at a time."""
    buf = bytearray(CHUNK)
    total = 0
    started = time.perf_counter()
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while n := f.readinto(buf):
                total += n
    return total, time.perf_counter() - started


def prepare(root: Path, size: int, body: int, file_size: int) -> dict[str, Any]:
    """The store's commit log (reused when the parameters match), opened once and closed."""
    marker = root / "spark-scan.json"
    before = marker.read_text() if marker.exists() else None
    store = generate(root, size, body, file_size)
    if before != marker.read_text() or not (root / "checkpoint").exists():
        for name in ("abort", "checkpoint"):
            (root / name).unlink(missing_ok=True)
        opened = CommitLogStore.open(root, StoreConfig(mapped_file_size=file_size))
        opened.close()
    return store


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=512, help="data size (512; 2048: 2 GiB)")
    parser.add_argument("--message-bytes", type=int, default=1024, help="body size (1024)")
    parser.add_argument("--file-mib", type=int, default=1024, help="commit log file size (1024)")
    parser.add_argument("--repeat", type=int, default=3, help="trials, best kept (3)")
    parser.add_argument("--profile", action="store_true", help="profile one open (cProfile)")
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="store directory")
    args = parser.parse_args(argv)
    file_size = args.file_mib << 20
    root = args.dir / f"{args.size_mib}m-{args.message_bytes}b-{args.file_mib}f"

    started = time.perf_counter()
    store = prepare(root, args.size_mib << 20, args.message_bytes, file_size)
    ready_s = time.perf_counter() - started
    files = sorted((root / "commitlog").iterdir())

    trial(root, file_size)  # the first kill -9: the abort file is there from now on
    trials = [trial(root, file_size) for _ in range(args.repeat)]
    assert all(t["abnormal"] for t in trials)
    opened = min(trials, key=lambda t: t["seconds"])
    walked = [p for p in files if int(p.name) + file_size > opened["start_offset"]]
    data, read_all_s = min((read_files(files) for _ in range(args.repeat)), key=lambda r: r[1])
    walked_bytes, read_walked_s = min(
        (read_files(walked) for _ in range(args.repeat)), key=lambda r: r[1]
    )
    profile = trial(root, file_size, profile=True)["profile"] if args.profile else None

    open_s = opened["seconds"]
    print(
        f"store: {root} ({store['records']} records of {store['record_size']} bytes, "
        f"{store['data_bytes'] / 2**20:.0f} MiB in {len(files)} files of {args.file_mib} MiB; "
        f"ready in {ready_s:.1f} s); native scanner: {NATIVE_SCANNER}"
    )
    print(
        f"recovery after kill -9 walked {opened['records']} records from offset "
        f"{opened['start_offset']} to {opened['end_offset']} ({len(walked)} of {len(files)} files)"
    )
    print(f"{'(best of ' + str(args.repeat) + ')':44} {'seconds':>8} {'MB/s':>8} {'x read':>8}")
    for name, seconds, size in (
        ("read every commit log file once", read_all_s, data),
        ("read the files the recovery walked", read_walked_s, walked_bytes),
        ("open after kill -9 (abort file present)", open_s, data),
    ):
        print(f"{name:44} {seconds:8.3f} {size / seconds / 1e6:8.0f} {seconds / read_all_s:7.2f}x")
    if profile:
        print(profile)
    figures = {
        "bench": "recovery",
        "native_scanner": NATIVE_SCANNER,
        "data_bytes": store["data_bytes"],
        "file_bytes": data,
        "files": len(files),
        "records": store["records"],
        "walked_records": opened["records"],
        "walked_files": len(walked),
        "open_after_kill_s": round(open_s, 3),
        "read_all_files_s": round(read_all_s, 3),
        "read_walked_files_s": round(read_walked_s, 3),
        "ratio_open_vs_read_all": round(open_s / read_all_s, 3),
        "ratio_open_vs_read_walked": round(open_s / read_walked_s, 3),
    }
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
