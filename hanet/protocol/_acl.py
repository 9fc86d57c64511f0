"""Request signing of RocketMQ 4.9.8's ACL, sans-IO: what a client adds to a request and what a
server recomputes.

A signed request carries three more ext fields: ``AccessKey``, ``Signature`` and, when the
credentials have one, ``SecurityToken``. The signature is HMAC-SHA1, keyed with the account's
secret key, over the *signing content*: the values of every ext field except ``Signature``,
in the order of their keys (Java's ``TreeMap``: UTF-16 code units), each encoded as UTF-8 and
concatenated without separators, then the body; the 20-byte MAC is sent as Base64. The
custom header is already in the ext fields when the request is signed, so every header field
is covered, and so is whatever the client added of its own (``OnsChannel`` from ali-ons and
the C++ client): the server signs what it received, whatever the keys.

A server leaves out ``_UNIQUE_KEY_QUERY`` too, as RocketMQ's ``PlainAccessValidator`` does.
"""

from __future__ import annotations

import base64
import hmac
from collections.abc import Iterable, Mapping

import attrs

from ._remoting import RemotingCommand

__all__ = [
    "ACCESS_KEY",
    "SECURITY_TOKEN",
    "SIGNATURE",
    "UNIQUE_MSG_QUERY_FLAG",
    "Credentials",
    "request_signature",
    "sign_request",
    "signature",
    "signing_content",
]

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"
"""An ext field RocketMQ's server leaves out of the signing content (``MixAll``)."""


@attrs.frozen(repr=False)
class Credentials:
    """An account's keys, as RocketMQ's ``SessionCredentials``: what a client signs with.

    Attributes:
        access_key: names the account (sent in the clear as ``AccessKey``).
        secret_key: keys the signature (never sent).
        security_token: sent as ``SecurityToken`` when set (and signed with the rest).
    """

    access_key: str = attrs.field()
    secret_key: str = attrs.field()
    security_token: str | None = None

    @access_key.validator
    def _check_access_key(self, _attribute: object, value: str) -> None:
        if not value:
            raise ValueError("the access key is empty")

    @secret_key.validator
    def _check_secret_key(self, _attribute: object, value: str) -> None:
        if not value:
            raise ValueError("the secret key is empty")

    def __repr__(self) -> str:  # the secret stays out of logs and tracebacks
        return f"Credentials(access_key={self.access_key!r}, secret_key=<hidden>)"


def _java_order(key: str) -> bytes:
    # Java's String.compareTo compares UTF-16 code units; big-endian UTF-16 bytes sort alike.
    return key.encode("utf-16-be", "surrogatepass")


def _sorted_values(fields: Mapping[str, str], skipped: frozenset[str]) -> bytes:
    keys = list(fields)
    if "".join(keys).isascii():
        keys.sort()  # code points and UTF-16 code units agree on ASCII
    else:
        keys.sort(key=_java_order)
    return "".join([fields[key] for key in keys if key not in skipped]).encode(
        "utf-8", "surrogatepass"
    )


_SIGNATURE_ONLY = frozenset({SIGNATURE})


def signing_content(
    fields: Mapping[str, str] | None,
    body: bytes | bytearray | memoryview | None,
    *,
    exclude: Iterable[str] = (SIGNATURE,),
) -> bytes:
    """The bytes a signature covers: the values of ``fields`` but ``exclude``, in the order of
    their keys, as UTF-8, then ``body``."""
    skipped = exclude if isinstance(exclude, frozenset) else frozenset(exclude)
    content = _sorted_values(fields or {}, skipped)
    if body:
        content += bytes(body)
    return content


def signature(content: bytes | bytearray | memoryview, secret_key: str) -> str:
    """Base64 of HMAC-SHA1 of ``content`` keyed with ``secret_key`` (UTF-8)."""
    mac = hmac.digest(secret_key.encode("utf-8"), content, "sha1")
    return base64.b64encode(mac).decode("ascii")


def request_signature(
    fields: Mapping[str, str] | None,
    body: bytes | bytearray | memoryview | None,
    secret_key: str,
    *,
    exclude: frozenset[str] = _SIGNATURE_ONLY,
) -> str:
    """The signature of ``fields`` but ``exclude`` and ``body`` (what a server recomputes)."""
    return signature(signing_content(fields, body, exclude=exclude), secret_key)


def sign_request(request: RemotingCommand, credentials: Credentials) -> RemotingCommand:
    """``request`` with ``AccessKey`` (and ``SecurityToken``) added and signed, as RocketMQ's
    ``AclClientRPCHook`` does it; a ``Signature`` already there is replaced."""
    fields = dict(request.fields)
    fields[ACCESS_KEY] = credentials.access_key
    if credentials.security_token is not None:
        fields[SECURITY_TOKEN] = credentials.security_token
    fields.pop(SIGNATURE, None)
    fields[SIGNATURE] = request_signature(fields, request.body, credentials.secret_key)
    return attrs.evolve(request, ext_fields=fields)
