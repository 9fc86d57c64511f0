"""The import graph follows the layers in the README's "Architecture" section.

Each layer is a package; a module may import its own layer and the layers its rule names,
nothing else of hanet. Arrows point one way:

    errors <- channel <- boot; handlers -> channel; store -> errors; status (plain records);
    protocol -> handlers, store, status; ha -> handlers, boot, store, status;
    dledger -> handlers, boot, store, status;
    broker -> ha, dledger, protocol, boot, store;
    client -> protocol, boot, store; spark -> protocol, store; cli -> anything;
    only ``hanet/__main__.py`` imports the cli.

A layer may also use what the layers it names stand on (``ha`` uses ``channel`` through
``boot``, for one). No private name crosses a layer; there is no cycle between layers; sans-IO
layers never import trio; pyspark lives in the Spark layer and the command line only.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# layer -> the layers it may import directly (besides itself).
ARROWS: dict[str, set[str]] = {
    "errors": set(),
    "lazy": set(),  # hanet/lazy.py: how a package loads its re-exports on first use
    "status": set(),
    "channel": {"errors"},
    "boot": {"channel"},
    "hanet": {"channel", "boot", "lazy"},  # hanet/__init__.py: the facade
    "testing": {"channel", "boot", "dledger"},
    "handlers": {"channel"},
    "store": {"errors"},
    "protocol": {"handlers", "store", "status"},
    "ha": {"handlers", "boot", "store", "status"},
    "dledger": {"handlers", "boot", "store", "status", "lazy"},
    "broker": {"ha", "dledger", "protocol", "client", "boot", "store"},
    "client": {"protocol", "boot", "store"},
    "namesrv": {"protocol", "boot"},
    "spark": {"protocol", "store", "lazy"},
    "cli": set(),  # anything: see test_cli_is_imported_by_main_only
    "main": {"cli"},
}
SANS_IO = ("handlers", "protocol", "status")
PYSPARK_ALLOWED = ("spark", "cli")


def _closure(layer: str) -> set[str]:
    """The layers ``layer`` may import: its arrows and everything below them."""
    seen: set[str] = set()
    todo = [layer]
    while todo:
        for below in ARROWS[todo.pop()]:
            if below not in seen:
                seen.add(below)
                todo.append(below)
    return seen | {layer}


def layer_of(module: str) -> str | None:
    """The layer of a hanet module name, or None for a module outside the project."""
    parts = module.split(".")
    if parts[0] != "hanet":
        return None
    if len(parts) == 1:
        return "hanet"
    name = parts[1]
    if name == "__main__":
        return "main"
    if name not in ARROWS:
        raise AssertionError(f"{module}: no layer rule for hanet.{name}")
    return name


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> Iterator[tuple[str, str]]:
    """``(module, imported name or "")`` for every import of ``path`` (relative ones resolved),
    including those under ``if TYPE_CHECKING:`` and inside functions."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, ""
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                if node.level > 1:
                    base = base[: -(node.level - 1)]
                prefix = ".".join(base)
                target = f"{prefix}.{node.module}" if node.module else prefix
            else:
                target = node.module or ""
            for alias in node.names:
                yield target, alias.name


def _sources() -> list[Path]:
    return sorted(ROOT.glob("hanet/**/*.py"))


def _is_private(module: str, name: str) -> bool:
    parts = [*module.split("."), name] if name else module.split(".")
    return any(p.startswith("_") and not p.startswith("__") for p in parts)


def _edges() -> Iterator[tuple[Path, str, str, str]]:
    """``(file, its layer, imported module, imported name)`` for imports of hanet modules."""
    for path in _sources():
        source = layer_of(_module_name(path))
        assert source is not None
        for module, name in _imports(path):
            if layer_of(module) is not None:
                yield path, source, module, name


