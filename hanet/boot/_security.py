"""Who may connect: TLS (mutual TLS with a CA) and an address allow-list, applied at accept.

:class:`TlsConfig` holds the three files an operator names (``--tls-cert``, ``--tls-key``,
``--tls-ca``) and builds the ``ssl.SSLContext`` of either side. On a server, a CA means mutual
TLS: a client without a certificate signed by it is refused during the handshake, before any
application byte is exchanged. :class:`AllowList` keeps the addresses a server accepts
(``--ha-allow 10.0.0.0/8,::1``); others are closed at accept, logged once per address per
minute. :func:`secure_stream` does both for one accepted stream; :func:`peer_identity` names
the certificate a peer presented.
"""

from __future__ import annotations

import ipaddress
import logging
import ssl
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import attrs
import trio

from hanet.channel import format_address
from hanet.errors import ConfigError, HanetError

__all__ = [
    "HANDSHAKE_TIMEOUT",
    "AllowList",
    "TlsConfig",
    "TlsHandshakeError",
    "certificate_names",
    "open_tls_stream",
    "peer_address",
    "peer_identity",
    "secure_stream",
]

log = logging.getLogger("hanet.security")

HANDSHAKE_TIMEOUT = 10.0
"""Seconds a TLS handshake may take before the connection is dropped."""
_LOG_EVERY = 60.0


class TlsHandshakeError(HanetError, ConnectionError):
    """The TLS handshake failed (no certificate, an untrusted or expired one, not TLS...)."""


@attrs.frozen
class TlsConfig:
    """TLS settings of one side of a connection.

    Attributes:
        cert, key: this side's certificate chain and private key (PEM). A server needs them; a
            client presents them when the server asks (mutual TLS).
        ca: the CA certificates (PEM) to trust. On a client: the server's certificate must be
            signed by it. On a server: every client must present a certificate signed by it.
    """

    cert: Path | None = None
    key: Path | None = None
    ca: Path | None = None

    def __attrs_post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise ConfigError("--tls-cert and --tls-key go together")
        for path in (self.cert, self.key, self.ca):
            if path is not None and not path.is_file():
                raise ConfigError(f"TLS file not found: {path}")

    def server_context(self) -> ssl.SSLContext:
        """The context of a server: its certificate, and with a CA, client certificates
        required (mutual TLS). TLS 1.2 at least.

        Raises:
            ConfigError: no certificate, or a file that does not load.
        """
        if self.cert is None or self.key is None:
            raise ConfigError("a TLS server needs --tls-cert and --tls-key")
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._load(context)
        if self.ca is not None:
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    def client_context(self) -> ssl.SSLContext:
        """The context of a client: the server's certificate checked against the CA (the
        system's CAs without one), this side's certificate presented when configured."""
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._load(context)
        return context

    def _load(self, context: ssl.SSLContext) -> None:
        try:
            if self.cert is not None and self.key is not None:
                context.load_cert_chain(self.cert, self.key)
            if self.ca is not None:
                context.load_verify_locations(cafile=self.ca)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"cannot load the TLS files: {exc}") from exc


@attrs.define(eq=False)
class AllowList:
    """The networks a server accepts connections from (empty: everyone).

    Refusals are logged at WARNING once per address per minute, so a scanner hammering the
    port cannot flood the log.
    """

    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    _logged: dict[str, float] = attrs.field(factory=dict)

    @classmethod
    def parse(cls, text: str | Iterable[str]) -> AllowList:
        """``"10.0.0.0/8,127.0.0.1"`` (a bare address is a /32 or /128).

        Raises:
            ConfigError: a part that is not a network.
        """
        parts = text.split(",") if isinstance(text, str) else list(text)
        networks = []
        for part in (p.strip() for p in parts):
            if not part:
                continue
            try:
                networks.append(ipaddress.ip_network(part, strict=False))
            except ValueError as exc:
                raise ConfigError(f"not a network: {part!r} ({exc})") from None
        return cls(tuple(networks))

    def __bool__(self) -> bool:
        return bool(self.networks)

    def allows(self, host: str) -> bool:
        """Whether ``host`` (an IP address as text) may connect."""
        if not self.networks:
            return True
        try:
            address = ipaddress.ip_address(host.split("%", maxsplit=1)[0])
        except ValueError:
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address in network for network in self.networks)

    def should_log(self, host: str, now: float) -> bool:
        """True at most once per address per minute."""
        last = self._logged.get(host)
        if last is not None and now - last < _LOG_EVERY:
            return False
        if len(self._logged) > 10_000:  # bounded: forget the oldest half
            for key in sorted(self._logged, key=self._logged.__getitem__)[:5_000]:
                del self._logged[key]
        self._logged[host] = now
        return True


