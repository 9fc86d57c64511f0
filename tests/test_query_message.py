"""QUERY_MESSAGE (12) over the wire, VIEW_MESSAGE_BY_ID for offset ids, the ``queryMsg*``
verbs, and lookups after a ``hanet master`` killed with SIGKILL."""

from __future__ import annotations

import argparse
import json
import signal
from pathlib import Path

import attrs
import pytest
from broker_support import config, registered_master, running
from test_cli_processes import connect as process_client
from test_cli_processes import in_sync, start_master, start_slave

from hanet.broker import QUERY_ANSWER_BUDGET, apply_properties
from hanet.cli import build_parser
from hanet.client import BrokerClient, query_message, view_message
from hanet.errors import ConfigError
from hanet.protocol import (
    QueryMessageRequestHeader,
    QueryMessageResponseHeader,
    RemotingCommand,
    RequestCode,
    ResponseCode,
)
from hanet.store import decode_record
from hanet.testing import HanetProcesses, split_address, wait_until

END = 2**63 - 1


def _address(address: tuple[str, int] | None) -> tuple[str, int]:
    assert address is not None
    return address


SMALL_INDEX = {"max_hash_slot_num": 2, "max_index_num": 64}


async def test_query_message_over_the_wire(tmp_path: Path) -> None:
    async with (
        running(config(tmp_path, **SMALL_INDEX)) as (_, addresses),
        BrokerClient.connect(*_address(addresses.broker)) as client,
    ):
        replies = [await client.put("T", b"m%d" % i, keys=f"order{i % 2} all") for i in range(4)]
        aa = await client.put("T", b"Aa", keys="Aa")
        await client.put("T", b"BB", keys="BB")  # T#BB hashes as T#Aa
        await client.put("Other", b"o", keys="all")
        found = await query_message(client, "T", "order1")
        assert [r.body for r in found.messages] == [b"m1", b"m3"]
        assert found.index_last_update_phyoffset > replies[-1].wrote_offset
        # the same key in another topic is another key; a hash twin is not sent
        assert [r.body for r in (await query_message(client, "T", "all")).messages] == [
            b"m0",
            b"m1",
            b"m2",
            b"m3",
        ]
        request = RemotingCommand.request(
            RequestCode.QUERY_MESSAGE, QueryMessageRequestHeader("T", "Aa", 32, 0, END).to_fields()
        )
        answer = await client.invoke(request)
        assert answer.code == ResponseCode.SUCCESS
        record = decode_record(bytes(answer.body))
        assert record.body == b"Aa" and record.size == len(answer.body)
        assert record.msg_id == aa.msg_id
        header = QueryMessageResponseHeader.from_fields(answer.fields)
        assert header.index_last_update_timestamp >= record.store_timestamp
        # nothing: QUERY_NOT_FOUND (22) with RocketMQ's remark and the index's state
        request = RemotingCommand.request(
            RequestCode.QUERY_MESSAGE,
            QueryMessageRequestHeader("T", "nope", 32, 0, END).to_fields(),
        )
        answer = await client.invoke(request)
        assert answer.code == ResponseCode.QUERY_NOT_FOUND
        assert int(ResponseCode.QUERY_NOT_FOUND) == 22
        assert answer.remark == "can not find message, maybe time range not correct"
        assert QueryMessageResponseHeader.from_fields(answer.fields) == header
        # by unique id (UNIQ_KEY, the _UNIQUE_KEY_QUERY flag)
        unique = found.messages[0].properties["UNIQ_KEY"]
        by_unique = await query_message(client, "T", unique, unique=True)
        assert [r.body for r in by_unique.messages] == [b"m1"]
        # a time range before the messages
        early = await query_message(client, "T", "all", end=record.store_timestamp - 10_000)
        assert early.messages == ()
        # VIEW_MESSAGE_BY_ID: the offset message id's offset
        viewed = await view_message(client, replies[2].wrote_offset)
        assert viewed is not None and viewed.msg_id == replies[2].msg_id
        assert await view_message(client, 1 << 40) is None
        # a malformed header is answered, the connection kept
        bad = RemotingCommand.request(RequestCode.QUERY_MESSAGE, {"topic": "T", "key": "x"})
        assert (await client.invoke(bad)).code != ResponseCode.SUCCESS
        assert (await query_message(client, "T", "order0")).messages


async def test_an_answer_fits_one_frame(tmp_path: Path) -> None:
    """20 messages of 1 MiB share a key: the answer carries the oldest that fit a 16 MiB frame,
    the client reads it, and the connection goes on (without the budget the broker could not
    encode it)."""
    cfg = attrs.evolve(config(tmp_path), mapped_file_size_commit_log=64 << 20)
    async with (
        running(cfg) as (_, addresses),
        BrokerClient.connect(*_address(addresses.broker)) as client,
    ):
        for i in range(20):
            await client.put("Big", bytes([i]) * (1 << 20), keys="same")
        found = await query_message(client, "Big", "same")
        assert [r.body[0] for r in found.messages] == list(range(15))
        assert sum(r.size for r in found.messages) <= QUERY_ANSWER_BUDGET
        assert [r.body for r in (await query_message(client, "Big", "none")).messages] == []


async def test_an_index_disabled_broker_finds_nothing(tmp_path: Path) -> None:
    cfg = config(tmp_path, message_index_enable=False)
    async with (
        running(cfg) as (_, addresses),
        BrokerClient.connect(*_address(addresses.broker)) as client,
    ):
        await client.put("T", b"m", keys="k")
        assert (await query_message(client, "T", "k")).messages == ()
    assert not (tmp_path / "index").exists()


def _parse(argv: list[str]) -> argparse.Namespace:
    return build_parser().parse_args(["admin", *argv])


