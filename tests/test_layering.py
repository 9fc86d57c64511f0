"""The import graph follows the layering in DESIGN.md and CONVENTIONS.md.

core (hanet/_*.py, hanet/testing.py) <- handlers <- store/ha/spark <- cli. The core never
imports a layer above it; handlers never import services; only the CLI and hanet.ha compose
everything; pyspark is imported only inside hanet.spark; handlers (sans-IO) never import trio.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> Iterator[str]:
    """Absolute names of every module ``path`` imports (relative imports resolved)."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                if node.level > 1:
                    base = base[: -(node.level - 1)]
                prefix = ".".join(base)
                target = f"{prefix}.{node.module}" if node.module else prefix
            else:
                target = node.module or ""
            yield target
            for alias in node.names:
                yield f"{target}.{alias.name}"


def _is_cli(path: Path) -> bool:
    """The command line composes everything: ``hanet/cli.py``, ``hanet/__main__.py`` and the
    ``_*cli.py`` verb modules are above every layer."""
    return path.name in ("cli.py", "__main__.py") or path.name.endswith("cli.py")


def _files(*globs: str) -> list[Path]:
    found: list[Path] = []
    for pattern in globs:
        found.extend(p for p in sorted(ROOT.glob(pattern)) if not _is_cli(p))
    return found


def _violations(files: list[Path], forbidden: tuple[str, ...]) -> list[str]:
    bad = []
    for path in files:
        for name in _imports(path):
            if any(name == f or name.startswith(f + ".") for f in forbidden):
                bad.append(f"{path.relative_to(ROOT)} imports {name}")
    return sorted(set(bad))


CORE = ("hanet/_*.py", "hanet/__init__.py", "hanet/testing.py")


@pytest.mark.parametrize(
    ("globs", "forbidden"),
    [
        (
            CORE,
            (
                "handlers",
                "hanet.store",
                "hanet.ha",
                "hanet.spark",
                "hanet.cli",
                "hanet.client",
                "pyspark",
            ),
        ),
        (("handlers/**/*.py",), ("hanet.ha", "hanet.store", "hanet.spark", "hanet.cli", "trio")),
        (("hanet/store/**/*.py",), ("hanet.ha", "handlers", "hanet.spark", "hanet.cli")),
        (("hanet/spark/**/*.py",), ("hanet.ha", "hanet.cli")),
        (("hanet/ha/**/*.py", "hanet/store/**/*.py", "handlers/**/*.py"), ("pyspark",)),
    ],
    ids=["core", "handlers", "store", "spark", "pyspark-only-in-spark"],
)
def test_layering(globs: tuple[str, ...], forbidden: tuple[str, ...]) -> None:
    files = _files(*globs)
    assert files, f"no files matched {globs}"
    assert _violations(files, forbidden) == []


def test_resolves_relative_imports() -> None:
    names = set(_imports(ROOT / "hanet" / "_pipeline.py"))
    assert "hanet._context" in names
    assert "hanet._handler" in names
