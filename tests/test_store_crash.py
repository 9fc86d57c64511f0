"""Crash tests: a child process putting under SYNC_FLUSH is SIGKILLed at random moments.

After each kill the store recovers; every put that answered PUT_OK must be there and intact, no
partial record may be visible (``hanet verify`` passes) and the store takes new puts.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hanet.cli import main
from hanet.store import CommitLogStore, Message, StoreConfig

CONFIG = StoreConfig(mapped_file_size=64 * 1024, consume_queue_file_size=2000)

CHILD = """
import sys
from pathlib import Path
import trio
from hanet.store import CommitLogStore, FlushDiskType, Message, StoreConfig

def body(seq):
    return (f"{seq:08d}" * (1 + seq % 97)).encode()

async def main(root, base):
    config = StoreConfig(
        mapped_file_size=64 * 1024,
        consume_queue_file_size=2000,
        flush_disk_type=FlushDiskType.SYNC_FLUSH,
    )
    store = CommitLogStore.open(Path(root), config)
    print("ready", flush=True)

    async def putter(worker):
        for n in range(1_000_000):
            seq = base + n * 4 + worker
            result = await store.put_async(Message("Crash", body(seq), queue_id=worker))
            assert result.ok, result
            print(seq, worker, result.queue_offset, result.wrote_offset, flush=True)

    async with trio.open_nursery() as nursery:
        await nursery.start(store.run)
        for worker in range(4):
            nursery.start_soon(putter, worker)

trio.run(main, sys.argv[1], int(sys.argv[2]))
"""


def body(seq: int) -> bytes:
    return (f"{seq:08d}" * (1 + seq % 97)).encode()


@pytest.mark.slow
def test_sigkill_during_sync_puts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = random.Random(20261122)
    acked: dict[tuple[int, int], tuple[int, int]] = {}  # (queue, queue offset) -> (seq, offset)
    deadline = time.monotonic() + 20
    rounds = 0
    while rounds < 12 and time.monotonic() < deadline:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(tmp_path), str(rounds * 10_000_000)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert child.stdout is not None
        assert child.stdout.readline() == b"ready\n", child.stderr.read() if child.stderr else ""
        time.sleep(rng.uniform(0.01, 0.25))
        child.send_signal(signal.SIGKILL)
        output, errors = child.communicate(timeout=30)
        assert child.returncode == -signal.SIGKILL, errors.decode()
        for line in output.decode().split("\n")[:-1]:  # the last piece may be cut
            seq, queue, queue_offset, offset = map(int, line.split())
            acked[queue, queue_offset] = (seq, offset)
        rounds += 1

        with CommitLogStore.open(tmp_path, CONFIG) as store:
            assert store.statistics().recovered_abnormally
            for (queue, queue_offset), (seq, offset) in acked.items():
                record = store.get_message("Crash", queue, queue_offset)
                assert record is not None, (queue, queue_offset)
                assert record.physical_offset == offset
                assert record.body == body(seq)
            assert store.put(Message("Crash", b"after the crash", queue_id=9)).ok
        assert main(["verify", str(tmp_path)]) == 0, capsys.readouterr().err
    assert rounds >= 5
    assert len(acked) > 100
