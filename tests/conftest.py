"""Shared fixtures and helpers for the core tests.

Helpers live here (not in a package) because ``tests/`` has no ``__init__.py``; test modules
use them through fixtures only.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import trio
from ha_support import master_store, slave_store  # noqa: F401 - the HA tests' fixtures

from hanet.testing import HanetProcesses


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
