"""``hanet`` verbs as subprocesses, for tests and benchmarks.

:class:`HanetProcess` starts ``python -m hanet <verb> ... --ready-file FILE`` with its output in
a log file, and is ready once the verb has written its ready file (the bound addresses as JSON,
written atomically). It is a :class:`subprocess.Popen` underneath, so the same object serves a
trio test (``await start()``, ``await stop()``) and a module-scoped fixture that outlives one
trio run (``start_blocking()``, ``close()``). :class:`HanetProcesses` starts several and kills
whatever still runs when it closes. :func:`wait_until` polls a condition in a trio run.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import math
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar, overload

import trio

from hanet.channel import parse_address

__all__ = ["HanetProcess", "HanetProcesses", "split_address", "wait_until", "wait_until_blocking"]

_POLL = 0.02
_T = TypeVar("_T")


split_address = parse_address
"""``host:port`` (``[::1]:port`` too) as ``(host, port)``: :func:`hanet.channel.parse_address`."""


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return ""


class HanetProcess:
    """One ``hanet`` verb as a subprocess, ready once its ready file is written.

    ``argv`` is what follows ``hanet``; :meth:`start` may add more for one run. ``env``
    replaces the environment; ``cwd`` is the working directory (``python -m hanet`` imports
    ``hanet`` from there first: a benchmark runs another source tree so); ``preexec_fn`` runs
    in the child before ``hanet`` (to set a resource limit); ``stdout`` takes what the verb
    prints on stdout (else the log); with
    ``ready_file=False`` the verb is given no ``--ready-file`` (``hanet consume``) and counts
    as ready once started. Each run writes its own ready file and log (``<name>-<run>.ready``,
    ``<name>-<run>.log`` under ``root``). ``ready`` is the last run's ready data
    (``{"broker": "127.0.0.1:40123", ...}``); :meth:`address` reads one of its addresses.
    """

    def __init__(
        self,
        root: Path,
        name: str,
        *argv: str,
        env: Mapping[str, str] | None = None,
        ready_seconds: float = 30.0,
        preexec_fn: Callable[[], object] | None = None,
        stdout: Path | None = None,
        ready_file: bool = True,
        cwd: Path | None = None,
    ) -> None:
        self.root = root
        self.name = name
        self.argv: tuple[str, ...] = argv
        self.env = dict(env) if env is not None else None
        self.ready_seconds = ready_seconds
        self.preexec_fn = preexec_fn
        self.stdout = stdout
        self.writes_ready_file = ready_file
        self.cwd = cwd
        self.process: subprocess.Popen[bytes] | None = None
        self.ready: dict[str, Any] = {}
        self.runs = 0

    # -- what it is -----------------------------------------------------------------------

    @property
    def log(self) -> Path:
        """The current (last started) run's stdout and stderr."""
        return self.root / f"{self.name}-{self.runs}.log"

    @property
    def ready_file(self) -> Path:
        """The current (last started) run's ready file."""
        return self.root / f"{self.name}-{self.runs}.ready"

    def text(self, run: int | None = None) -> str:
        """What run ``run`` (1, 2, ...; the current one when ``None``) printed so far, or every
        run's output one after the other with ``run=0``."""
        runs = range(1, self.runs + 1) if run == 0 else [self.runs if run is None else run]
        return "".join(_read(self.root / f"{self.name}-{n}.log") for n in runs)

    @property
    def pid(self) -> int:
        return self._started().pid

    @property
    def returncode(self) -> int | None:
        """``None`` while it runs (or before it started), else its exit status."""
        return None if self.process is None else self.process.poll()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def address(self, key: str = "broker") -> tuple[str, int]:
        """The ``(host, port)`` the ready file gives for ``key`` (``broker``, ``ha``,
        ``namesrv``, ``dledger``, ...)."""
        return split_address(self.ready[key])

    # -- starting -------------------------------------------------------------------------

    def spawn(self, *extra: str) -> subprocess.Popen[bytes]:
        """Start a run without waiting for it to be ready (see :meth:`poll_ready`)."""
        assert not self.running, f"{self.name} is already running"
        self.runs += 1
        self.ready = {}
        self.ready_file.unlink(missing_ok=True)
        command = [sys.executable, "-m", "hanet", *self.argv, *extra]
        if self.writes_ready_file:
            command += ["--ready-file", str(self.ready_file)]
        with contextlib.ExitStack() as files:
            log = files.enter_context(self.log.open("wb"))
            out = log if self.stdout is None else files.enter_context(self.stdout.open("ab"))
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=log,
                env=self.env,
                cwd=self.cwd,
                preexec_fn=self.preexec_fn,  # noqa: PLW1509 - a test's own limits
            )
        return self.process

    def poll_ready(self) -> dict[str, Any] | None:
        """The current run's ready data once written; ``None`` before. Fails (killing nothing)
        when the process exited without writing it. A verb that writes no ready file is ready
        at once (``{}``)."""
        if not self.writes_ready_file:
            return self.ready
        try:
            data: dict[str, Any] = json.loads(self.ready_file.read_text(encoding="utf-8"))
        except (FileNotFoundError, ValueError):
            if self._started().poll() is not None:
                raise AssertionError(
                    f"{self.name} exited ({self.returncode}) before it was ready:\n{self.text()}"
                ) from None
            return None
        self.ready = data
        return data

    async def start(self, *extra: str) -> dict[str, Any]:
        """Start a run (``argv`` then ``extra``) and wait for its ready file; its data."""
        self.spawn(*extra)
        return await self.wait_ready()

    async def wait_ready(self) -> dict[str, Any]:
        """Wait for the current run's ready file (after :meth:`spawn`); its data."""
        deadline = trio.current_time() + self.ready_seconds
        while (data := self.poll_ready()) is None:
            if trio.current_time() > deadline:
                self._not_ready()
            await trio.sleep(_POLL)
        return data

    def start_blocking(self, *extra: str) -> dict[str, Any]:
        """:meth:`start` outside a trio run (a fixture shared by several tests)."""
        self.spawn(*extra)
        deadline = time.monotonic() + self.ready_seconds
        while (data := self.poll_ready()) is None:
            if time.monotonic() > deadline:
                self._not_ready()
            time.sleep(_POLL)
        return data

    # -- stopping -------------------------------------------------------------------------

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` if it still runs."""
        if self.running:
            self._started().send_signal(sig)

    async def wait(self, seconds: float = 15.0) -> int:
        """Its exit status, once it exits (fails after ``seconds``)."""
        process = self._started()
        with trio.fail_after(seconds):
            while (status := process.poll()) is None:  # noqa: ASYNC110 - a Popen child
                await trio.sleep(_POLL)
        return status

    async def stop(self, sig: int = signal.SIGTERM, seconds: float = 15.0) -> int:
        """Send ``sig`` (a clean stop by default) and wait for it to exit: its status."""
        self.send_signal(sig)
        return await self.wait(seconds)

    async def kill(self) -> int:
        """kill -9, and wait until it is gone."""
        return await self.stop(signal.SIGKILL, 10.0)

    def close(self, sig: int = signal.SIGKILL, seconds: float = 10.0) -> None:
        """Make sure it is not running (blocking; for ``finally`` and fixtures): ``sig``, then
        kill -9 if it has not exited within ``seconds``."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.send_signal(sig)
        try:
            process.wait(seconds)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    # -- helpers --------------------------------------------------------------------------

    def _started(self) -> subprocess.Popen[bytes]:
        assert self.process is not None, f"{self.name} was never started"
        return self.process

    def _not_ready(self) -> None:
        self.close()
        raise AssertionError(
            f"{self.name} was not ready within {self.ready_seconds} s:\n{self.text()}"
        )


class HanetProcesses:
    """Several :class:`HanetProcess` under one folder; closing kills whatever still runs.

    Use it as a context manager, sync or async (``async with HanetProcesses(tmp_path) as
    procs:``), or through the tests' ``processes`` fixture. ``close_signal`` is what
    :meth:`close` sends first (kill -9 by default; SIGTERM to stop them cleanly, kill -9 after
    10 s).
    """

    def __init__(self, root: Path, close_signal: int = signal.SIGKILL) -> None:
        self.root = root
        self.close_signal = close_signal
        self.all: list[HanetProcess] = []

    def add(self, name: str, *argv: str, **kwargs: Any) -> HanetProcess:
        """A process that is not started yet (``name`` names its log and ready files)."""
        assert all(p.name != name for p in self.all), f"two processes named {name}"
        process = HanetProcess(self.root, name, *argv, **kwargs)
        self.all.append(process)
        return process

    async def start(self, name: str, *argv: str, **kwargs: Any) -> HanetProcess:
        """:meth:`add` and :meth:`HanetProcess.start` it."""
        process = self.add(name, *argv, **kwargs)
        await process.start()
        return process

    def start_blocking(self, name: str, *argv: str, **kwargs: Any) -> HanetProcess:
        process = self.add(name, *argv, **kwargs)
        process.start_blocking()
        return process

    def __getitem__(self, name: str) -> HanetProcess:
        for process in self.all:
            if process.name == name:
                return process
        raise KeyError(name)

    @property
    def running(self) -> bool:
        """Whether every one still runs."""
        return all(p.running for p in self.all)

    def logs(self, tail: int = 3000) -> str:
        """The end of each one's log, for an assertion message."""
        return "\n".join(f"--- {p.name}\n{p.text(0)[-tail:]}" for p in self.all)

    async def stop_all(self, sig: int = signal.SIGTERM, seconds: float = 10.0) -> None:
        """Send ``sig`` to every one that runs, wait up to ``seconds`` for them to exit, then
        kill -9 whatever still runs."""
        for process in self.all:
            process.send_signal(sig)
        with trio.move_on_after(seconds):
            for process in self.all:
                if process.process is not None:
                    await process.wait(math.inf)
        for process in self.all:
            process.close()

    def close(self) -> None:
        for process in reversed(self.all):  # the last started (the clients of others) first
            process.close(self.close_signal)

    def __enter__(self) -> HanetProcesses:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> HanetProcesses:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()


@overload
async def wait_until(
    predicate: Callable[[], Awaitable[_T]],
    seconds: float = ...,
    interval: float = ...,
    *,
    what: str | None = ...,
) -> _T: ...
@overload
async def wait_until(
    predicate: Callable[[], _T],
    seconds: float = ...,
    interval: float = ...,
    *,
    what: str | None = ...,
) -> _T: ...
async def wait_until(
    predicate: Callable[[], object],
    seconds: float = 15.0,
    interval: float = 0.01,
    *,
    what: str | None = None,
) -> object:
    """Poll ``predicate`` (a function, or an async one) until it returns something true; that
    value. After ``seconds`` of the current clock (virtual time under an autojump clock) it
    raises :class:`trio.TooSlowError`, or :class:`AssertionError` naming ``what`` was awaited
    when given."""
    with trio.move_on_after(seconds) as scope:
        while True:
            value = predicate()
            if inspect.isawaitable(value):
                value = await value
            if value:
                return value
            await trio.sleep(interval)
    assert scope.cancelled_caught
    if what is not None:
        raise AssertionError(f"timed out after {seconds} s waiting for {what}")
    raise trio.TooSlowError


def wait_until_blocking(
    predicate: Callable[[], _T],
    seconds: float = 15.0,
    interval: float = 0.05,
    *,
    what: str | None = None,
) -> _T:
    """:func:`wait_until` outside a trio run (a test that runs ``hanet.cli.main`` itself):
    sleeps between polls; :class:`AssertionError` after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not (value := predicate()):
        if time.monotonic() > deadline:
            waited = f" waiting for {what}" if what is not None else ""
            raise AssertionError(f"timed out after {seconds} s{waited}")
        time.sleep(interval)
    return value
