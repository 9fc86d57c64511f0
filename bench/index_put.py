"""Benchmark what the index files (``messageIndexEnable``) cost puts, and lookups by key.

Run: ``.venv/bin/python bench/index_put.py [--messages N] [--body-size BYTES] [--dir DIR]``

Figures, all measured in the same run, each put run alternated twice and the best kept:

- baseline: batched puts (64 a batch) of messages with a ``KEYS`` key and a ``UNIQ_KEY`` (what
  RocketMQ's producers send) into a store without the index.
- indexed: the same puts with the index (RocketMQ's default): puts/s and the ratio to the
  baseline (goal >= 0.3: a put with the index costs at most about 3.3 times one without).
- lookups: ``query_index`` of 1,000 keys spread over the log, mean microseconds each.

A table for humans, then the last line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from hanet.store import CommitLogStore, Message, StoreConfig

FILE_SIZE = 256 * 1024 * 1024
BATCH = 64


def make_messages(count: int, body_size: int) -> list[Message]:
    body = b"x" * body_size
    return [
        Message(
            "BenchTopic",
            body,
            queue_id=i % 4,
            properties={
                "TAGS": "bench",
                "KEYS": f"order-{i}",
                "UNIQ_KEY": f"7F0000010A2B18B4AAC2{i:012X}",
            },
        )
        for i in range(count)
    ]


def bench_puts(root: Path, messages: list[Message], index: bool) -> tuple[float, float]:
    """Seconds for the puts, and mean seconds per lookup (0 without the index)."""
    config = StoreConfig(mapped_file_size=FILE_SIZE, message_index_enable=index)
    with CommitLogStore.open(root, config) as store:
        started = time.perf_counter()
        for i in range(0, len(messages), BATCH):
            store.put_batch(messages[i : i + BATCH])
        seconds = time.perf_counter() - started
        lookup = 0.0
        if index:
            step = max(len(messages) // 1000, 1)
            keys = [f"order-{i}" for i in range(0, len(messages), step)]
            started = time.perf_counter()
            for key in keys:
                assert store.query_index("BenchTopic", key, 32, 0, 2**62)[0], key
            lookup = (time.perf_counter() - started) / len(keys)
    return seconds, lookup


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--body-size", type=int, default=256)
    parser.add_argument(
        "--dir", type=Path, default=None, help="where to write (default: a tmp dir)"
    )
    args = parser.parse_args(argv)
    messages = make_messages(args.messages, args.body_size)
    base = indexed = float("inf")
    lookup = 0.0
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for run in range(2):
            seconds, _ = bench_puts(Path(tmp) / f"plain{run}", messages, False)
            base = min(base, seconds)
            seconds, lookup = bench_puts(Path(tmp) / f"indexed{run}", messages, True)
            indexed = min(indexed, seconds)
    n = len(messages)
    ratio = base / indexed
    print(f"{n} messages of {args.body_size} B body, KEYS and UNIQ_KEY each, {BATCH} a batch")
    print(f"{'':<36}{'puts/s':>12}{'ratio':>8}")
    print(f"{'baseline: no index':<36}{n / base:>12,.0f}{1.0:>8.3f}")
    print(f"{'indexed (messageIndexEnable)':<36}{n / indexed:>12,.0f}{ratio:>8.3f}")
    print(f"lookup by key: {lookup * 1e6:.1f} us")
    figures = {
        "messages": n,
        "body_size": args.body_size,
        "baseline_puts_per_s": round(n / base),
        "indexed_puts_per_s": round(n / indexed),
        "indexed_ratio": round(ratio, 3),
        "lookup_us": round(lookup * 1e6, 1),
        "goal_indexed_ratio": 0.3,
        "ok": ratio >= 0.3,
    }
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
