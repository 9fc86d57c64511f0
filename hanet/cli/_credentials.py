"""``--access-key`` / ``--secret-key``: verbs that sign their requests for a broker or name
server with RocketMQ's ACL on.

The secret may come from the environment (``HANET_SECRET_KEY``) instead of the command line,
where other users of the machine can read it in the process list. :func:`signed_verb` wraps a
verb so that every remoting connection it opens (broker, name server, consumer) signs its
requests (:func:`hanet.client.signing`).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Awaitable, Callable
from functools import wraps

from hanet.client import Credentials, signing
from hanet.errors import ConfigError

from ._support import fail

__all__ = ["SECRET_KEY_ENV", "add_credentials", "credentials_of", "signed_verb"]

SECRET_KEY_ENV = "HANET_SECRET_KEY"

Verb = Callable[[argparse.Namespace], Awaitable[int]]


def add_credentials(parser: argparse.ArgumentParser, *, what: str = "requests") -> None:
    """The ``--access-key`` and ``--secret-key`` flags."""
    parser.add_argument(
        "--access-key", default=None, metavar="KEY",
        help=f"sign {what} with this account of the server's plain_acl.yml (RocketMQ's ACL)",
    )  # fmt: skip
    parser.add_argument(
        "--secret-key", default=None, metavar="SECRET",
        help=f"the account's secret key (default: ${SECRET_KEY_ENV})",
    )  # fmt: skip


def credentials_of(args: argparse.Namespace) -> Credentials | None:
    """The credentials of the flags (None: unsigned).

    Raises:
        ConfigError: a secret key without an access key, or the other way round.
    """
    access_key = getattr(args, "access_key", None)
    secret_key = getattr(args, "secret_key", None) or os.environ.get(SECRET_KEY_ENV) or None
    if access_key is None:
        if getattr(args, "secret_key", None) is not None:
            raise ConfigError("--secret-key needs --access-key")
        return None
    if not secret_key:
        raise ConfigError(f"--access-key needs --secret-key (or ${SECRET_KEY_ENV})")
    try:
        return Credentials(access_key, secret_key)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def signed_verb(verb: Verb) -> Verb:
    """``verb`` run inside ``signing(credentials_of(args))``."""

    @wraps(verb)
    async def run(args: argparse.Namespace) -> int:
        try:
            credentials = credentials_of(args)
        except ConfigError as exc:
            return fail(str(exc))
        with signing(credentials):
            return await verb(args)

    return run
