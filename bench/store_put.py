"""Benchmark the commit log store's puts against raw appends to a warm mapping.

Run: ``.venv/bin/python bench/store_put.py [--messages N] [--body-size BYTES] [--dir DIR]``

Figures, all measured in the same run:

- baseline: the records a put would write, pre-encoded, appended one by one to a warm
  (pre-faulted) mapped file: the memory-copy ceiling a Python store can approach.
- single puts and batched puts under ASYNC_FLUSH: puts/s, MB/s and their ratio to the
  baseline (goal >= 0.5 for batched puts).
- SYNC_FLUSH with 8 concurrent putters against 1 (each ``put_async`` waits for its fsync;
  group commit lets concurrent puts share one): goal >= 4x.

A table for humans, then the last line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from hanet.store import (
    CommitLogStore,
    FlushDiskType,
    Message,
    MessageRecord,
    StoreConfig,
    encode_record,
)
from hanet.store.lowlevel import MappedFile, file_name

FILE_SIZE = 256 * 1024 * 1024


def make_messages(count: int, body_size: int) -> list[Message]:
    return [
        Message(
            "BenchTopic",
            (b"%08d" % i) * (body_size // 8) + b"x" * (body_size % 8),
            queue_id=i % 8,
            properties={"TAGS": "bench", "KEYS": f"k{i}"},
        )
        for i in range(count)
    ]


def bench_baseline(directory: Path, messages: list[Message]) -> float:
    """Seconds to append the pre-encoded records to a warm mapping, one slice each."""
    records = [
        encode_record(
            MessageRecord.create(
                topic=m.topic,
                body=m.body,
                queue_id=m.queue_id,
                properties=m.properties,
                born_timestamp=1,
                store_timestamp=1,
            )
        )
        for m in messages
    ]
    mapped = MappedFile.create(directory / file_name(0), 0, FILE_SIZE)
    try:
        view = mapped.view
        start = time.perf_counter()
        pos = 0
        for data in records:
            end = pos + len(data)
            view[pos:end] = data
            pos = end
        mapped.wrote = pos
        return time.perf_counter() - start
    finally:
        mapped.delete()


def bench_puts(directory: Path, messages: list[Message], batch: int) -> float:
    """Seconds for ``put`` (batch 1) or ``put_batch`` of ``batch`` messages (ASYNC_FLUSH)."""
    config = StoreConfig(mapped_file_size=FILE_SIZE)
    store = CommitLogStore.open(directory, config)
    try:
        # creates the first file; its pages are faulted in by the puts that write them, as in
        # a broker (warm_mapped_files is off by default, RocketMQ's warmMapedFileEnable)
        store.put(Message("Warm", b"up"))
        start = time.perf_counter()
        if batch == 1:
            put = store.put
            for message in messages:
                put(message)
        else:
            for i in range(0, len(messages), batch):
                store.put_batch(messages[i : i + batch])
        elapsed = time.perf_counter() - start
        assert store.max_queue_offset("BenchTopic", 0) == (len(messages) + 7) // 8
        return elapsed
    finally:
        store.close()


async def _sync_puts(directory: Path, putters: int, duration: float) -> tuple[int, int]:
    config = StoreConfig(
        mapped_file_size=64 * 1024 * 1024, flush_disk_type=FlushDiskType.SYNC_FLUSH
    )
    store = CommitLogStore.open(directory, config)
    done = 0
    body = b"s" * 1024
    try:
        await store.put_async(Message("Warm", b"up"))
        flushes_before = store.statistics().flushes
        deadline = trio.current_time() + duration

        async def putter(queue_id: int) -> None:
            nonlocal done
            message = Message("SyncTopic", body, queue_id=queue_id)
            while trio.current_time() < deadline:
                result = await store.put_async(message)
                assert result.ok, result
                done += 1

        async with trio.open_nursery() as nursery:
            for i in range(putters):
                nursery.start_soon(putter, i)
        return done, store.statistics().flushes - flushes_before
    finally:
        await store.aclose()


def bench_sync(directory: Path, putters: int, duration: float) -> tuple[float, int]:
    """(puts per second, fsyncs) of ``putters`` concurrent SYNC_FLUSH putters."""
    done, flushes = trio.run(_sync_puts, directory, putters, duration)
    return done / duration, flushes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--body-size", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--sync-seconds", type=float, default=2.0)
    parser.add_argument(
        "--dir", type=Path, default=None, help="where to write (default: a tmp dir)"
    )
    args = parser.parse_args(argv)

    messages = make_messages(args.messages, args.body_size)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)
        base = bench_baseline(root, messages)
        single = bench_puts(root / "single", messages, 1)
        batched = bench_puts(root / "batched", messages, args.batch)
        sync_1, fsyncs_1 = bench_sync(root / "sync1", 1, args.sync_seconds)
        sync_8, fsyncs_8 = bench_sync(root / "sync8", 8, args.sync_seconds)

    record_bytes = len(
        encode_record(
            MessageRecord.create(
                topic="BenchTopic",
                body=messages[0].body,
                properties=messages[0].properties,
            )
        )
    )
    n = len(messages)

    def rate(seconds: float) -> tuple[float, float]:
        return n / seconds, n * record_bytes / seconds / 1e6

    rows: list[tuple[str, float, float, float]] = []
    for name, seconds in (
        ("baseline: raw append to a warm mapping", base),
        ("put (single)", single),
        (f"put_batch ({args.batch} per batch)", batched),
    ):
        puts, mbs = rate(seconds)
        rows.append((name, puts, mbs, base / seconds))
    print(f"{n} messages of {args.body_size} B body ({record_bytes} B records), ASYNC_FLUSH")
    print(f"{'':<42}{'puts/s':>12}{'MB/s':>10}{'ratio':>8}")
    for name, puts, mbs, ratio in rows:
        print(f"{name:<42}{puts:>12,.0f}{mbs:>10,.1f}{ratio:>8.3f}")
    print(f"SYNC_FLUSH, {args.sync_seconds:.1f} s each, 1 KiB bodies")
    print(f"{'1 putter':<42}{sync_1:>12,.0f}{'':>10}{'':>8}   fsyncs {fsyncs_1}")
    print(
        f"{'8 concurrent putters':<42}{sync_8:>12,.0f}{'':>10}{sync_8 / sync_1:>8.2f}x"
        f"  fsyncs {fsyncs_8}"
    )
    figures: dict[str, Any] = {
        "messages": n,
        "body_size": args.body_size,
        "record_size": record_bytes,
        "baseline_puts_per_s": round(rows[0][1]),
        "baseline_mb_per_s": round(rows[0][2], 1),
        "single_puts_per_s": round(rows[1][1]),
        "single_mb_per_s": round(rows[1][2], 1),
        "single_ratio": round(rows[1][3], 3),
        "batch_size": args.batch,
        "batched_puts_per_s": round(rows[2][1]),
        "batched_mb_per_s": round(rows[2][2], 1),
        "batched_ratio": round(rows[2][3], 3),
        "sync_1_puts_per_s": round(sync_1),
        "sync_8_puts_per_s": round(sync_8),
        "sync_8_vs_1": round(sync_8 / sync_1, 2),
        "sync_1_fsyncs": fsyncs_1,
        "sync_8_fsyncs": fsyncs_8,
    }
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
