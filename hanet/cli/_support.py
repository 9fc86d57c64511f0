"""What every verb shares: exit statuses, one-line errors, argument types."""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
from pathlib import Path
from typing import Any

from hanet.errors import ConfigError

__all__ = [
    "EXIT_BROKEN_PIPE",
    "EXIT_ERROR",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "fail",
    "first_error",
    "first_message",
    "interrupted",
    "parse_address",
    "parse_addresses",
    "parse_size",
    "stop_status",
    "write_ready_file",
]

EXIT_OK = 0
"""Success."""
EXIT_FAILED = 1
"""The command ran and found a problem (a bad record, a refused put, a diverging slave)."""
EXIT_ERROR = 2
"""The command could not run (bad arguments, an unreadable store, no connection)."""
EXIT_INTERRUPTED = 130
"""Ctrl-C: shut down cleanly."""
EXIT_BROKEN_PIPE = 141
"""stdout's reader went away (``| head``): what a process ended by SIGPIPE reports."""


def fail(message: str, status: int = EXIT_ERROR) -> int:
    """Print ``hanet: message`` on stderr; return ``status``."""
    print(f"hanet: {message}", file=sys.stderr, flush=True)
    return status


def parse_size(text: str) -> int:
    """An integer byte count, with an optional K/M/G suffix (binary)."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    text = text.strip().lower().removesuffix("ib").removesuffix("b")
    scale = units.get(text[-1:], 1)
    if scale != 1:
        text = text[:-1]
    try:
        value = int(text) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a byte count: {text!r}") from None
    return value


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` as an argparse type."""
    from hanet.channel import parse_address as split  # noqa: PLC0415 - loads trio: not for --help

    try:
        return split(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_addresses(text: str) -> list[tuple[str, int]]:
    """``HOST:PORT[;HOST:PORT...]`` (``,`` separates too; RocketMQ's ``namesrvAddr``) as an
    argparse type."""
    addresses = [parse_address(part.strip()) for part in re.split(r"[;,]", text) if part.strip()]
    if not addresses:
        raise argparse.ArgumentTypeError("no address")
    return addresses


def first_error(group: BaseExceptionGroup[Any]) -> BaseException:
    """The first leaf exception of a (nested) exception group."""
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


def first_message(group: BaseExceptionGroup[Any]) -> str:
    """A one-line message for the first leaf exception (an OS error by its strerror)."""
    exc = first_error(group)
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror + (f": {exc.filename}" if exc.filename else "")
    return str(exc)


def stop_status(received: signal.Signals | None) -> int:
    """The exit status of a service stopped by ``received`` (see
    :func:`hanet.boot.run_until_stopped`): :data:`EXIT_INTERRUPTED` for Ctrl-C, else 0."""
    return EXIT_INTERRUPTED if received == signal.SIGINT else EXIT_OK


def write_ready_file(path: Path, data: dict[str, Any]) -> None:
    """Write a service's ``--ready-file`` (JSON) atomically: a reader never sees half of it."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data) + "\n", encoding="utf-8")
    tmp.replace(path)


def interrupted(status: int) -> int:
    """Say that a service stopped by Ctrl-C shut down cleanly (what the command line says for
    an interrupted command); returns ``status``."""
    if status == EXIT_INTERRUPTED:
        print("interrupted, shut down cleanly", file=sys.stderr, flush=True)
    return status
