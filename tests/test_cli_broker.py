"""The broker verbs in-process: settings precedence, one-line errors, put/pull/status output."""

from __future__ import annotations

import json
import logging
import socket
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from hanet.broker import Broker, BrokerAddresses
from hanet.cli import build_config, build_parser, main
from hanet.ha import BrokerConfig, BrokerRole
from hanet.store import FlushDiskType
from hanet.testing import cli_flags, wait_until

FILE = 64 * 1024


def test_settings_come_from_defaults_then_the_config_file_then_the_flags(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "# RocketMQ names\n"
        "brokerClusterName=DefaultCluster\n"
        "brokerRole=SYNC_MASTER\n"
        "haListenPort=20912\n"
        "listenPort=20911\n"
        "mappedFileSizeCommitLog=1048576\n"
        "flushDiskType=SYNC_FLUSH\n"
        "haSendHeartbeatInterval=2000\n"
        "slaveTimeout=1500\n",
        encoding="utf-8",
    )
    argv = ["master", "--config", str(conf), "--store", str(tmp_path / "s")]
    argv += cli_flags(ha_listen="0.0.0.0:30912", mapped_file_size="2M", heartbeat_interval=1)
    args = build_parser().parse_args(argv)
    config = build_config(args)
    assert config.broker_role is BrokerRole.SYNC_MASTER  # file
    assert config.flush_disk_type is FlushDiskType.SYNC_FLUSH  # file
    assert config.slave_timeout == 1.5  # file, milliseconds
    assert config.listen_port == 20911  # file
    assert (config.ha_listen_host, config.ha_listen_port) == ("0.0.0.0", 30912)  # flag
    assert config.mapped_file_size_commit_log == 2 * 1024 * 1024  # flag
    assert config.ha_send_heartbeat_interval == 1.0  # flag
    assert config.store_path_root_dir == tmp_path / "s"  # flag
    defaults = build_config(build_parser().parse_args(["master"]))
    assert defaults == BrokerConfig()


def test_a_real_broker_conf_is_accepted_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "brokerClusterName=DefaultCluster\nbrokerName=broker-a\nbrokerId=0\n"
        "listenPort=30911\nsendMessageThreadPoolNums=16\nuseReentrantLockWhenPutMessage=true\n"
        "tlsCertPath=/etc/hanet/m.crt\ndiskMaxUsedSpaceRatio=88\n",
        encoding="utf-8",
    )
    config = build_config(build_parser().parse_args(["master", "--config", str(conf)]))
    assert config.listen_port == 30911
    assert config.ha_listen_port == 30912  # listenPort + 1, as RocketMQ
    assert config.disk_max_used_space_ratio == 88
    assert config.tls_cert == Path("/etc/hanet/m.crt")
    (warning,) = [r.getMessage() for r in caplog.records if "does not use" in r.getMessage()]
    assert warning.endswith("sendMessageThreadPoolNums, useReentrantLockWhenPutMessage")


