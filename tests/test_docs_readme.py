"""The README's Python snippets run as written, on their own."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _snippets() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)


def test_the_readme_has_its_two_snippets() -> None:
    assert len(_snippets()) == 2


def test_the_embedded_channel_snippet_runs_alone() -> None:
    (snippet,) = [s for s in _snippets() if "EmbeddedChannel" in s]
    subprocess.run([sys.executable, "-c", snippet], check=True, cwd=ROOT, timeout=60)


def test_the_server_snippet_imports_and_builds_its_pipeline(tmp_path: Path) -> None:
    (snippet,) = [s for s in _snippets() if "def init" in s]
    module = tmp_path / "snippet.py"
    module.write_text(snippet, encoding="utf-8")
    check = (
        "import runpy\n"
        "from hanet.testing import EmbeddedChannel\n"
        f"init = runpy.run_path({str(module)!r}, run_name='snippet')['init']\n"
        "ch = EmbeddedChannel()\n"
        "init(ch)\n"
        "ch.write_inbound(b'\\x00\\x00\\x00\\x02hi')\n"
        "out = b''.join(bytes(m) for m in iter(ch.read_outbound, None))\n"
        "assert out == b'\\x00\\x00\\x00\\x02HI', out\n"
    )
    subprocess.run([sys.executable, "-c", check], check=True, cwd=ROOT, timeout=60)
