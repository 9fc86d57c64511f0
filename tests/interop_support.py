"""Two real RocketMQ clients as separate processes, for tests against hanet's name server and
broker: npm ``ali-ons`` (JavaScript, driven by ``interop/alions_driver.js``) and PyPI
``rocketmq`` (Apache's C++ client 1.0.1 through ctypes, driven by ``interop/cpp_driver.py``).

Both drivers take the same command line and print one JSON object per line (``event``:
``sent``, ``send_error``, ``received``, ``started``, ``error``; the last line ``summary``, or
``bench``). ``alions_command`` / ``cpp_command`` build a command line or skip the test with the
reason; ``run_driver`` runs one to the end, ``start_driver`` keeps one (a consumer) running for a
block and stops it with SIGTERM, which both drivers answer by shutting their client down (the
consumer unregisters from the broker).

ali-ons is installed once per machine into ``$XDG_CACHE_HOME/hanet-interop/node`` (default
``~/.cache/hanet-interop/node``), outside the repository, under a lock file so parallel test
processes do not race. The C++ client writes its log under ``$HOME/logs/rocketmq-cpp``; its
driver gets ``--home`` pointing into the same cache so ``~/logs`` stays clean.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from hanet.testing import cli_flags

ALIONS_VERSION = "3.12.0"
"""The ali-ons release the fixtures were captured with (its newest, checked with
``npm view ali-ons versions``)."""

CPP_CLIENT = "rocketmq==0.4.4"
"""The PyPI package (the ``test`` dependency group pins it)."""

DRIVERS = Path(__file__).resolve().parent / "interop"
ALIONS_DRIVER = DRIVERS / "alions_driver.js"
CPP_DRIVER = DRIVERS / "cpp_driver.py"

INSTALL_TIMEOUT = 600.0

Line = dict[str, Any]


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/hanet-interop`` (``~/.cache/hanet-interop`` by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "hanet-interop"


class ClientUnavailable(Exception):
    """A client cannot run on this machine; the message says why (a test skips with it)."""


# --- ali-ons ---------------------------------------------------------------------------------

_alions_lock = threading.Lock()
_alions_result: tuple[str, Path] | ClientUnavailable | None = None


def _find_node() -> tuple[str | None, str | None]:
    node = shutil.which("node") or shutil.which("nodejs")
    return node, shutil.which("npm")


def _apt_install_node() -> str:
    """Installs Debian's ``nodejs`` and ``npm`` (as root); a note of what happened."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "not root, so Debian's nodejs/npm were not installed"
    if shutil.which("apt-get") is None:
        return "no apt-get to install nodejs/npm with"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "nodejs", "npm"],
    ):
        done = subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=INSTALL_TIMEOUT, check=False
        )
        if done.returncode != 0:
            return f"{' '.join(argv)} failed: {done.stderr.strip()[-300:]}"
    return "installed Debian's nodejs and npm"


def _installed_version(modules: Path) -> str | None:
    try:
        data = json.loads((modules / "ali-ons" / "package.json").read_text())
    except (OSError, ValueError):
        return None
    version = data.get("version")
    return version if isinstance(version, str) else None


def ensure_alions(version: str = ALIONS_VERSION) -> tuple[str, Path]:
    """``(node, node_modules)`` with ali-ons ``version`` installed, installing it (and, as
    root, Debian's nodejs/npm when ``node`` is missing) the first time; ClientUnavailable
    when that cannot be done. The answer is remembered for the process."""
    global _alions_result
    with _alions_lock:
        if _alions_result is None:
            try:
                _alions_result = _install_alions(version)
            except ClientUnavailable as exc:
                _alions_result = exc
        if isinstance(_alions_result, ClientUnavailable):
            raise _alions_result
        return _alions_result


