"""The command line starts fast: ``hanet --help`` and ``--version`` import no verb family (and
not trio), a verb imports its own family only; ``hanet verify`` checks records against their
consume queues a run at a time and names the same problems with the native grouping and the
pure-Python one."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hanet.cli import VERBS, build_parser, main
from hanet.store import CommitLogStore, Message, StoreConfig
from hanet.store.lowlevel import file_name

FIXTURE = Path(__file__).parent / "fixtures" / "rocketmq-store-8k"


def _verbs(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    choices: dict[str, argparse.ArgumentParser] = action.choices
    return choices


def _listed(parser: argparse.ArgumentParser) -> list[tuple[str, str | None]]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return [(choice.dest, choice.help) for choice in action._choices_actions]


def test_the_verb_table_is_what_the_families_register() -> None:
    full = build_parser()
    assert _listed(full) == [(name, text) for _, name, text in VERBS]
    assert _listed(build_parser("")) == _listed(full)  # the help lists every verb, loading none
    for family, name, _ in VERBS:
        only = _verbs(build_parser(name))
        assert len(only[name]._actions) > 1, name  # registered for real
        others = {n for f, n, _ in VERBS if f != family}
        assert all(len(only[n]._actions) == 1 for n in others)  # listed only (-h)


def _modules_after(*argv: str) -> set[str]:
    """The modules a fresh interpreter has loaded after ``hanet <argv>``."""
    code = (
        "import json, sys\n"
        "from hanet.cli import main\n"
        "try:\n"
        f"    main({list(argv)!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(json.dumps(sorted(sys.modules)), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    loaded: list[str] = json.loads(done.stderr.strip().splitlines()[-1])
    return set(loaded)


HEAVY = ("hanet.broker", "hanet.client", "hanet.dledger", "hanet.ha", "hanet.protocol")
OPTIONAL = ("rich", "prometheus_client", "trustme", "pyspark", "pytest")


def _loaded(modules: set[str], prefixes: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in prefixes or m.startswith(prefixes))


@pytest.mark.parametrize("argv", [["--version"], ["--help"], []], ids=["version", "help", "none"])
def test_help_and_version_import_no_verb_and_not_trio(argv: list[str]) -> None:
    modules = _modules_after(*argv)
    assert _loaded(modules, ("trio", "hanet.store", "hanet.channel", *HEAVY, *OPTIONAL)) == []
    assert not [m for m in modules if m.startswith("hanet.cli._") and m != "hanet.cli._support"]


@pytest.mark.parametrize("verb", ["master", "dledger"])
def test_a_broker_needs_neither_pytest_nor_trio_testing(verb: str) -> None:
    modules = _modules_after(verb, "--help")
    assert "hanet.dledger" in modules  # the broker's family loaded (and the Raft node with it)
    assert _loaded(modules, ("pytest", "_pytest", "trio.testing")) == []


def test_verify_imports_the_store_only() -> None:
    modules = _modules_after("verify", str(FIXTURE))
    assert "hanet.cli._store" in modules and "hanet.store" in modules
    assert _loaded(modules, (*HEAVY, *OPTIONAL, "hanet.channel", "hanet.spark")) == []
    assert sorted(m for m in modules if m.startswith("hanet.cli._")) == [
        "hanet.cli._resync",
        "hanet.cli._store",
        "hanet.cli._support",
        "hanet.cli._verify_epochs",
        "hanet.cli._verify_queues",
    ]


@pytest.mark.parametrize(
    "argv",
    [
        ["--log-level", "WARNING", "verify", str(FIXTURE)],
        ["--log-level=WARNING", "verify", str(FIXTURE)],
        ["--log-l", "WARNING", "--log-format", "json", "verify", str(FIXTURE)],
        ["verify", "--log-level", "WARNING", str(FIXTURE)],
    ],
)
def test_the_verb_is_found_after_global_options(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith("OK: 47 messages")


def test_an_unknown_verb_lists_every_verb(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["nonsense"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'nonsense'" in err and "'verify'" in err and "'echo-demo'" in err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.startswith("hanet ")


def _damaged_store(root: Path) -> None:
    """Two queues of two topics; in one queue an entry changed in the middle of a run, in
    another a gap of queue offsets, and a third queue's tail never dispatched."""
    with CommitLogStore.open(root, StoreConfig(mapped_file_size=64 * 1024)) as store:
        for i in range(300):
            topic = "A" if i % 3 else "B"
            store.put(Message(topic, b"x" * (i % 50), queue_id=i % 2, properties={"TAGS": "t"}))
    cq = root / "consumequeue" / "A" / "1" / file_name(0)
    data = bytearray(cq.read_bytes())
    data[20 * 40 + 19] ^= 1  # entry 40's tags hash
    data[20 * 70 : 20 * 71] = data[20 * 71 : 20 * 72]  # entry 70 points at entry 71's record
    cq.write_bytes(bytes(data))
    cq = root / "consumequeue" / "B" / "0" / file_name(0)
    data = bytearray(cq.read_bytes())
    data[20 * 10 : 20 * 11] = bytes(20)  # a zeroed entry before written ones
    cq.write_bytes(bytes(data))


def _verify(root: Path, *, native: bool) -> tuple[int, str, str]:
    """``hanet verify root`` as a process: with the native code, or with none."""
    env = {k: v for k, v in os.environ.items() if k != "HANET_NO_EXTENSIONS"}
    if not native:
        env["HANET_NO_EXTENSIONS"] = "1"
    done = subprocess.run(
        [sys.executable, "-m", "hanet", "verify", str(root)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=60,
    )
    return done.returncode, done.stdout, done.stderr


def test_verify_names_the_same_problems_with_or_without_the_native_code(tmp_path: Path) -> None:
    _damaged_store(tmp_path)
    native = _verify(tmp_path, native=True)
    assert native == _verify(tmp_path, native=False)
    status, out, err = native
    assert status == 1 and out == ""
    assert "consume queue A/1 entry 40 is " in err
    assert "consume queue A/1 entry 70 is " in err
    assert "consume queue B/0 entry 10 is (0, 0, 0)" in err
    assert "3 problem(s) found" in err


def test_verify_of_a_healthy_store_with_or_without_the_native_code(tmp_path: Path) -> None:
    with CommitLogStore.open(tmp_path, StoreConfig(mapped_file_size=64 * 1024)) as store:
        for i in range(1000):
            store.put(Message(f"T{i % 3}", b"y" * (i % 70), queue_id=i % 4))
    native = _verify(tmp_path, native=True)
    assert native == _verify(tmp_path, native=False)
    status, out, _ = native
    assert status == 0 and out.startswith("OK: 1000 messages") and "12 consume queue(s)" in out


@pytest.mark.parametrize(
    ("argv", "missing"),
    [
        (["put", "--broker", "127.0.0.1:1", "--topic", "T", "--body", "x"], "rich"),
        (["master", "--store", "s"], "prometheus_client"),
        (["demo", "--tls"], "trustme"),
        (["audit", str(FIXTURE)], "rich"),
    ],
)
def test_a_verb_without_its_optional_package_says_what_to_install(
    argv: list[str], missing: str
) -> None:
    if argv[0] == "audit":
        pytest.importorskip("pyspark")  # without it, the Spark verbs say to install pyspark
    code = (
        "import sys\n"
        f"sys.modules[{missing!r}] = None  # not installed\n"
        "from hanet.cli import main\n"
        f"sys.exit(main({argv!r}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr == f"hanet: hanet {argv[0]} needs {missing}: pip install 'hanet[cli]'\n"
