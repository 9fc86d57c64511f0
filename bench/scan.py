"""Benchmark the native record scanner against the pure-Python one on the same files.

Run: ``.venv/bin/python bench/scan.py [--mib N] [--repeat N] [--dir DIR]``

For 1 KiB and 100-byte bodies, a commit log file of ``--mib`` MiB is written (records at
their own physical offsets, TAGS and KEYS properties, 8 queues), mapped and pre-faulted, and
scanned with every check on (magic, sizes, UTF-8, body CRC, PHYSICALOFFSET; with ``--crc32``
the records carry the whole-record CRC property and it is checked too) by:

- ``native``: ``hanet.store.lowlevel.native_scan`` (``_speedups.c``: one call, packed rows);
- ``python``: ``scan_index_py``, the reference with the identical output (RecordScanner and
  the tags hash of each record);
- ``RecordScanner``: bare iteration over the records (what validation cost before, with no
  tags hash): a stricter baseline.

Figures: records/s, the ratio native / python (goal >= 15x) and native / RecordScanner, and
native validation MB/s as a fraction of reading the same bytes from the warm mapping (copying
it 256 KiB at a time into one buffer that stays in the CPU cache: the mapping's read
bandwidth, with no write traffic to memory). Best of
``--repeat`` runs. A table, then the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import mmap
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hanet.store import MessageRecord, encode_record
from hanet.store.lowlevel import RecordScanner, encode_blank, native_scan, scan_index_py


def write_file(path: Path, size: int, body_size: int, crc32: bool = False) -> int:
    """A commit log file of ``size`` bytes: records, then a blank record. Returns the count.
    ``crc32``: records end with the whole-record CRC property, as the store writes them."""
    data = bytearray()
    count = 0
    while True:
        record = encode_record(
            MessageRecord.create(
                topic="BenchTopic",
                body=(b"%08d" % count) * (body_size // 8) + b"x" * (body_size % 8),
                queue_id=count % 8,
                queue_offset=count // 8,
                physical_offset=len(data),
                store_timestamp=1700000000000 + count,
                properties={"TAGS": f"tag{count % 16}", "KEYS": f"k{count}"},
                crc32=crc32,
            ),
            seal=crc32,
        )
        if len(data) + len(record) + 8 > size:
            break
        data += record
        count += 1
    data += encode_blank(size - len(data))
    data += bytes(size - len(data))
    path.write_bytes(data)
    return count


def best(repeat: int, run: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def bench_file(path: Path, count: int, repeat: int) -> dict[str, Any]:
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapping:
        view = memoryview(mapping)
        chunk = 256 * 1024
        small = bytearray(chunk)  # stays in the cache: reading costs the mapping's reads only
        for i in range(0, len(view), chunk):  # pre-fault: the mapping is warm from here on
            small[: len(view[i : i + chunk])] = view[i : i + chunk]
        figures: dict[str, Any] = {"records": count, "bytes": len(view)}
        native = native_scan
        if native is not None:
            result = native(view, 0, None, 0, check_physical_offset=True)
            assert result.records == count and result.code == 1, result[:5]
            assert result == scan_index_py(view, 0, None, 0, check_physical_offset=True)
            del result
            native_s = best(repeat, lambda: native(view, 0, None, 0, check_physical_offset=True))
            figures["native_records_s"] = count / native_s
            figures["native_mb_s"] = len(view) / native_s / 1e6
        python_s = best(
            max(1, repeat // 2), lambda: scan_index_py(view, 0, None, 0, check_physical_offset=True)
        )
        figures["python_records_s"] = count / python_s

        def bare() -> None:
            for _ in RecordScanner(view, check_physical_offset=True):
                pass

        bare_s = best(max(1, repeat // 2), bare)
        figures["recordscanner_records_s"] = count / bare_s

        def read() -> None:
            for i in range(0, len(view), chunk):
                small[:] = view[i : i + chunk]

        read_s = best(repeat * 3, read)
        figures["read_mb_s"] = len(view) / read_s / 1e6
        if native is not None:
            figures["ratio_vs_python"] = python_s / native_s
            figures["ratio_vs_recordscanner"] = bare_s / native_s
            figures["native_fraction_of_read"] = read_s / native_s
        view.release()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mib", type=int, default=32, help="file size in MiB (default 32)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per figure, best kept")
    parser.add_argument("--dir", type=Path, default=None, help="where to write the files")
    parser.add_argument(
        "--crc32",
        action="store_true",
        help="records with the whole-record CRC property (as the store writes them), checked",
    )
    args = parser.parse_args()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for name, body in (("1KiB", 1024), ("100B", 100)):
            path = Path(tmp) / f"scan-{name}"
            count = write_file(path, args.mib << 20, body, args.crc32)
            results[name] = bench_file(path, count, args.repeat)
            path.unlink()
    sealed = ", whole-record CRC property" if args.crc32 else ""
    print(
        f"{args.mib} MiB files{sealed}, every check on (CRC, PHYSICALOFFSET), best of {args.repeat}"
    )
    header = f"{'body':<6}{'records':>10}{'native rec/s':>15}{'python rec/s':>15}"
    header += f"{'ratio':>8}{'RecordScanner rec/s':>21}{'ratio':>8}"
    header += f"{'native MB/s':>13}{'read MB/s':>11}{'fraction':>10}"
    print(header)
    for name, f in results.items():
        if "native_records_s" not in f:
            print(f"{name:<6}{f['records']:>10,}{'(not built)':>15}{f['python_records_s']:>15,.0f}")
            continue
        print(
            f"{name:<6}{f['records']:>10,}{f['native_records_s']:>15,.0f}"
            f"{f['python_records_s']:>15,.0f}{f['ratio_vs_python']:>7.1f}x"
            f"{f['recordscanner_records_s']:>21,.0f}{f['ratio_vs_recordscanner']:>7.1f}x"
            f"{f['native_mb_s']:>13,.0f}{f['read_mb_s']:>11,.0f}"
            f"{f['native_fraction_of_read']:>10.3f}"
        )
    figures: dict[str, Any] = {"bench": "scan", "mib": args.mib, "python": sys.version.split()[0]}
    figures["crc32"] = args.crc32
    for name, f in results.items():
        for key, value in f.items():
            figures[f"{name}_{key}"] = round(value, 3) if isinstance(value, float) else value
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