def test_slave_settings(tmp_path: Path) -> None:
    flags = cli_flags(
        store=tmp_path, master_ha="10.0.0.1:10912", reconnect_interval=0.5, housekeeping_interval=3
    )
    args = build_parser().parse_args(["slave", *flags])
    config = build_config(args, BrokerRole.SLAVE)
    assert config.broker_role is BrokerRole.SLAVE
    assert config.ha_master_host_port == ("10.0.0.1", 10912)
    assert (config.reconnect_interval, config.ha_housekeeping_interval) == (0.5, 3.0)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["master", "--config", "/nonexistent/broker.conf"], "cannot read config file"),
        (["slave", "--store", "{tmp}"], "haMasterAddress"),
        (["slave", "--store", "{tmp}", "--master-ha", "nowhere"], "expected HOST:PORT"),
        (["master", "--store", "{tmp}", "--heartbeat-interval", "0"], "must be > 0"),
        (["master", "--store", "{file}", "--listen", "127.0.0.1:0"], "store"),
        (["put", "--broker", "127.0.0.1:1", "--topic", "T", "--body", "x"], "cannot connect"),
        (["pull", "--broker", "127.0.0.1:1", "--topic", "T", "--queue", "0"], "cannot connect"),
        (["status", "--broker", "127.0.0.1:1"], "cannot connect"),
        (["put", "--topic", "T", "--size", "10", "--count", "0"], "--count"),
        (["put", "--topic", "T", "--body", "x", "--property", "novalue"], "NAME=VALUE"),
    ],
)
def test_errors_are_one_line_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    argv = [a.format(tmp=tmp_path / "store", file=a_file / "store") for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("hanet: ") and message in err[0]
    assert "Traceback" not in err[0]


def test_bad_flags_are_argparse_errors(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["master", "--role", "SLAVE"])
    assert exit_info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


@asynccontextmanager
async def broker(tmp_path: Path, **changes: Any) -> AsyncIterator[tuple[Broker, str]]:
    config = attrs.evolve(
        BrokerConfig(
            store_path_root_dir=tmp_path / "store",
            listen_port=0,
            ha_listen_port=0,
            mapped_file_size_commit_log=FILE,
        ),
        **changes,
    )
    async with trio.open_nursery() as nursery:
        b = Broker(config)
        addresses: BrokerAddresses = await nursery.start(b.run)
        assert addresses.broker is not None
        yield b, f"127.0.0.1:{addresses.broker[1]}"
        nursery.cancel_scope.cancel()


async def verb(*argv: str) -> int:
    args = build_parser().parse_args(list(argv))
    status: int = await args.func(args)
    return status


async def test_put_pull_status_verbs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with broker(tmp_path) as (b, address):
        put = ("put", "--broker", address, "--topic", "T")
        message = cli_flags(body="hello", tags="TagA", keys="k1", property="a=b", queue=2)
        assert await verb(*put, *message) == 0
        line = capsys.readouterr().out.strip()
        assert line.startswith("PUT_OK msg_id=") and line.endswith(
            "queue=2 queue_offset=0 offset=0"
        )
        assert await verb(*put, "--body", "again", "--queue", "2", "--json") == 0
        reply = json.loads(capsys.readouterr().out)["reply"]
        assert (reply["queue_id"], reply["queue_offset"], reply["status"]) == (2, 1, "PUT_OK")
        assert len(reply["msg_id"]) == 32
        generated = cli_flags(size=100, count=50, batch=7, concurrency=3, json=True)
        assert await verb(*put, *generated) == 0
        summary = json.loads(capsys.readouterr().out)
        assert summary["statuses"] == {"PUT_OK": 50} and summary["messages"] == 50
        assert summary["bytes"] == 5000 and summary["latency_ms_p99"] is not None
        assert await verb(*put, *cli_flags(size=10, count=4, quiet=True)) == 0
        out = capsys.readouterr().out
        assert "put 4 messages" in out and "statuses: PUT_OK 4" in out

        pull = ("pull", "--broker", address, "--topic", "T")
        assert await verb(*pull, "--queue", "2") == 0
        pulled = capsys.readouterr().out.splitlines()
        # The properties a RocketMQ producer sets (KEYS, UNIQ_KEY, WAIT, TAGS), ours, the
        # broker's CLUSTER.
        assert "KEYS=k1 UNIQ_KEY=" in pulled[0] and "WAIT=true TAGS=TagA a=b " in pulled[0]
        assert pulled[0].endswith("'hello'")
        assert pulled[-1].startswith("FOUND: ")
        assert await verb(*pull, *cli_flags(queue=0, offset=3, max=2, json=True)) == 0
        lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert [m["queue_offset"] for m in lines[:-1]] == [3, 4]
        assert lines[0]["body"].startswith("0000000")  # generated, numbered bodies
        assert lines[-1]["next_offset"] == 5 and lines[-1]["status"] == "FOUND"
        assert await verb(*pull, "--queue", "0", "--offset", "999") == 1
        assert "OFFSET_OVERFLOW_BADLY" in capsys.readouterr().out
        assert await verb("pull", "--broker", address, "--topic", "Nope", "--queue", "0") == 1
        assert "TOPIC_NOT_EXIST" in capsys.readouterr().out
        # A queue id past the topic's: RocketMQ's SYSTEM_ERROR, an error (exit 2).
        assert await verb("pull", "--broker", address, "--topic", "T", "--queue", "9") == 2
        assert "SYSTEM_ERROR: queueId[9] is illegal" in capsys.readouterr().err

        assert await verb("status", "--broker", address) == 0
        out = capsys.readouterr().out
        assert "ASYNC_MASTER" in out and "(none connected)" in out
        assert await verb("status", "--broker", address, "--json") == 0
        status = json.loads(capsys.readouterr().out)
        assert status["max_offset"] == b.store.max_offset and status["puts"] == 56
        with trio.move_on_after(0.35):
            await verb("status", "--broker", address, "--json", "--watch", "--interval", "0.1")
        watched = capsys.readouterr().out.splitlines()
        assert len(watched) >= 2 and all(json.loads(w)["role"] == "ASYNC_MASTER" for w in watched)


async def test_refused_puts_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with broker(tmp_path, broker_role=BrokerRole.SYNC_MASTER) as (_, address):
        assert await verb("put", "--broker", address, "--topic", "T", "--body", "x") == 1
        assert capsys.readouterr().out.startswith("SLAVE_NOT_AVAILABLE")
        bad_topic = ("put", "--broker", address, "--topic", "bad topic")
        assert await verb(*bad_topic, *cli_flags(size=1, count=2, json=True)) == 1
        summary = json.loads(capsys.readouterr().out)
        # RocketMQ answers a bad topic name SYSTEM_ERROR: counted under its code's name.
        assert summary["statuses"] == {"SYSTEM_ERROR": 2} and "topic" in summary["error"].lower()


async def test_a_second_master_on_a_store_in_use_fails_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with broker(tmp_path):
        flags = cli_flags(store=tmp_path / "store", listen="127.0.0.1:0", ha_listen="127.0.0.1:0")
        status = await verb("master", *flags)
    assert status == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"hanet: the store at {tmp_path / 'store'} is in use by another process "
        f"(lock file {tmp_path / 'store' / 'lock'})"
    ]


