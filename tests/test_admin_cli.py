"""``hanet admin``'s command line: option parsing, times, exit statuses and messages."""

from __future__ import annotations

import datetime

import pytest

from hanet.cli import build_parser, main
from hanet.testing import free_ports


def parse_time(text: str) -> int:
    args = build_parser().parse_args(
        ["admin", "resetOffsetByTime", "-g", "G", "-t", "T", "-s", text]
    )
    timestamp: int = args.timestamp
    return timestamp


def test_times_as_mqadmin_reads_them() -> None:
    assert parse_time("1700000000123") == 1700000000123
    assert parse_time("-1") == -1
    local = datetime.datetime(2026, 11, 25, 8, 30, 5, 250000)
    assert parse_time("2026-11-25#08:30:05:250") == int(local.timestamp() * 1000)
    with pytest.raises(SystemExit):
        parse_time("yesterday")


def test_options_with_mqadmin_letters() -> None:
    letters = ["-c", "C", "-t", "T", "-r", "2", "-w", "3", "-p", "4"]
    args = build_parser().parse_args(
        ["admin", "updateTopic", "-n", "127.0.0.1:9876;127.0.0.2:9876", *letters, "--json"]
    )
    assert args.namesrv == [("127.0.0.1", 9876), ("127.0.0.2", 9876)]
    queues = (args.read_queue_nums, args.write_queue_nums)
    assert (args.cluster, args.topic, *queues) == ("C", "T", 2, 3)
    assert args.perm == 4 and args.json and args.broker_addr is None
    with pytest.raises(SystemExit):  # -b and -c exclude each other
        build_parser().parse_args(["admin", "brokerStatus", "-b", "h:1", "-c", "C"])


def test_nothing_answering_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    (port,) = free_ports(1)
    status = main(["admin", "topicList", "-n", f"127.0.0.1:{port}", "--timeout", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2
    assert err[-1].startswith("hanet: ") and f"127.0.0.1:{port}" in err[-1]


def test_no_name_server_given(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["admin", "clusterList"]) == 2
    assert "no name server address (-n)" in capsys.readouterr().err
