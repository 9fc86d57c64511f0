"""``--max-partial-bytes`` on the verbs and ``maxPartialBytes`` in broker.conf (issue 20,
item 3): taken, and refused below 0 with the flag named."""

from __future__ import annotations

from pathlib import Path

import pytest

from hanet.broker import load_properties
from hanet.cli import main
from hanet.errors import ConfigError
from hanet.ha import BrokerConfig
from hanet.testing import cli_flags


def test_broker_conf_key(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("maxPartialBytes=1048576\n")
    assert load_properties(conf).max_partial_bytes == 1 << 20
    assert BrokerConfig().max_partial_bytes is None  # the framework's 64 MiB
    with pytest.raises(ConfigError, match="max_partial_bytes"):
        BrokerConfig(max_partial_bytes=-1)


@pytest.mark.parametrize(
    "argv",
    [
        ["master", "--store", "{tmp}/m", "--max-partial-bytes", "-1"],
        ["namesrv", "--listen", "127.0.0.1:0", "--max-partial-bytes", "-1"],
        [
            "dledger",
            *cli_flags(group="g", id="n0", peers="n0=127.0.0.1:1", store="{tmp}/d"),
            *cli_flags(listen="127.0.0.1:0", max_partial_bytes=-1),
        ],
    ],
    ids=["master", "namesrv", "dledger"],
)
def test_a_negative_budget_is_refused(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 2
    assert "max_partial_bytes" in capsys.readouterr().err.replace("-", "_")
