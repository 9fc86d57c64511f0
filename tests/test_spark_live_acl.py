"""Reading a live broker's log under RocketMQ's plain ACL (in process, loopback): the Spark
reader signs HANET_READ_LOG with ``accessKey``/``secretKey``, which must name an admin account;
unsigned or non-admin reads fail with the broker's reason; the options come in pairs."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import trio
from broker_support import config, put, running

from hanet.cli import build_parser
from hanet.protocol import Credentials

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from hanet.spark import LogReadError, broker_credentials, plan_broker, remote_batches

ACL = """
accounts:
  - accessKey: producerA
    secretKey: producer-secret
    defaultTopicPerm: PUB|SUB
  - accessKey: operator
    secretKey: operator-secret
    admin: true
"""

OPERATOR = Credentials("operator", "operator-secret")


def read_all(address: str, credentials: Credentials | None) -> list[int]:
    """The physical offsets of every record a signed read of ``address`` gives."""
    offsets: list[int] = []
    for part in plan_broker(address, credentials=credentials):
        for batch in remote_batches(part):
            offsets += batch.column("physical_offset").to_pylist()
    return offsets


async def test_signed_reads_by_an_admin_account_see_every_record(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "plain_acl.yml").write_text(ACL)
    async with running(config(tmp_path, acl_enable=True)) as (broker, addresses):
        assert addresses.broker is not None
        written = [(await put(broker, "T", b"x" * (10 + i))).wrote_offset for i in range(30)]
        address = f"127.0.0.1:{addresses.broker[1]}"

        got = await trio.to_thread.run_sync(read_all, address, OPERATOR)
        assert got == written

        with pytest.raises(LogReadError, match="No accessKey is configured"):
            await trio.to_thread.run_sync(read_all, address, None)
        producer = Credentials("producerA", "producer-secret")
        with pytest.raises(LogReadError, match="Need admin permission"):
            await trio.to_thread.run_sync(read_all, address, producer)
        wrong = Credentials("operator", "not-the-secret")
        with pytest.raises(LogReadError, match="Check signature failed"):
            await trio.to_thread.run_sync(read_all, address, wrong)


def test_the_acl_options_come_in_pairs() -> None:
    assert broker_credentials({}) is None
    credentials = broker_credentials({"accessKey": "operator", "secretKey": "hush-42"})
    assert credentials == Credentials("operator", "hush-42")
    assert "hush-42" not in repr(credentials)  # the secret stays out of Spark's logs
    with pytest.raises(ValueError, match="option secretKey is needed"):
        broker_credentials({"accessKey": "operator"})
    with pytest.raises(ValueError, match="option accessKey is needed"):
        broker_credentials({"secretKey": "s"})


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(argv)


async def test_audit_with_one_key_is_a_one_line_error_before_spark(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = parse("audit", "--broker", "127.0.0.1:1", "--access-key", "operator")
    assert await args.func(args) == 2
    err = capsys.readouterr().err
    assert "--access-key needs --secret-key" in err
    assert "Traceback" not in err