async def test_master_verb_serves_and_writes_its_ready_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="hanet.broker")
    ready = tmp_path / "ready.json"
    async with trio.open_nursery() as nursery:
        flags = cli_flags(
            store=tmp_path / "m",
            listen="127.0.0.1:0",
            ha_listen="127.0.0.1:0",
            mapped_file_size="64K",
            ready_file=ready,
        )
        nursery.start_soon(verb, "master", *flags)

        await wait_until(ready.exists, 10)
        data = json.loads(ready.read_text())
        assert data["role"] == "ASYNC_MASTER" and data["ha"].startswith("127.0.0.1:")
        nursery.cancel_scope.cancel()
    ready_lines = [r.getMessage() for r in caplog.records if "ready: store" in r.getMessage()]
    assert ready_lines[0].startswith("ASYNC_MASTER ready: store ")
    assert f"broker port {data['broker']}" in ready_lines[0]
    assert not (tmp_path / "m" / "abort").exists()


async def test_slave_verb_from_a_config_file_serves_its_listen_port(tmp_path: Path) -> None:
    conf = tmp_path / "slave.conf"
    conf.write_text(
        f"brokerRole=SLAVE\nstorePathRootDir={tmp_path / 's'}\nhaMasterAddress=127.0.0.1:1\n"
        "listenPort=0\nmappedFileSizeCommitLog=65536\n",
        encoding="utf-8",
    )
    ready = tmp_path / "ready.json"
    async with trio.open_nursery() as nursery:
        nursery.start_soon(verb, "slave", "--config", str(conf), "--ready-file", str(ready))
        await wait_until(ready.exists, 10)
        data = json.loads(ready.read_text())
        nursery.cancel_scope.cancel()
    assert data["role"] == "SLAVE" and data["ha"] is None
    assert data["broker"].startswith("127.0.0.1:")


