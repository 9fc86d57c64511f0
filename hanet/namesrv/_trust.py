"""Who may register brokers with the name server, and whose a registration is.

A registration belongs to the identity of the connection it came over:

- under mutual TLS, the certificate's name (``cert:NAME``): with a broker pattern
  (``hanet namesrv --tls-broker-pattern``), the first name of the certificate (subject CN,
  then SANs) that matches it, and a certificate with no such name may not register or
  unregister at all (it may still look routes up); without one, the certificate's first name;
- on plain TCP, the connection's remote IP (``ip:HOST``): all a plain connection proves;
- in-process (no connection, or one without an address): None, checked by address only.

The registry refuses a live registration to any other identity (:mod:`._registry`).
"""

from __future__ import annotations

import re

import attrs

from hanet.boot import certificate_names
from hanet.errors import ConfigError

__all__ = ["BrokerTrust"]


def _pattern(instance: object, attribute: attrs.Attribute[str | None], value: str | None) -> None:
    if value is None:
        return
    try:
        re.compile(value)
    except re.error as exc:
        raise ConfigError(
            f"{attribute.name}: not a regular expression: {value!r} ({exc})"
        ) from None


@attrs.frozen
class BrokerTrust:
    """The name server's rule for registrations (see the module).

    Attributes:
        broker_pattern: with mutual TLS, a regular expression a certificate name must match
            (whole) for its holder to register brokers (None: any certificate of the CA).
    """

    broker_pattern: str | None = attrs.field(default=None, validator=_pattern)

    def identity(self, connection: object) -> tuple[str | None, str | None]:
        """``(identity, refusal)`` of a connection: who it registers as, and why it may not
        register (None: it may)."""
        names = certificate_names(getattr(connection, "stream", None))
        if names:
            pattern = self.broker_pattern
            if pattern is None:
                return f"cert:{names[0]}", None
            matching = [name for name in names if re.fullmatch(pattern, name)]
            if not matching:
                return (
                    f"cert:{names[0]}",
                    f"certificate {', '.join(names)} names no broker "
                    f"(--tls-broker-pattern {pattern!r})",
                )
            return f"cert:{matching[0]}", None
        address = getattr(connection, "remote_address", None)
        if isinstance(address, tuple) and address:
            return f"ip:{address[0]}", None
        return None, None