def peer_address(stream: object) -> Any:
    """The remote address of a (TLS over) TCP stream, or None."""
    current: object = stream
    while current is not None:
        sock = getattr(current, "socket", None)
        if sock is not None:
            try:
                return sock.getpeername()
            except OSError:
                return None
        current = getattr(current, "transport_stream", None)
    return None


def peer_identity(stream: object) -> str | None:
    """The identity in the certificate a TLS peer presented: its subject common name, else its
    first subject alternative name; None for a plain stream or a peer without a certificate."""
    names = certificate_names(stream)
    return names[0] if names else None


def certificate_names(stream: object) -> list[str]:
    """Every name in a TLS peer's certificate: subject CN and subject alternative names."""
    getpeercert: Callable[[], Any] | None = getattr(stream, "getpeercert", None)
    if getpeercert is None:
        return []
    try:
        cert = getpeercert() or {}
    except (ValueError, trio.NeedHandshakeError):
        return []
    names = [str(v) for rdn in cert.get("subject", ()) for k, v in rdn if k == "commonName"]
    names += [str(value) for _kind, value in cert.get("subjectAltName", ())]
    return names


async def secure_stream(
    stream: trio.abc.Stream,
    *,
    tls: ssl.SSLContext | None,
    allow: AllowList | None,
    what: str,
) -> trio.abc.Stream | None:
    """Apply the allow-list and the TLS handshake to an accepted stream.

    Returns the stream to run a channel on (``trio.SSLStream`` with TLS), or None when the
    peer was refused: then the stream is closed and a WARNING names the peer and the reason
    (``what`` says which port, e.g. ``"HA port"``).
    """
    address = peer_address(stream)
    host = str(address[0]) if isinstance(address, tuple) else ""
    shown = format_address(address) if address is not None else "a peer"
    if allow and not allow.allows(host):
        if allow.should_log(host, trio.current_time()):
            log.warning("%s: refused %s: not in the allow-list", what, shown)
        await trio.aclose_forcefully(stream)
        return None
    if tls is None:
        return stream
    secured = trio.SSLStream(stream, tls, server_side=True)
    try:
        with trio.fail_after(HANDSHAKE_TIMEOUT):
            await secured.do_handshake()
    except (trio.BrokenResourceError, trio.TooSlowError, trio.ClosedResourceError) as exc:
        log.warning("%s: refused %s: TLS handshake failed: %s", what, shown, handshake_reason(exc))
        await trio.aclose_forcefully(secured)
        return None
    except BaseException:  # cancelled from outside (or a bug): the socket is closed too
        await trio.aclose_forcefully(secured)
        raise
    return secured


def handshake_reason(exc: BaseException) -> str:
    """A one-line reason for a failed handshake (the SSL error's reason when there is one)."""
    if isinstance(exc, trio.TooSlowError):
        return f"no handshake within {HANDSHAKE_TIMEOUT:g} s"
    cause = exc.__cause__ or exc.__context__
    if isinstance(cause, ssl.SSLError):
        return cause.reason or cause.strerror or str(cause)
    if cause is not None:
        return str(cause) or type(cause).__name__
    return str(exc) or "the connection closed"


async def open_tls_stream(
    host: str,
    port: int,
    context: ssl.SSLContext,
    server_hostname: str | None = None,
    *,
    local_address: str | None = None,
) -> trio.SSLStream[trio.SocketStream]:
    """Connect over TCP (from ``local_address`` when given) and complete a TLS handshake.

    Raises:
        OSError: the TCP connection failed.
        TlsHandshakeError: the handshake failed (the reason in one line).
    """
    stream = await trio.open_tcp_stream(host, port, local_address=local_address)
    secured = trio.SSLStream(stream, context, server_hostname=server_hostname or host)
    try:
        with trio.fail_after(HANDSHAKE_TIMEOUT):
            await secured.do_handshake()
    except (trio.BrokenResourceError, trio.TooSlowError) as exc:
        await trio.aclose_forcefully(secured)
        raise TlsHandshakeError(
            f"TLS handshake with {host}:{port} failed: {handshake_reason(exc)}"
        ) from exc
    except BaseException:  # cancelled from outside (an outer timeout): the socket is closed too
        await trio.aclose_forcefully(secured)
        raise
    return secured
