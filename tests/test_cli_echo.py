"""``hanet echo-demo``: an echo server and a reconnecting client in one process."""

from __future__ import annotations

import re

import pytest

from hanet import cli


def test_echo_demo_echoes_across_a_server_restart(capsys: pytest.CaptureFixture[str]) -> None:
    status = cli.main(["echo-demo", "--seconds", "1", "--interval", "0.05"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "server #1 listening on 127.0.0.1:" in out
    assert "server #2 listening on 127.0.0.1:" in out
    assert out.count("client connected") >= 2
    match = re.search(r"messages sent (\d+), echoed (\d+)", out)
    assert match is not None
    assert int(match[2]) >= 4
    assert "echoed b'hello #1'" in out
    assert "ChannelStatistics(bytes_read=" in out
    assert "ServerStatistics(connections_accepted=1" in out
    assert "ReconnectStatistics(" in out


def test_echo_demo_is_listed_in_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "echo-demo" in capsys.readouterr().out
