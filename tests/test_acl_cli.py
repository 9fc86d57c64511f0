"""The verbs with RocketMQ's ACL: ``--acl-enable``/``--acl-file`` and ``aclEnable`` on the
brokers, ``--acl-file`` on the name server, ``--access-key/--secret-key`` (or
``$HANET_SECRET_KEY``) on put, pull, status and consume."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import trio
from broker_support import config, put, running

from hanet.broker import Broker
from hanet.channel import format_address
from hanet.cli import build_config, build_parser
from hanet.client import Credentials, signing
from hanet.errors import ConfigError
from hanet.namesrv import NameServer
from hanet.testing import cli_flags, wait_until

ACL = """
accounts:
  - accessKey: producerA
    secretKey: producer-secret
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
"""


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def test_broker_flags_and_broker_conf(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("aclEnable=true\naclFile=/etc/rocketmq/plain_acl.yml\n")
    cfg = build_config(parse("master", "--config", str(conf)))
    assert cfg.acl_enable and cfg.acl_file == Path("/etc/rocketmq/plain_acl.yml")
    cfg = build_config(
        parse("slave", "--acl-enable", "--acl-file", "x.yml", "--master-ha", "127.0.0.1:1")
    )
    assert cfg.acl_enable and cfg.acl_file == Path("x.yml")
    assert not build_config(parse("master")).acl_enable


async def test_one_key_without_the_other_is_a_one_line_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert await verb("pull", "--topic", "T", "--queue", "0", "--access-key", "ak") == 2
    assert "--access-key needs --secret-key" in capsys.readouterr().err
    consume = cli_flags(namesrv="127.0.0.1:1", group="G", topic="T")
    assert await verb("consume", *consume, "--secret-key", "sk") == 2
    assert "--secret-key needs --access-key" in capsys.readouterr().err


async def verb(*argv: str) -> int:
    args = parse(*argv)
    status: int = await args.func(args)
    return status


async def test_verbs_sign_with_access_key_and_secret_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "plain_acl.yml").write_text(ACL)
    async with running(config(tmp_path, acl_enable=True)) as (_broker, addresses):
        assert addresses.broker is not None
        address = f"127.0.0.1:{addresses.broker[1]}"
        keys = ("--access-key", "producerA", "--secret-key", "producer-secret")
        put = ("put", "--broker", address, "--topic", "T", "--body", "hi", "--queue", "0")
        assert await verb(*put, *keys) == 0
        assert capsys.readouterr().out.startswith("PUT_OK")
        assert await verb(*put, "--json") == 1  # unsigned
        summary = json.loads(capsys.readouterr().out)
        assert summary["statuses"] == {"NO_PERMISSION": 1}
        assert "No accessKey is configured" in summary["error"]
        monkeypatch.setenv("HANET_SECRET_KEY", "producer-secret")  # the secret off the line
        pull = ("pull", "--broker", address, "--topic", "T", "--queue", "0")
        assert await verb(*pull, "--access-key", "producerA") == 0
        assert "'hi'" in capsys.readouterr().out
        assert await verb("status", "--broker", address, "--json", *keys) == 0
        assert json.loads(capsys.readouterr().out)["puts"] == 1
        wrong = cli_flags(access_key="producerA", secret_key="wrong-secret")
        assert await verb("status", "--broker", address, *wrong) == 2
        assert "Check signature failed for accessKey=producerA" in capsys.readouterr().err


def test_a_broker_with_acl_and_no_file_does_not_start(tmp_path: Path) -> None:
    cfg = build_config(parse("master", "--store", str(tmp_path), "--acl-enable"))
    with pytest.raises(ConfigError, match="does not exist"):
        Broker(cfg)


async def test_namesrv_acl_file_that_does_not_load_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "plain_acl.yml"
    bad.write_text("accounts:\n  - accessKey: a: b\n")
    assert await verb("namesrv", "--listen", "127.0.0.1:0", "--acl-file", str(bad)) == 2
    assert "plain_acl.yml:2:" in capsys.readouterr().err


CLUSTER_ACL = """
accounts:
  - accessKey: brokerAdmin
    secretKey: admin-secret
    admin: true
  - accessKey: consumerA
    secretKey: consumer-secret
    defaultTopicPerm: SUB
    groupPerms: [groupA=SUB]
"""


async def test_consume_signs_with_the_name_server_and_the_broker(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(CLUSTER_ACL)
    server = NameServer(("127.0.0.1", 0), acl_file=acl)
    async with trio.open_nursery() as nursery:
        namesrv = format_address(await nursery.start(server.run))
        cfg = config(tmp_path / "m", acl_enable=True, acl_file=acl, namesrv_addr=namesrv)
        with signing(Credentials("brokerAdmin", "admin-secret")):  # registers as an admin
            async with running(cfg) as (broker, _addresses):
                await put(broker, "orders", b"for group A")
                await wait_until(lambda: server.registry.route("orders") is not None)
                options = cli_flags(from_beginning=True, max_messages=1, timeout=3)
                consume = ("consume", "--namesrv", namesrv, "--topic", "orders", *options)
                keys = ("--access-key", "consumerA", "--secret-key", "consumer-secret")
                assert await verb(*consume, "--group", "groupA", *keys) == 0
                assert "for group A" in capsys.readouterr().out
        nursery.cancel_scope.cancel()
