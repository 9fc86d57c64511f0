"""One real deletion cycle: ``hanet master`` as a process with small files and retention due
every hour, a producer filling several files, then a pull consumer reading below the new
minimum (moved to it, as RocketMQ answers), GET_MIN_OFFSET, a restart without
``--mapped-file-size`` and ``hanet verify`` of the trimmed store."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import trio

from hanet.client import BrokerClient, PullStatus
from hanet.protocol import (
    GetMinOffsetRequestHeader,
    GetMinOffsetResponseHeader,
    RemotingCommand,
    RequestCode,
)
from hanet.testing import HanetProcesses

pytestmark = pytest.mark.slow

FILE = 64 * 1024
EVERY_HOUR = ";".join(f"{h:02d}" for h in range(24))


async def min_offset(client: BrokerClient, topic: str, queue_id: int) -> int:
    header = GetMinOffsetRequestHeader(topic, queue_id)
    answer = await client.invoke_checked(
        RemotingCommand.request(RequestCode.GET_MIN_OFFSET, header.to_fields())
    )
    return GetMinOffsetResponseHeader.from_fields(answer.fields).offset


async def test_a_master_process_deletes_old_files_and_consumers_move_to_the_new_min(
    processes: HanetProcesses, tmp_path: Path
) -> None:
    (tmp_path / "broker.conf").write_text(
        f"deleteWhen={EVERY_HOUR}\nfileReservedTime=0\ncleanResourceInterval=200\n"
        "deleteCommitLogFilesInterval=0\nmappedFileSizeCommitLog=65536\n",
        encoding="utf-8",
    )
    ports = ("--listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0")
    config = ("--config", str(tmp_path / "broker.conf"))
    master = processes.add("master", "master", "--store", str(tmp_path / "store"), *ports, *config)
    await master.start()
    async with BrokerClient.connect(*master.address()) as client:
        body = b"r" * 1000
        for _ in range(5 * FILE // 1100):  # about 5 files
            reply = await client.put("Ret", body, queue_id=0)
            assert reply.status.value == "PUT_OK", reply
        with trio.fail_after(10):
            while (low := await min_offset(client, "Ret", 0)) == 0:  # noqa: ASYNC110
                await trio.sleep(0.1)
        moved = await client.pull("Ret", 0, 0)
        assert moved.status is PullStatus.OFFSET_TOO_SMALL
        assert moved.next_offset == moved.min_offset >= low > 0
        found = await client.pull("Ret", 0, moved.next_offset)
        assert found.status is PullStatus.FOUND
        assert found.messages[0].queue_offset == moved.next_offset
        assert found.messages[0].physical_offset % FILE == 0  # the first of a file
        status = await client.status()
        assert status.min_offset > 0 and status.min_offset % FILE == 0
        first_kept = status.min_offset
    assert await master.stop() == 0
    files = sorted(p.name for p in (tmp_path / "store" / "commitlog").iterdir())
    assert int(files[0]) == first_kept
    # a restart without --mapped-file-size (and another conf) takes the store's own size
    (tmp_path / "broker.conf").write_text("deleteWhen=04\n", encoding="utf-8")
    await master.start()
    async with BrokerClient.connect(*master.address()) as client:
        assert (await client.status()).min_offset == first_kept
        again = await client.pull("Ret", 0, 0)
        assert again.status is PullStatus.OFFSET_TOO_SMALL
    assert await master.stop() == 0
    verify = await trio.run_process(
        [sys.executable, "-m", "hanet", "verify", str(tmp_path / "store")],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert verify.returncode == 0, verify.stderr
    out = verify.stdout.decode()
    assert out.startswith("OK: ") and f"offsets {first_kept}.." in out
