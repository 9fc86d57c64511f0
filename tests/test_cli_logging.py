"""``hanet --version`` and the logging options, before or after the verb."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from hanet.cli import JsonFormatter, build_parser, main, version


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"hanet {version()}"
    assert version()[0].isdigit()


@pytest.mark.parametrize(
    "argv",
    [
        ["--log-level", "DEBUG", "--log-format", "json", "verify", "x"],
        ["verify", "x", "--log-level", "DEBUG", "--log-format", "json"],
    ],
)
def test_logging_options_before_or_after_the_verb(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert (args.log_level, args.log_format) == ("DEBUG", "json")


def test_defaults_when_not_given() -> None:
    args = build_parser().parse_args(["verify", "x"])
    assert (args.log_level, args.log_format) == ("INFO", "text")


def test_json_log_lines(tmp_path: Path) -> None:
    code = (
        "import logging, sys\n"
        "from hanet.cli import configure_logging\n"
        "configure_logging('INFO', 'json')\n"
        "logging.getLogger('hanet.test').warning('peer %s closed', 'a:1')\n"
        "try:\n    1 / 0\nexcept ZeroDivisionError:\n"
        "    logging.getLogger('hanet.test').exception('boom')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stderr.splitlines()
    first, second = (json.loads(line) for line in out)
    assert first["level"] == "WARNING" and first["message"] == "peer a:1 closed"
    assert first["logger"] == "hanet.test" and first["time"].endswith("+00:00")
    assert "ZeroDivisionError" in second["exception"]


def test_json_formatter_is_one_line() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "a\nb", None, None)
    assert "\n" not in JsonFormatter().format(record)
