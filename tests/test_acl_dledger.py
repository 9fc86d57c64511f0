"""RocketMQ's ACL on a DLedger node's broker port (``hanet dledger --acl-enable``), as on a
classic broker's: unsigned or wrongly signed requests and another group's offsets refused,
signed ones served; a file that does not load stops the start."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from hanet.testing import HanetProcesses

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]

ACL = """
globalWhiteRemoteAddresses: []
accounts:
  - accessKey: producerA
    secretKey: producer-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - Orders=PUB|SUB
    groupPerms:
      - shop=SUB
"""


def hanet(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hanet", *argv],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        timeout=60,
    )


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# the node's files are reserved whole on the disk: keep them small
SMALL_FILES = ["--data-file-size", "1048576", "--index-file-size", "65536"]
SMALL_FILES += ["--mapped-file-size", "1048576"]


async def test_a_dledger_node_checks_requests_against_plain_acl(
    processes: HanetProcesses, tmp_path: Path
) -> None:
    store = tmp_path / "n0"
    (store / "config").mkdir(parents=True)
    (store / "config" / "plain_acl.yml").write_text(ACL)
    peers = f"n0=127.0.0.1:{free_port()}"
    group = ("--group", "g", "--id", "n0", "--peers", peers, "--election-timeout", "0.3")
    node = ("--store", str(store), "--listen", "127.0.0.1:0", "--acl-enable", *SMALL_FILES)
    info = (await processes.start("n0", "dledger", *group, *node)).ready
    broker = info["broker"]
    keys = ("--access-key", "producerA", "--secret-key", "producer-secret")
    put = ("put", "--broker", broker, "--topic", "Orders", "--body", "hi", "--queue", "0")
    with trio.fail_after(30):  # the single node elects itself
        while (done := hanet(*put, *keys)).returncode != 0:
            assert "NO_PERMISSION" not in done.stdout + done.stderr, done.stdout + done.stderr
            await trio.sleep(0.2)
    unsigned = hanet(*put, "--json")
    assert unsigned.returncode == 1
    assert "No accessKey is configured" in json.loads(unsigned.stdout)["error"]
    wrong = hanet(*put, "--access-key", "producerA", "--secret-key", "nope", "--json")
    assert "Check signature failed for accessKey=producerA" in wrong.stdout + wrong.stderr
    payments = ("--topic", "Payments", "--body", "x", "--queue", "0", "--json")
    other = hanet("put", "--broker", broker, *payments, *keys)
    assert "No default permission for topic:Payments" in other.stdout + other.stderr
    pull = ("pull", "--broker", broker, "--topic", "Orders", "--queue", "0", *keys)
    refused = hanet(*pull)  # its group (hanet_pull) has no permission
    assert "No default permission for group:hanet_pull" in refused.stderr, refused.stderr
    acl = store / "config" / "plain_acl.yml"
    acl.write_text(ACL.replace("      - shop=SUB", "      - shop=SUB\n      - hanet_pull=SUB"))
    with trio.fail_after(10):  # reloaded within a second or so
        while (done := hanet(*pull)).returncode != 0:  # noqa: ASYNC110
            await trio.sleep(0.2)
    assert "'hi'" in done.stdout, done.stdout + done.stderr
    assert await processes["n0"].stop(seconds=20) == 0


def test_a_dledger_node_whose_acl_file_does_not_load_exits_2(tmp_path: Path) -> None:
    done = hanet(
        "dledger",
        "--group",
        "g",
        "--id",
        "n0",
        "--peers",
        f"n0=127.0.0.1:{free_port()}",
        "--store",
        str(tmp_path / "n0"),
        "--listen",
        "127.0.0.1:0",
        "--acl-enable",
    )
    assert done.returncode == 2
    assert "plain_acl.yml" in done.stderr and "does not exist" in done.stderr
