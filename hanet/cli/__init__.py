"""The ``hanet`` command line.

Every verb is an ``async def handler(args) -> int`` registered by the ``register(subparsers)``
function of one module per verb family (``_store``: dump/verify; ``_broker``: master/slave;
``_client``: put/pull/status; ``_demo``; ``_spark``: audit/diff/stats; ``_echo``); ``_support``
holds what they share. :func:`main` parses the arguments and calls ``trio.run`` exactly once
for the life of the process. Ctrl-C arrives inside trio as a ``KeyboardInterrupt`` (wrapped in an
exception group when it hits a nursery); it cancels everything, the services shut down through
their nurseries, and the process exits with status 130.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import cast

import trio

from . import _broker, _client, _demo, _echo, _spark, _store
from ._broker import build_config
from ._support import EXIT_INTERRUPTED

__all__ = ["Handler", "build_config", "build_parser", "main"]

Handler = Callable[[argparse.Namespace], Awaitable[int]]

# Verb families in the order ``hanet --help`` lists them. The Spark verbs load pyspark only
# when they run, and explain what to install when it is missing.
_VERB_MODULES = (_store, _broker, _client, _demo, _spark, _echo)


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
    for module in _VERB_MODULES:
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