def test_every_layer_imports_only_what_its_arrows_allow() -> None:
    bad = []
    for path, source, module, _ in _edges():
        target = layer_of(module)
        assert target is not None
        if source != "cli" and target not in _closure(source):
            bad.append(f"{path.relative_to(ROOT)} ({source}) imports {module} ({target})")
    assert sorted(set(bad)) == []


def test_cli_is_imported_by_main_only() -> None:
    bad = [
        f"{path.relative_to(ROOT)} imports {module}"
        for path, source, module, _ in _edges()
        if layer_of(module) == "cli" and source not in ("cli", "main")
    ]
    assert bad == []
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'hanet = "hanet.cli:main"' in text


def test_no_private_name_crosses_a_layer() -> None:
    bad = [
        f"{path.relative_to(ROOT)} imports {module}{'.' + name if name else ''}"
        for path, source, module, name in _edges()
        if layer_of(module) != source and _is_private(module, name)
    ]
    assert bad == []


def test_no_cycle_between_layers() -> None:
    graph: dict[str, set[str]] = {}
    for _, source, module, _ in _edges():
        target = layer_of(module)
        assert target is not None
        if target != source:
            graph.setdefault(source, set()).add(target)
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*trail, node, nxt]))
            if nxt not in state:
                visit(nxt, [*trail, node])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])


@pytest.mark.parametrize("layer", SANS_IO)
def test_sans_io_layers_do_not_import_trio(layer: str) -> None:
    bad = [
        f"{path.relative_to(ROOT)} imports {module}"
        for path in _sources()
        if layer_of(_module_name(path)) == layer
        # the pipeline codecs of hanet.protocol are handlers: no trio either
        for module, _ in _imports(path)
        if module == "trio" or module.startswith("trio.")
    ]
    assert bad == []


def test_pyspark_only_in_the_spark_layer_and_the_command_line() -> None:
    bad = [
        f"{path.relative_to(ROOT)} imports {module}"
        for path in _sources()
        if layer_of(_module_name(path)) not in PYSPARK_ALLOWED
        for module, _ in _imports(path)
        if module.split(".")[0] in ("pyspark", "pyarrow")
    ]
    assert bad == []


@pytest.mark.parametrize("folder", ["tests", "examples", "bench"])
def test_tests_examples_and_benchmarks_use_public_names_only(folder: str) -> None:
    bad = []
    for path in sorted((ROOT / folder).glob("*.py")):
        for module, name in _imports(path):
            if layer_of(module.split(".")[0]) is None and module.split(".")[0] != "hanet":
                continue
            if _is_private(module, name):
                bad.append(f"{path.relative_to(ROOT)} imports {module}.{name}")
    assert bad == []


@pytest.mark.parametrize("package", ["hanet.store", "hanet.spark", "hanet.errors"])
def test_lower_layers_load_no_networking(package: str) -> None:
    code = (
        f"import sys, {package}; "
        "print(sorted(m for m in sys.modules if m.startswith(('hanet.channel', 'hanet.boot', "
        "'hanet.ha', 'hanet.broker', 'hanet.handlers'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "[]"


def test_the_facade_loads_on_first_use() -> None:
    code = (
        "import sys, hanet; before = 'hanet.channel' in sys.modules; "
        "from hanet import StreamChannel, serve; "
        "print(before, StreamChannel.__module__, serve.__module__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.split() == [
        "False",
        "hanet.channel._stream_channel",
        "hanet.boot._bootstrap",
    ]


def test_the_rules_see_relative_and_private_imports() -> None:
    names = set(_imports(ROOT / "hanet" / "channel" / "_pipeline.py"))
    assert ("hanet.channel._context", "HandlerContext") in names
    assert layer_of("hanet.channel._context") == "channel"
    assert _is_private("hanet.store._codec", "MessageRecord")
    assert _is_private("hanet.channel", "_format")
    assert not _is_private("hanet.store", "MessageRecord")
    assert "errors" in _closure("broker") and "cli" not in _closure("broker")
