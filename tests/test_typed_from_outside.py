"""A project that depends on hanet type-checks against it with ``mypy --strict``, whether hanet
is installed editable (a plain path entry, thanks to the src/ layout) or as a built wheel."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]

USER_CODE = """\
from __future__ import annotations

from hanet import ChannelInboundHandler, HandlerContext
from hanet.handlers import LineBasedFrameDecoder, StringDecoder
from hanet.testing import EmbeddedChannel


class Upper(ChannelInboundHandler):
    def channel_read(self, ctx: HandlerContext, msg: object) -> None:
        assert isinstance(msg, str)
        ctx.fire_channel_read(msg.upper())


def shout(line: bytes) -> str:
    channel = EmbeddedChannel(LineBasedFrameDecoder(80), StringDecoder(), Upper())
    channel.write_inbound(line)
    out = channel.read_inbound()
    assert isinstance(out, str)
    return out


WRONG: int = shout(b"hi\\n")
"""


def _install(tmp_path: Path, *, editable: bool) -> Path:
    """A fresh venv with hanet installed from this repository (its dependencies are seen through a
    .pth pointing at the running interpreter's site-packages); returns its python."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(site, "_deps_of_the_test_run.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    target = ["-e", str(ROOT)] if editable else [str(ROOT)]
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", *target],
        check=True,
        cwd=tmp_path,
        timeout=600,
    )
    return python


@pytest.mark.parametrize("editable", [True, False], ids=["editable", "wheel"])
def test_a_user_project_type_checks_against_hanet(tmp_path: Path, editable: bool) -> None:
    python = _install(tmp_path, editable=editable)
    project = tmp_path / "userproject"
    project.mkdir()
    # the user's own handlers.py must not shadow anything of hanet's
    (project / "handlers.py").write_text("NAME = 'mine'\n")
    (project / "app.py").write_text(USER_CODE)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-incremental",
            "--python-executable",
            str(python),
            "app.py",
        ],
        capture_output=True,
        text=True,
        cwd=project,
        timeout=600,
        check=False,
    )
    # exactly one error: the deliberate one, which proves mypy saw hanet's types
    # (an untyped or missing hanet would give import errors or Any instead)
    lines = [line for line in out.stdout.splitlines() if ": error:" in line]
    assert len(lines) == 1, out.stdout + out.stderr
    assert "app.py:22" in lines[0]
    assert 'Incompatible types in assignment (expression has type "str"' in lines[0]
    # and the installed hanet runs from the user's folder, its handlers.py notwithstanding
    run = subprocess.run(
        [str(python), "-c", "import app, handlers; print(app.shout(b'ab\\n'), handlers.NAME)"],
        capture_output=True,
        text=True,
        cwd=project,
        check=False,
    )
    assert run.stdout.split() == ["AB", "mine"], run.stderr
