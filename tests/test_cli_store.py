"""Tests of ``hanet dump`` and ``hanet verify`` (hanet/store/_cli.py), on the RocketMQ fixture."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hanet.cli import main
from hanet.store import CommitLogStore, Message, StoreConfig
from hanet.store.lowlevel import file_name

FIXTURE = Path(__file__).parent / "fixtures" / "rocketmq-store-8k"  # a real RocketMQ broker's

Capture = pytest.CaptureFixture[str]


def run(capsys: Capture, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.parametrize("path", [FIXTURE, FIXTURE / "commitlog"])
def test_verify_fixture(capsys: Capture, path: Path) -> None:
    status, out, err = run(capsys, "verify", str(path))
    assert status == 0, err
    assert out.startswith("OK: 47 messages, offsets 0..8084, end-of-file blank record at 8084")


def test_dump_fixture_text(capsys: Capture) -> None:
    status, out, _ = run(capsys, "dump", str(FIXTURE))
    assert status == 0
    lines = out.splitlines()
    assert len(lines) == 47
    assert "topic=abc" in lines[0]
    assert "crc=ok" in lines[46]


def test_dump_fixture_json(capsys: Capture) -> None:
    status, out, _ = run(capsys, "dump", str(FIXTURE), "--json", "--from", "344", "--limit", "2")
    assert status == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["physical_offset"] for r in rows] == [344, 516]
    row = rows[0]
    assert set(row) == {
        "physical_offset",
        "size",
        "magic",
        "topic",
        "queue_id",
        "queue_offset",
        "flag",
        "sys_flag",
        "born_timestamp",
        "born_host",
        "store_timestamp",
        "store_host",
        "reconsume_times",
        "prepared_transaction_offset",
        "body_crc",
        "crc_ok",
        "properties",
        "msg_id",
        "body",
    }
    assert row["queue_offset"] == 2
    assert row["crc_ok"] is True
    assert row["store_host"] == "192.168.71.1:8123"
    assert row["msg_id"] == "C0A8470100001FBB0000000000000158"
    assert row["properties"]["TAGS"] == "TAG1"
    assert row["body"] == "Once, there was a chance for me!"


def test_dump_binary_body_is_base64_and_bad_crc_is_shown(tmp_path: Path, capsys: Capture) -> None:
    with CommitLogStore.open(tmp_path, StoreConfig(mapped_file_size=4096)) as store:
        store.put(Message("T", b"\xff\xfe"))
    path = tmp_path / "commitlog" / file_name(0)
    data = bytearray(path.read_bytes())
    data[8] ^= 1  # BODYCRC
    path.write_bytes(bytes(data))
    status, out, _ = run(capsys, "dump", str(tmp_path), "--json")
    assert status == 0
    row = json.loads(out)
    assert row["body_base64"] == "//4="
    assert row["crc_ok"] is False
    assert run(capsys, "verify", str(tmp_path))[0] == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["verify", "/nonexistent/store"], "no such directory"),
        (["dump", "/nonexistent/store"], "no such directory"),
        (["verify", str(FIXTURE), "--mapped-file-size", "4096"], "not the file size 4096"),
        (["dump", str(FIXTURE), "--mapped-file-size", "1G"], "not the file size 1073741824"),
    ],
)
def test_bad_input_is_one_line(capsys: Capture, argv: list[str], message: str) -> None:
    status, _, err = run(capsys, *argv)
    assert status == 2
    assert len(err.strip().splitlines()) == 1
    assert message in err
    assert "Traceback" not in err


def test_garbage_and_not_a_store(tmp_path: Path, capsys: Capture) -> None:
    status, _, err = run(capsys, "verify", str(tmp_path))
    assert status == 2
    assert "not a store" in err
    (tmp_path / "commitlog").mkdir()
    (tmp_path / "commitlog" / file_name(0)).write_bytes(bytes(range(256)) * 32)
    status, _, err = run(capsys, "verify", str(tmp_path))
    assert status == 1
    assert err == "hanet: bad record at offset 0: unknown magic code 0x04050607\n"
    status, out, err = run(capsys, "dump", str(tmp_path / "commitlog"))
    assert (status, out) == (1, "")
    assert "offset 0" in err
    status, _, err = run(capsys, "dump", str(FIXTURE), "--from", "100")
    assert status == 1
    assert "offset 100" in err


def test_verify_checks_consume_queues(tmp_path: Path, capsys: Capture) -> None:
    with CommitLogStore.open(tmp_path, StoreConfig(mapped_file_size=4096)) as store:
        for i in range(50):
            store.put(Message("T", b"x" * i, queue_id=i % 2, properties={"TAGS": "a"}))
    status, out, _ = run(capsys, "verify", str(tmp_path))
    assert status == 0
    assert "50 messages" in out
    assert "2 consume queue(s)" in out
    cq = tmp_path / "consumequeue" / "T" / "1" / file_name(0)
    data = bytearray(cq.read_bytes())
    data[20 * 3 + 19] ^= 1  # tag hash of queue offset 3
    cq.write_bytes(bytes(data))
    status, _, err = run(capsys, "verify", str(tmp_path))
    assert status == 1
    assert "consume queue T/1 entry 3" in err
    shutil.rmtree(tmp_path / "consumequeue" / "T" / "1")
    status, _, err = run(capsys, "verify", str(tmp_path))
    assert status == 1
    assert "has no consume queue entry" in err


def test_empty_commit_log_dir(tmp_path: Path, capsys: Capture) -> None:
    (tmp_path / "commitlog").mkdir()
    status, _, err = run(capsys, "verify", str(tmp_path))
    assert status == 2
    assert "no commit log files" in err


def test_verify_fails_on_a_zeroed_hole_followed_by_data(tmp_path: Path, capsys: Capture) -> None:
    with CommitLogStore.open(tmp_path, StoreConfig(mapped_file_size=4096)) as store:
        results = [store.put(Message("T", b"x" * 40)) for _ in range(10)]
    hole = results[4].wrote_offset
    path = tmp_path / "commitlog" / file_name(0)
    data = bytearray(path.read_bytes())
    data[hole : hole + results[4].wrote_size] = bytes(results[4].wrote_size)
    path.write_bytes(bytes(data))
    status, out, err = run(capsys, "verify", str(tmp_path))
    assert status == 1, out
    assert f"offset {hole}" in err
    assert "hole" in err


def test_dump_into_a_closed_pipe_exits_quietly(tmp_path: Path) -> None:
    with CommitLogStore.open(tmp_path / "s", StoreConfig(mapped_file_size=1 << 20)) as store:
        for _ in range(5000):
            store.put(Message("T", b"x" * 100))
    out = subprocess.run(
        f"{sys.executable} -m hanet dump {tmp_path / 's'} | head -1",
        shell=True,
        capture_output=True,
        text=True,
        check=True,
        executable="/bin/bash",
    )
    assert out.stdout.startswith("           0 size=")
    assert out.stderr == ""


def test_file_size_flag_takes_suffixes_and_a_mismatch_names_the_right_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with CommitLogStore.open(tmp_path / "s", StoreConfig(mapped_file_size=64 * 1024)) as store:
        store.put(Message("T", b"x"))
    assert main(["verify", str(tmp_path / "s"), "--mapped-file-size", "64K"]) == 0
    assert main(["verify", str(tmp_path / "s"), "--mapped-file-size", "1M"]) == 2
    err = capsys.readouterr().err
    assert "has 65536 bytes, not the file size 1048576" in err
    assert "--mapped-file-size 65536" in err


def test_verify_on_a_live_slave_counts_undispatched_tail(tmp_path: Path, capsys: Capture) -> None:
    with CommitLogStore.open(tmp_path, StoreConfig(mapped_file_size=4096)) as store:
        for i in range(20):
            store.put(Message("T", b"x" * i, queue_id=0))
    cq = tmp_path / "consumequeue" / "T" / "0" / file_name(0)
    data = bytearray(cq.read_bytes())
    data[17 * 20 : 20 * 20] = bytes(60)  # the last three entries not written yet
    cq.write_bytes(bytes(data))
    status, out, _ = run(capsys, "verify", str(tmp_path))
    assert status == 0, out
    assert "20 messages" in out and "3 message(s) past" in out and "not dispatched yet" in out
