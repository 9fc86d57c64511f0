"""Messages a real RocketMQ client sent (PyPI ``rocketmq``, the C++ client, and npm
``ali-ons``, as processes through ``hanet namesrv`` and ``hanet master``) are found by their
key and by the message id the client reports (its ``UNIQ_KEY`` for the C++ client, the offset
id for ali-ons, which sets none), with the client API and with ``queryMsgById`` /
``queryMsgByKey`` through the name server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from interop_support import alions_command, cpp_command, run_driver
from test_interop_clients import Cluster

from hanet.cli import build_parser
from hanet.client import BrokerClient, query_message

pytestmark = pytest.mark.slow

BUILDERS = {"alions": alions_command, "cpp": cpp_command}


@pytest.mark.parametrize("client", sorted(BUILDERS))
async def test_a_real_clients_messages_are_found_by_key_and_id(
    client: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    build = BUILDERS[client]
    build("produce", "127.0.0.1:1", "T")  # skips here when the client is unavailable
    topic = f"Query-{client}"
    cluster = Cluster(tmp_path, [topic]).start_all()
    try:
        command = build("produce", cluster.namesrv_address, topic, count=6, prefix="q")
        out = await run_driver(command, timeout=40)
        sent = out.events("sent")
        assert out.returncode == 0 and len(sent) == 6, (out, out.stderr, cluster.logs())
        async with BrokerClient.connect(*cluster.broker()) as broker:
            found = await query_message(broker, topic, "q-3")  # the drivers' key is the body
            (record,) = found.messages
            assert record.body == b"q-3"
            unique = record.properties.get("UNIQ_KEY")
            # the id a client reports: its UNIQ_KEY (the C++ client) or the offset id (ali-ons)
            assert sent[3]["msgId"] in (unique, record.msg_id)
            if unique is not None:
                by_id = await query_message(broker, topic, unique, unique=True)
                assert [r.body for r in by_id.messages] == [b"q-3"]
        namesrv = cluster.namesrv_address
        argv = ["admin", "queryMsgById", "-i", sent[4]["msgId"], "-t", topic, "-n", namesrv]
        args = build_parser().parse_args([*argv, "--json"])
        assert await args.func(args) == 0
        assert json.loads(capsys.readouterr().out)["body"] == "q-4"
        args = build_parser().parse_args(
            ["admin", "queryMsgByKey", "-t", topic, "-k", "q-5", "-n", namesrv, "--json"]
        )
        assert await args.func(args) == 0
        assert json.loads(capsys.readouterr().out)["properties"]["KEYS"] == "q-5"
    finally:
        cluster.close()
    assert "Traceback" not in cluster.master.text(), cluster.master.text()
