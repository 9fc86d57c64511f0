"""The ``hanet`` command line.

Every verb is an ``async def handler(args) -> int`` registered by the ``register(subparsers)``
function of one module per verb family (``_store``: dump/verify; ``_broker``: master/slave;
``_client``: put/pull/status; ``_consume``; ``_demo``; ``_spark``: audit/diff/stats;
``_echo``); ``_support`` holds what they share. :func:`main` parses the arguments and calls
``trio.run`` exactly once for the life of the process. Ctrl-C arrives inside trio as a
``KeyboardInterrupt`` (wrapped in an exception group when it hits a nursery); it cancels
everything, the services shut down through their nurseries, and the process exits with status
130.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

import trio

from . import (
    _admin_query,
    _broker,
    _client,
    _consume,
    _demo,
    _dledger,
    _echo,
    _namesrv,
    _spark,
    _store,
)
from ._broker import build_config
from ._support import EXIT_BROKEN_PIPE, EXIT_INTERRUPTED

__all__ = [
    "Handler",
    "JsonFormatter",
    "build_config",
    "build_parser",
    "configure_logging",
    "main",
    "version",
]

Handler = Callable[[argparse.Namespace], Awaitable[int]]

# Verb families in the order ``hanet --help`` lists them. The Spark verbs load pyspark only
# when they run, and explain what to install when it is missing.
_VERB_MODULES = (
    _store,
    _broker,
    _dledger,
    _namesrv,
    _client,
    _consume,
    _demo,
    _spark,
    _echo,
    _admin_query,  # admin-query: until `hanet admin` takes its verbs
)


def _logging_options(parser: argparse.ArgumentParser, default: Any) -> None:
    parser.add_argument(
        "--log-level",
        default=default if default is argparse.SUPPRESS else "INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="logging level (INFO)",
    )
    parser.add_argument(
        "--log-format",
        default=default if default is argparse.SUPPRESS else "text",
        choices=["text", "json"],
        help="log lines as text or one JSON object each (text)",
    )


class _Verbs:
    """The sub-parser registry handed to each verb module: every verb also accepts the logging
    options after its name (``hanet master --log-level DEBUG``)."""

    def __init__(self, subparsers: Any, common: argparse.ArgumentParser) -> None:
        self._subparsers = subparsers
        self._common = common

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        kwargs["parents"] = [*kwargs.get("parents", ()), self._common]
        parser: argparse.ArgumentParser = self._subparsers.add_parser(name, **kwargs)
        return parser


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser with every registered verb."""
    parser = argparse.ArgumentParser(
        prog="hanet",
        description=(
            "Netty's pipeline on trio, RocketMQ-compatible HA replication, audits on Spark."
        ),
    )
    parser.add_argument("--version", action="version", version=f"hanet {version()}")
    _logging_options(parser, None)
    common = argparse.ArgumentParser(add_help=False)
    _logging_options(common, argparse.SUPPRESS)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    verbs = _Verbs(subparsers, common)
    for module in _VERB_MODULES:
        module.register(verbs)
    return parser


def version() -> str:
    """The installed package's version."""
    try:
        return importlib.metadata.version("hanet")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - not installed
        return "unknown"


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time (ISO 8601, UTC), level, logger, message, exception."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def configure_logging(level: str, form: str) -> None:
    """Everything a command logs goes to stderr, as text lines or JSON objects."""
    handler = logging.StreamHandler(sys.stderr)
    if form == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    logging.basicConfig(level=getattr(logging, level), handlers=[handler])


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``hanet`` command; returns the process exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.log_level, args.log_format)
    handler = cast(Handler, args.func)
    status = EXIT_INTERRUPTED
    try:
        status = trio.run(handler, args)
    except* KeyboardInterrupt:
        print("interrupted, shut down cleanly", file=sys.stderr)
    except* BrokenPipeError:
        # The reader went away (``hanet dump | head``): stop quietly, as a process killed by
        # SIGPIPE would, and keep Python from complaining when it flushes stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        status = EXIT_BROKEN_PIPE
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
