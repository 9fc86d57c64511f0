"""The ``hanet`` command line.

Every verb is an ``async def handler(args) -> int`` registered by the ``register(subparsers)``
function of one module per verb family (``_store``: dump/verify; ``_broker``: master/slave;
``_client``: put/pull/status; ``_consume``; ``_demo``; ``_spark``: audit/diff/stats/spark-connect;
``_echo``); ``_support`` holds what they share. The command line imports only the family of
the verb it runs (:data:`VERBS` names every verb and its one-line help, so ``hanet --help``
and ``hanet --version`` import none, and trio only once a verb runs); :func:`build_parser`
with no argument registers them all. :func:`main` parses the arguments and calls
``trio.run`` exactly once for the life of the process. Ctrl-C arrives inside trio as a
``KeyboardInterrupt`` (wrapped in an exception group when it hits a nursery); it cancels
everything, the services shut down through their nurseries, and the process exits with status
130.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from ._support import EXIT_BROKEN_PIPE, EXIT_INTERRUPTED, fail

if TYPE_CHECKING:
    from hanet.ha import BrokerConfig, BrokerRole

__all__ = [
    "VERBS",
    "Handler",
    "JsonFormatter",
    "build_config",
    "build_parser",
    "configure_logging",
    "main",
    "version",
]

Handler = Callable[[argparse.Namespace], Awaitable[int]]

VERBS: tuple[tuple[str, str, str], ...] = (
    ("_store", "dump", "print the messages of a commit log"),
    ("_store", "verify", "check every record and consume queue entry of a store"),
    (
        "_broker",
        "master",
        "run a master broker: store, HA port for slaves, broker port for clients",
    ),
    ("_broker", "slave", "run a slave broker replicating a master"),
    (
        "_dledger",
        "dledger",
        "run a DLedger node: a Raft-replicated commit log with automatic failover",
    ),
    ("_namesrv", "namesrv", "run a name server: brokers register, clients look up topic routes"),
    ("_admin", "admin", "manage a cluster with mqadmin's verbs (clusterList, updateTopic, ...)"),
    ("_client", "put", "put messages through a broker port"),
    ("_client", "pull", "pull messages of a queue through a broker port"),
    (
        "_client",
        "status",
        "show a broker's role, offsets and replication state (--namesrv: the cluster)",
    ),
    (
        "_consume",
        "consume",
        "consume a topic for a group: its share of the queues, offsets committed, slave failover",
    ),
    (
        "_demo",
        "demo",
        "a master, two slaves and a producer on loopback, then a byte-for-byte check",
    ),
    (
        "_spark",
        "audit",
        "audit stores on Spark: counts, corrupt data, CRCs, queue offsets, consume queues",
    ),
    ("_spark", "diff", "compare a slave's commit log with its master's on Spark"),
    ("_spark", "stats", "per-topic traffic, latency and largest messages of stores on Spark"),
    ("_spark", "spark-connect", "run a Spark Connect server: audit|diff|stats --remote reuse it"),
    (
        "_echo",
        "echo-demo",
        "run an echo server and a reconnecting client on loopback for a few seconds",
    ),
)
"""``(family module, verb, help)`` in the order ``hanet --help`` lists them: what the help
shows without importing a family, and the help each family's verb is registered with (a test
checks the table against the families' registrations).
The Spark verbs load pyspark only when they run, and explain what to install when it is
missing."""

_HELP = {name: text for _, name, text in VERBS}

_GLOBAL_OPTIONS_WITH_VALUE = ("--log-level", "--log-format")
_CLI_EXTRA = ("rich", "prometheus_client", "trustme")
"""The packages of ``hanet[cli]``: a verb that imports one says to install it when missing."""


def build_config(args: argparse.Namespace, role: BrokerRole | None = None) -> BrokerConfig:
    """The broker configuration of ``master``/``slave`` arguments: defaults, then ``--config
    FILE``, then the flags given (see :func:`hanet.cli._broker.build_config`)."""
    from ._broker import build_config as build  # noqa: PLC0415 - imports the broker

    return build(args, role)


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
    options after its name (``hanet master --log-level DEBUG``), and its one-line help is the
    one :data:`VERBS` gives it."""

    def __init__(self, subparsers: Any, common: argparse.ArgumentParser) -> None:
        self._subparsers = subparsers
        self._common = common

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        kwargs["parents"] = [*kwargs.get("parents", ()), self._common]
        kwargs.setdefault("help", _HELP.get(name))
        parser: argparse.ArgumentParser = self._subparsers.add_parser(name, **kwargs)
        return parser


def build_parser(verb: str | None = None) -> argparse.ArgumentParser:
    """Build the argument parser: with every verb registered (``verb`` None), or with only the
    family of ``verb`` registered and the other verbs listed by name and help (``""``: none)."""
    parser = argparse.ArgumentParser(
        prog="hanet",
        description=(
            "Netty's pipeline on trio, RocketMQ-compatible HA replication, audits on Spark."
        ),
    )
    parser.add_argument("--version", action=_VersionAction, help="show the version and exit")
    _logging_options(parser, None)
    common = argparse.ArgumentParser(add_help=False)
    _logging_options(common, argparse.SUPPRESS)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    verbs = _Verbs(subparsers, common)
    wanted = {family for family, name, _ in VERBS if verb is None or name == verb}
    registered: set[str] = set()
    for family, name, text in VERBS:
        if family not in wanted:
            subparsers.add_parser(name, help=text)  # listed; registered when it runs
        elif family not in registered:
            registered.add(family)
            importlib.import_module(f"{__name__}.{family}").register(verbs)
    return parser


class _VersionAction(argparse.Action):
    """``--version``: the installed version (read only when asked for)."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        print(f"hanet {version()}")  # on stdout, as argparse's own version action
        parser.exit()


def _verb_of(argv: Sequence[str]) -> str:
    """The verb ``argv`` names (its first word that is no option or option value); ``""``
    when there is none."""
    words = iter(argv)
    for word in words:
        if not word.startswith("-"):
            return word
        if word == "--":
            return next(words, "")
        if (
            "=" not in word
            and len(word) > 2
            and any(option.startswith(word) for option in _GLOBAL_OPTIONS_WITH_VALUE)
        ):
            next(words, None)  # the option's value
    return ""


def version() -> str:
    """The installed package's version."""
    import importlib.metadata  # noqa: PLC0415 - only for --version

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
    if argv is None:
        argv = sys.argv[1:]
    verb = _verb_of(argv)
    try:
        parser = build_parser(verb)
    except ModuleNotFoundError as exc:  # an optional dependency of the command line
        package = (exc.name or "").split(".")[0]
        if package not in _CLI_EXTRA:
            raise
        return fail(f"hanet {verb} needs {package}: pip install 'hanet[cli]'")
    args = parser.parse_args(argv)
    configure_logging(args.log_level, args.log_format)
    handler = cast(Handler, args.func)
    import trio  # noqa: PLC0415 - only once a verb runs

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
