"""The ``hanet namesrv`` verb: run a name server until Ctrl-C (exit 130) or SIGTERM (exit 0).

``hanet namesrv --listen HOST:PORT`` (127.0.0.1:9876) serves broker registrations and route
lookups over RocketMQ 4.9.8's remoting protocol (:mod:`hanet.namesrv`), to hanet's brokers and
clients and to RocketMQ's own; a registration not renewed for ``--expire-after`` seconds (120)
expires, and one whose connection closes leaves at once. ``--ready-file FILE`` writes the
bound address as JSON once serving (port 0 picks a free port). ``--tls-cert``/``--tls-key``
serve TLS (``--tls-ca``: mutual TLS) and ``--listen-allow`` limits the networks that may
connect, as on a broker's port. ``--acl-file FILE`` checks every request against RocketMQ's
``plain_acl.yml`` (signed requests; registering needs an admin account). Every new broker,
address change and expiry is logged.

Errors (bad flags, a port in use) print one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
from pathlib import Path
from typing import Any

import trio

from hanet.boot import AllowList, TlsConfig, run_until_stopped
from hanet.channel import format_address
from hanet.errors import ConfigError
from hanet.namesrv import DEFAULT_EXPIRE_AFTER, DEFAULT_PORT, NameServer

from ._support import (
    EXIT_OK,
    fail,
    first_error,
    first_message,
    interrupted,
    parse_address,
    stop_status,
    write_ready_file,
)

__all__ = ["register"]

log = logging.getLogger("hanet.namesrv")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"seconds must be > 0, got {text}")
    return value


def register(subparsers: Any) -> None:
    """Add the ``namesrv`` verb to the ``hanet`` parser."""
    parser = subparsers.add_parser(
        "namesrv",
        help="run a name server: brokers register, clients look up topic routes",
        description="Run a name server until Ctrl-C or SIGTERM. Brokers (--namesrv) register "
        "every 30 s; a registration not renewed for --expire-after seconds expires.",
    )
    parser.add_argument(
        "--listen", type=parse_address, default=("127.0.0.1", DEFAULT_PORT), metavar="HOST:PORT",
        help=f"where to serve (127.0.0.1:{DEFAULT_PORT}; port 0: any)",
    )  # fmt: skip
    parser.add_argument(
        "--expire-after", type=_seconds, default=DEFAULT_EXPIRE_AFTER, metavar="SECONDS",
        help=f"drop a broker not registered again for this long ({DEFAULT_EXPIRE_AFTER:g})",
    )  # fmt: skip
    parser.add_argument(
        "--tls-cert", type=Path, default=None, metavar="FILE",
        help="serve TLS with this certificate chain (PEM)",
    )  # fmt: skip
    parser.add_argument(
        "--tls-key", type=Path, default=None, metavar="FILE",
        help="the private key of --tls-cert (PEM)",
    )  # fmt: skip
    parser.add_argument(
        "--tls-ca", type=Path, default=None, metavar="FILE",
        help="require client certificates signed by this CA (mutual TLS)",
    )  # fmt: skip
    parser.add_argument(
        "--listen-allow", type=str, default=None, metavar="NETWORKS",
        help="accept connections from these networks only (10.0.0.0/8,127.0.0.1)",
    )  # fmt: skip
    parser.add_argument(
        "--ready-file", type=Path, default=None, metavar="FILE",
        help="write the bound address here as JSON once serving",
    )  # fmt: skip
    parser.add_argument(
        "--acl-file", type=Path, default=None, metavar="FILE",
        help="turn RocketMQ's plain ACL on with this plain_acl.yml (reloaded when it changes; "
        "registrations need an admin account)",
    )  # fmt: skip
    parser.set_defaults(func=run_namesrv)


def _build(args: argparse.Namespace) -> NameServer:
    """The name server of the flags.

    Raises:
        ConfigError: bad TLS files or networks.
    """
    tls = None
    if args.tls_cert is not None or args.tls_key is not None or args.tls_ca is not None:
        tls = TlsConfig(cert=args.tls_cert, key=args.tls_key, ca=args.tls_ca).server_context()
    allow = AllowList.parse(args.listen_allow) if args.listen_allow else None
    return NameServer(
        args.listen,
        expire_after=args.expire_after,
        tls=tls,
        allow=allow,
        acl_file=args.acl_file,
    )


async def run_namesrv(args: argparse.Namespace) -> int:
    """Run the name server until SIGTERM (0) or Ctrl-C (130)."""
    try:
        server = _build(args)
    except ConfigError as exc:
        return fail(str(exc))
    ready_file: Path | None = args.ready_file
    stopped = EXIT_OK
    error: str | None = None

    async def serve() -> None:
        async with trio.open_nursery() as nursery:
            address: tuple[str, int] = await nursery.start(server.run)
            log.info("name server ready on %s", format_address(address))
            if ready_file is not None:
                write_ready_file(
                    ready_file,
                    {
                        "namesrv": format_address(address),
                        "expire_after": server.registry.expire_after,
                        "pid": os.getpid(),
                    },
                )

    try:
        stopped = stop_status(await run_until_stopped(serve))
    except* (ConfigError, OSError) as group:
        error = first_message(group)
        first = first_error(group)
        if isinstance(first, OSError) and first.errno == errno.EADDRINUSE:
            error = f"cannot listen: {error} ({format_address(args.listen)})"
    return interrupted(stopped) if error is None else fail(error)
