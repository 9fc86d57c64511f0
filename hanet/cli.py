"""The ``hanet`` command line.

Every verb is an ``async def handler(args) -> int`` registered by a ``register(subparsers)``
function in the module that owns the concept (``hanet.store._cli``, ``hanet.ha._cli``,
``hanet.spark._cli``, ...). :func:`main` parses the arguments and calls ``trio.run`` exactly once
for the life of the process. Ctrl-C arrives inside trio as a ``KeyboardInterrupt`` (wrapped in an
exception group when it hits a nursery); it cancels everything, the services shut down through
their nurseries, and the process exits with status 130.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import cast

import trio

__all__ = ["Handler", "build_parser", "main"]

Handler = Callable[[argparse.Namespace], Awaitable[int]]

# Modules that contribute verbs, each with a ``register(subparsers)`` function. A module whose
# optional dependencies are missing (pyspark) registers verbs that explain what to install.
_COMMAND_MODULES = (
    "hanet.store._cli",
    "hanet.ha._cli",
    "hanet.spark._cli",
    "hanet._echo_cli",
)

EXIT_INTERRUPTED = 130


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser with every registered verb."""
    parser = argparse.ArgumentParser(
        prog="hanet",
        description=(
            "Netty's pipeline on trio, RocketMQ-compatible HA replication, audits on Spark."
        ),
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="logging level (default INFO)",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and name.startswith(exc.name):
                continue  # the module itself is not written yet
            raise
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``hanet`` command; returns the process exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level),
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    handler = cast(Handler, args.func)
    status = EXIT_INTERRUPTED
    try:
        status = trio.run(handler, args)
    except* KeyboardInterrupt:
        print("interrupted, shut down cleanly", file=sys.stderr)
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