def _install_alions(version: str) -> tuple[str, Path]:
    node, npm = _find_node()
    note = ""
    if node is None or npm is None:
        note = _apt_install_node()
        node, npm = _find_node()
    if node is None:
        raise ClientUnavailable(f"ali-ons needs node (Node.js), not found; {note}")
    prefix = cache_dir() / "node"
    modules = prefix / "node_modules"
    if _installed_version(modules) == version:
        return node, modules
    if npm is None:
        raise ClientUnavailable(f"installing ali-ons needs npm, not found; {note}")
    prefix.mkdir(parents=True, exist_ok=True)
    with (cache_dir() / "node.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test process may be installing it now
        if _installed_version(modules) == version:
            return node, modules
        quiet = cli_flags(prefix=prefix, no_audit=True, no_fund=True, no_save=True)
        try:
            done = subprocess.run(
                [npm, "install", *quiet, f"ali-ons@{version}"],
                capture_output=True,
                text=True,
                timeout=INSTALL_TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise ClientUnavailable(
                f"npm install ali-ons@{version} took over {INSTALL_TIMEOUT:.0f} s"
            ) from None
        if done.returncode != 0 or _installed_version(modules) != version:
            tail = (done.stderr or done.stdout).strip()[-400:]
            raise ClientUnavailable(f"npm install ali-ons@{version} failed: {tail}")
    return node, modules


def alions_command(mode: str, namesrv: str, topic: str, **options: Any) -> list[str]:
    """``node alions_driver.js <mode> ...`` for ali-ons, or ``pytest.skip`` with the reason
    ali-ons cannot run here. ``options`` are the drivers' options with underscores
    (``group``, ``count``, ``in_flight``, ``tag``, ``delay_level``, ``prefix``, ``fail_first``,
    ``from_first``, ``seconds``, ``expect``, ``timeout``, ``instance``, ``verbose``; ali-ons
    only: ``poll_ms``, how often the client reads its routes from the name server)."""
    try:
        node, modules = ensure_alions()
    except ClientUnavailable as exc:
        pytest.skip(f"ali-ons unavailable: {exc}")
    flags = cli_flags(namesrv=namesrv, topic=topic, modules=modules, **options)
    return [node, str(ALIONS_DRIVER), mode, *flags]


# --- the C++ client (PyPI rocketmq) ----------------------------------------------------------

_cpp_lock = threading.Lock()
_cpp_reason: list[str | None] = []


def cpp_home() -> Path:
    """The ``HOME`` the C++ client runs with: its logs go to ``logs/rocketmq-cpp`` in it."""
    return cache_dir() / "cpp-home"


def cpp_client_unavailable_reason() -> str | None:
    """Why ``import rocketmq.client`` fails for this interpreter (None: it works). Checked once,
    in a child process, so the test process never loads ``librocketmq.so``."""
    with _cpp_lock:
        if not _cpp_reason:
            home = cpp_home()
            home.mkdir(parents=True, exist_ok=True)
            done = subprocess.run(
                [sys.executable, "-c", "import rocketmq.client"],
                env={**os.environ, "HOME": str(home)},
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            if done.returncode == 0:
                _cpp_reason.append(None)
            else:
                last = (done.stderr.strip().splitlines() or ["no output"])[-1]
                _cpp_reason.append(
                    f"`import rocketmq.client` fails ({last}); install {CPP_CLIENT} "
                    "(the test dependency group; a manylinux x86_64 wheel)"
                )
        return _cpp_reason[0]


def cpp_client_available() -> bool:
    return cpp_client_unavailable_reason() is None


def cpp_command(mode: str, namesrv: str, topic: str, **options: Any) -> list[str]:
    """``python cpp_driver.py <mode> ...`` for the C++ client, or ``pytest.skip`` with the
    reason it cannot run here; the same ``options`` as ``alions_command`` (no ``from_first``:
    the C API cannot set it), plus ``send_timeout_ms``."""
    reason = cpp_client_unavailable_reason()
    if reason is not None:
        pytest.skip(f"C++ client unavailable: {reason}")
    flags = cli_flags(namesrv=namesrv, topic=topic, home=cpp_home(), **options)
    return [sys.executable, str(CPP_DRIVER), mode, *flags]


# --- running drivers -------------------------------------------------------------------------


class DriverOutput(list[Line]):
    """The JSON lines a driver printed, with its exit status and stderr."""

    def __init__(self, lines: list[Line], returncode: int | None, stderr: str) -> None:
        super().__init__(lines)
        self.returncode = returncode
        self.stderr = stderr

    def events(self, event: str) -> list[Line]:
        return [line for line in self if line.get("event") == event]

    @property
    def summary(self) -> Line:
        """The last line when it is the summary (``summary`` or ``bench``)."""
        if not self or self[-1].get("event") not in {"summary", "bench"}:
            raise DriverError("the driver printed no summary line", self)
        return self[-1]


class DriverError(Exception):
    def __init__(self, message: str, output: DriverOutput) -> None:
        tail = output.stderr.strip()[-2000:]
        super().__init__(f"{message}; exit {output.returncode}; stderr:\n{tail}")
        self.output = output


def parse_lines(text: str) -> list[Line]:
    """The complete JSON object lines of ``text`` (a line that is not JSON is skipped)."""
    lines: list[Line] = []
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("{"):
            try:
                lines.append(json.loads(line))
            except ValueError:
                continue
    return lines


async def run_driver(cmd: list[str], timeout: float) -> DriverOutput:  # noqa: ASYNC109
    """Runs a driver to its end (async: a hanet server may be serving in this trio run) and
    returns its JSON lines; DriverError when it outlives ``timeout`` seconds: it is killed
    and the error carries what it printed (a caller's own deadline would lose that)."""
    async with start_driver(cmd) as driver:
        with trio.move_on_after(timeout) as scope:
            await driver.wait()
        if scope.cancelled_caught:
            driver.process.kill()
            await driver.wait()
            raise DriverError(f"the driver ran over {timeout} s", driver.output())
    return driver.output()


class Driver:
    """A running driver: its JSON lines so far in ``lines``, its stderr in ``stderr``."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.lines: list[Line] = []
        self._stderr = bytearray()
        self._closed = trio.Event()
        self._new_line = trio.Event()

    @property
    def stderr(self) -> str:
        return self._stderr.decode("utf-8", "replace")

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    def output(self) -> DriverOutput:
        return DriverOutput(list(self.lines), self.process.returncode, self.stderr)

    async def _read_stdout(self) -> None:
        assert self.process.stdout is not None
        pending = b""
        try:
            async for chunk in self.process.stdout:
                pending += chunk
                *complete, pending = pending.split(b"\n")
                fresh = parse_lines(b"\n".join(complete).decode("utf-8", "replace"))
                if fresh:
                    self.lines += fresh
                    self._new_line.set()
                    self._new_line = trio.Event()
            self.lines += parse_lines(pending.decode("utf-8", "replace"))
        finally:  # also when cancelled (a deadline around the block): wait() must not hang
            self._closed.set()
            self._new_line.set()

    async def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        async for chunk in self.process.stderr:
            self._stderr += chunk

    async def wait(self) -> int:
        """Waits for the process to exit and its stdout to be read to the end."""
        code = await self.process.wait()
        await self._closed.wait()
        return code

    async def wait_for(self, event: str, count: int = 1, seconds: float = 30.0) -> list[Line]:
        """Waits until the driver printed ``count`` lines of ``event``; DriverError when it
        exits first or ``seconds`` pass."""
        with trio.move_on_after(seconds):
            while True:
                found = [line for line in self.lines if line.get("event") == event]
                if len(found) >= count:
                    return found
                if self._closed.is_set():
                    raise DriverError(f"the driver exited before {count} {event!r}", self.output())
                await self._new_line.wait()
        raise DriverError(f"no {count} {event!r} lines within {seconds} s", self.output())

    async def stop(self, grace: float = 20.0) -> DriverOutput:
        """SIGTERM (the driver shuts its client down and prints its summary), SIGKILL after
        ``grace`` seconds; the output."""
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            with trio.move_on_after(grace):
                await self.wait()
            if self.process.returncode is None:
                self.process.kill()
        with trio.CancelScope(shield=True):
            await self.wait()
        return self.output()


@asynccontextmanager
async def start_driver(cmd: list[str], grace: float = 20.0) -> AsyncIterator[Driver]:
    """Starts a driver in the background for the block; at its end the driver is stopped
    (``Driver.stop``) if it still runs."""
    process = await trio.lowlevel.open_process(
        cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    driver = Driver(process)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(driver._read_stdout)
            nursery.start_soon(driver._read_stderr)
            try:
                yield driver
            finally:
                with trio.CancelScope(shield=True):
                    await driver.stop(grace)
    finally:
        if process.returncode is None:  # pragma: no cover - only when stop itself failed
            process.kill()
            await process.wait()