async def test_status_watch_prints_a_line_per_interval_and_survives_a_restart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    watch = ("status", "--broker", f"127.0.0.1:{port}", "--watch", "--interval", "0.1", "--json")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(verb, *watch)
        await trio.sleep(0.35)  # nothing listens yet: retried, not fatal
        assert "retrying every 0.1 s" in capsys.readouterr().err
        async with broker(tmp_path, listen_port=port):
            await trio.sleep(0.5)
        lines = capsys.readouterr().out.splitlines()
        assert len(lines) >= 3
        assert all(json.loads(line)["role"] == "ASYNC_MASTER" for line in lines)
        await trio.sleep(0.3)  # the broker is gone again: still watching
        assert "retrying" in capsys.readouterr().err
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("target", ["--broker", "--namesrv"])
async def test_status_watch_with_a_tls_file_that_does_not_load_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str
) -> None:
    missing = str(tmp_path / "missing-ca.pem")
    watch = ("status", target, "127.0.0.1:1", "--watch", "--interval", "0.05", "--tls-ca", missing)
    with trio.fail_after(5):  # retried forever before: the file is loaded once, up front
        assert await verb(*watch) == 2
    err = capsys.readouterr().err
    assert "missing-ca.pem" in err and "retrying" not in err


async def test_status_table_shows_why_a_slave_was_closed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with broker(tmp_path) as (b, address):
        assert b.addresses.ha is not None
        with trio.fail_after(5):
            stream = await trio.open_tcp_stream(*b.addresses.ha)
            await stream.send_all(struct.pack(">q", 10**9))  # beyond the master's data
            assert await stream.receive_some(100) == b""
        assert await verb("status", "--broker", address) == 0
    out = capsys.readouterr().out  # the reason is folded over lines of the state column
    words = " ".join(line.split("│")[2] for line in out.splitlines() if line.count("│") > 2)
    assert "request offset 1000000000 is outside the master's" in " ".join(words.split())


async def _master_on_a_taken_port(
    store: Path, capsys: pytest.CaptureFixture[str], flag: str
) -> tuple[int, str]:
    """``hanet master`` with ``flag`` given a port that is taken (the others free): the taken
    port and the one line the start failed with."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ports = {"--listen": "127.0.0.1:0", "--ha-listen": "127.0.0.1:0"}
        ports[flag] = f"127.0.0.1:{port}"
        argv = [word for option in ports.items() for word in option]
        assert await verb("master", "--store", str(store), *argv) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    return port, line


async def test_a_start_that_fails_leaves_no_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port, line = await _master_on_a_taken_port(tmp_path / "new-store", capsys, "--ha-listen")
    assert line.startswith("hanet: cannot listen:") and f"HA port 127.0.0.1:{port}" in line
    assert not (tmp_path / "new-store").exists()


async def test_a_busy_metrics_port_is_named_as_the_metrics_port(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port, line = await _master_on_a_taken_port(tmp_path / "store", capsys, "--metrics-listen")
    assert line == f"hanet: cannot listen: Address already in use (metrics port 127.0.0.1:{port})"
    assert not (tmp_path / "store").exists()


def test_help_shows_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["master", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "store directory (./store)" in out and "(127.0.0.1:10911; port 0: any)" in out


async def test_a_put_run_cut_short_still_says_what_was_acknowledged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result: list[int] = []
    async with trio.open_nursery() as outer:
        async with broker(tmp_path) as (b, address):
            argv = ["put", "--broker", address, "--topic", "T", "--size", "100"]
            argv += ["--count", "1000000", "--concurrency", "2", "--quiet"]

            async def run() -> None:
                result.append(await verb(*argv))

            outer.start_soon(run)
            with trio.fail_after(20):
                while b.store.max_offset < 50_000:  # noqa: ASYNC110 - until puts flow
                    await trio.sleep(0.01)
        # the broker is gone: the run ends
        with trio.fail_after(20):
            while not result:  # noqa: ASYNC110
                await trio.sleep(0.01)
    assert result == [2]
    captured = capsys.readouterr()
    assert "put " in captured.out and "statuses: PUT_OK" in captured.out
    assert captured.err.startswith("hanet: ")
