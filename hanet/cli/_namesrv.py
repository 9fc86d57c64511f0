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

Who may register: a registration belongs to the identity it came from (the certificate name
under mutual TLS, the remote IP on plain TCP) and no other identity can take it over, renew it
or unregister it while it lives. ``--tls-broker-pattern REGEX`` (mutual TLS) lets only
certificates with a name matching it register at all; clients with other certificates still
look routes up. ``--max-registrations`` (10000) bounds the registrations held,
``--max-registrations-per-identity`` (64) those of one identity.

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
from hanet.namesrv import (
    DEFAULT_EXPIRE_AFTER,
    DEFAULT_PORT,
    MAX_BROKERS,
    MAX_PER_IDENTITY,
    BrokerTrust,
    NameServer,
)

from ._support import (
    EXIT_OK,
    fail,
    first_error,
    first_message,
    interrupted,
    parse_address,
    parse_size,
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


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a count: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


def register(subparsers: Any) -> None:
    """Add the ``namesrv`` verb to the ``hanet`` parser."""
    parser = subparsers.add_parser(
        "namesrv",
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
        "--tls-broker-pattern", type=str, default=None, metavar="REGEX",
        help="with mutual TLS, only certificates with a name (CN or SAN) matching this regular "
        "expression may register brokers (any certificate of the CA)",
    )  # fmt: skip
    parser.add_argument(
        "--max-registrations", type=_count, default=MAX_BROKERS, metavar="N",
        help=f"most broker registrations held ({MAX_BROKERS})",
    )  # fmt: skip
    parser.add_argument(
        "--max-registrations-per-identity", type=_count, default=MAX_PER_IDENTITY, metavar="N",
        help="most registrations one identity (a certificate name, or a remote IP on plain "
        f"TCP) holds ({MAX_PER_IDENTITY})",
    )  # fmt: skip
    parser.add_argument(
        "--max-partial-bytes", type=parse_size, default=None, metavar="BYTES",
        help="bytes all connections may hold in unfinished frames; one that needs more stops "
        "reading until there is room (64M; 0: no cap)",
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
    if args.max_partial_bytes is not None and args.max_partial_bytes < 0:
        raise ConfigError(f"--max-partial-bytes must be >= 0 (0: no cap): {args.max_partial_bytes}")
    if args.tls_broker_pattern is not None and args.tls_ca is None:
        raise ConfigError("--tls-broker-pattern needs mutual TLS (--tls-ca, --tls-cert, --tls-key)")
    trust = BrokerTrust(broker_pattern=args.tls_broker_pattern)
    return NameServer(
        args.listen,
        expire_after=args.expire_after,
        tls=tls,
        allow=allow,
        max_partial_bytes=args.max_partial_bytes,
        trust=trust,
        max_registrations=args.max_registrations,
        max_per_identity=args.max_registrations_per_identity,
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