async def _verb(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    args = _parse(argv)
    status = await args.func(args)
    return status, capsys.readouterr().out


async def test_query_verbs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with (
        running(config(tmp_path)) as (_, addresses),
        BrokerClient.connect(*_address(addresses.broker)) as client,
    ):
        host, port = _address(addresses.broker)
        broker = f"{host}:{port}"
        replies = [await client.put("T", b"m%d" % i, keys=f"k{i}", queue_id=1) for i in range(3)]
        status, out = await _verb(
            ["queryMsgByKey", "-b", broker, "-t", "T", "-k", "k1", "--json"], capsys
        )
        (line,) = out.splitlines()
        doc = json.loads(line)
        assert status == 0 and doc["body"] == "m1" and doc["msg_id"] == replies[1].msg_id
        # by offset message id (VIEW_MESSAGE_BY_ID at the broker it names)
        status, out = await _verb(["queryMsgById", "-i", replies[2].msg_id, "--json"], capsys)
        assert status == 0 and json.loads(out)["body"] == "m2"
        # by unique id: not an offset id of a live broker, looked up with -t on -b
        unique = json.loads(line)["properties"]["UNIQ_KEY"]
        status, out = await _verb(["queryMsgById", "-i", unique, "-t", "T", "-b", broker], capsys)
        assert status == 0 and replies[1].msg_id in out and unique in out
        status, out = await _verb(
            ["queryMsgByOffset", "-b", broker, "-t", "T", "-q", "1", "-o", "2", "--json"], capsys
        )
        assert status == 0 and json.loads(out)["body"] == "m2"
        status, out = await _verb(["queryMsgByKey", "-b", broker, "-t", "T", "-k", "zz"], capsys)
        assert status == 1 and "no message" in out
        status, _ = await _verb(["queryMsgByKey", "-t", "T", "-k", "zz"], capsys)
        assert status == 2  # neither -b nor -n


def _write_conf(path: Path) -> Path:
    path.write_text("maxHashSlotNum=16\nmaxIndexNum=40\nmessageIndexEnable=true\n")
    return path


@pytest.mark.slow
async def test_lookups_after_kill_9(processes: HanetProcesses, tmp_path: Path) -> None:
    conf = _write_conf(tmp_path / "broker.conf")
    store = tmp_path / "store"
    ports = ("--listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0")
    argv = ("--store", str(store), "--config", str(conf), "--mapped-file-size", str(256 * 1024))
    process = await processes.start("master", "master", *argv, *ports)
    async with BrokerClient.connect(*process.address()) as client:
        replies = [await client.put("T", b"m%d" % i, keys=f"k{i} all") for i in range(50)]
        first = await query_message(client, "T", "k7")
        unique = first.messages[0].properties["UNIQ_KEY"]
    assert await process.kill() == -signal.SIGKILL
    assert (store / "abort").exists()
    assert len(list((store / "index").iterdir())) >= 3  # 39 keys a file: several files
    await process.start()
    async with BrokerClient.connect(*process.address()) as client:
        found = await query_message(client, "T", "k7")
        assert [r.msg_id for r in found.messages] == [replies[7].msg_id]
        by_unique = await query_message(client, "T", unique, unique=True)
        assert [r.body for r in by_unique.messages] == [b"m7"]
        everything = await query_message(client, "T", "all", max_num=64)
        assert len(everything.messages) == 50  # each once: nothing indexed twice
        later = await client.put("T", b"after", keys="k7")
        found = await query_message(client, "T", "k7")
        assert [r.msg_id for r in found.messages] == [replies[7].msg_id, later.msg_id]


def test_index_settings_in_broker_conf() -> None:
    cfg = apply_properties(
        {"messageIndexEnable": "false", "maxHashSlotNum": "16", "maxIndexNum": "40"}
    )
    assert (cfg.message_index_enable, cfg.max_hash_slot_num, cfg.max_index_num) == (False, 16, 40)
    with pytest.raises(ConfigError, match="max_index_num"):
        apply_properties({"maxIndexNum": "1"})


async def test_query_verbs_through_the_name_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with (
        registered_master(tmp_path, "T", 4) as (namesrv, broker_address, _),
        BrokerClient.connect(*split_address(broker_address)) as client,
    ):
        reply = await client.put("T", b"routed", keys="rk", queue_id=2)
        status, out = await _verb(["queryMsgByKey", "-n", namesrv, "-t", "T", "-k", "rk"], capsys)
        assert status == 0 and reply.msg_id in out
        status, out = await _verb(
            ["queryMsgByOffset", "-n", namesrv, "-t", "T", "-q", "2", "-o", "0", "--json"],
            capsys,
        )
        assert status == 0 and json.loads(out)["body"] == "routed"
        status, _ = await _verb(["queryMsgByKey", "-n", namesrv, "-t", "Nope", "-k", "x"], capsys)
        assert status == 2  # no route


@pytest.mark.slow
async def test_a_slave_finds_what_its_master_stored(
    processes: HanetProcesses, tmp_path: Path
) -> None:
    master = await start_master(processes)
    slave = await start_slave(processes, master)
    async with process_client(master) as client:
        replies = [await client.put("T", b"m%d" % i, keys=f"s{i} all") for i in range(30)]
        unique = (await query_message(client, "T", "s4")).messages[0].properties["UNIQ_KEY"]
    await wait_until(lambda: in_sync(master, slave))
    async with process_client(slave) as client:  # the slave built its own index
        assert [r.msg_id for r in (await query_message(client, "T", "s4")).messages] == [
            replies[4].msg_id
        ]
        by_unique = await query_message(client, "T", unique, unique=True)
        assert [r.body for r in by_unique.messages] == [b"m4"]
        assert len((await query_message(client, "T", "all")).messages) == 30
    assert any((tmp_path / "slave" / "index").iterdir())
