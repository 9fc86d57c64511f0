"""Shared fixtures and helpers for the core tests.

Helpers live here (not in a package) because ``tests/`` has no ``__init__.py``; test modules
use them through fixtures only.
"""

from __future__ import annotations

import getpass
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import trio
from ha_support import master_store, slave_store  # noqa: F401 - the HA tests' fixtures

from hanet.testing import HanetProcesses

# The suite's disk. A store reserves each commit log file whole (``posix_fallocate``: 1 GiB by
# default, as RocketMQ's) and refuses puts once its disk is 75 % full. pytest keeps every test's
# tmp_path until the run ends, and the trees of the last three runs after that, so a few tests
# with default sizes once took a CI disk past that limit and the tests after them failed. Each
# test's tmp_path is therefore held to TEST_DISK_LIMIT, and a run starts by removing the trees of
# earlier runs that no live pytest holds (a running session keeps a ``.lock`` in its tree).
TEST_DISK_LIMIT = 384 * 1024 * 1024


def _allocated(root: Path) -> int:
    """Bytes the files under ``root`` hold on the disk (their blocks, not their lengths)."""
    total = 0
    for folder, _dirs, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_blocks * 512
            except OSError:  # removed while we walk
                pass
    return total


def pytest_sessionstart(session: pytest.Session) -> None:
    if session.config.option.basetemp:
        return
    try:
        user = getpass.getuser()
    except Exception:  # pragma: no cover - no user name: pytest itself uses "unknown"
        return
    temproot = os.environ.get("PYTEST_DEBUG_TEMPROOT") or tempfile.gettempdir()
    runs = Path(temproot) / f"pytest-of-{user}"
    if not runs.is_dir():
        return
    for tree in runs.iterdir():
        numbered = re.fullmatch(r"pytest-\d+", tree.name) and not tree.is_symlink()
        if numbered and not (tree / ".lock").exists():
            shutil.rmtree(tree, ignore_errors=True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    """Fail a test whose tmp_path holds more than TEST_DISK_LIMIT once it has been torn down."""
    funcargs = getattr(item, "funcargs", None) or {}
    tmp_path = funcargs.get("tmp_path")
    yield
    if isinstance(tmp_path, Path):
        used = _allocated(tmp_path)
        if used > TEST_DISK_LIMIT:
            pytest.fail(
                f"the test's tmp_path holds {used >> 20} MiB on the disk (limit "
                f"{TEST_DISK_LIMIT >> 20} MiB): give its stores a small mapped file size"
            )
    return None


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _live_tasks() -> int:
    """Every task under trio's root task, walked recursively (the current one included)."""

    def walk(task: trio.lowlevel.Task) -> int:
        return 1 + sum(
            walk(child) for nursery in task.child_nurseries for child in nursery.child_tasks
        )

    root = trio.lowlevel.current_root_task()
    assert root is not None
    return walk(root)


@pytest.fixture
def open_fds() -> Callable[[], int]:
    """Count the process's open file descriptors (Linux ``/proc/self/fd``)."""
    if not os.path.isdir("/proc/self/fd"):  # pragma: no cover - Linux only
        pytest.skip("needs /proc/self/fd")
    return _open_fds


@pytest.fixture
def live_tasks() -> Callable[[], int]:
    """Count the live trio tasks of the current run (call it inside the run)."""
    return _live_tasks


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[HanetProcesses]:
    """``hanet`` subprocesses under ``tmp_path``, killed when the test ends."""
    with HanetProcesses(tmp_path) as running:
        yield running
