"""Socket addresses as people write them: ``host:port``, ``[v6]:port``.

One place formats and parses them, for logs, status documents, flags and ``broker.conf``.
"""

from __future__ import annotations

from hanet.errors import ConfigError

__all__ = ["format_address", "parse_address"]


def format_address(addr: object) -> str:
    """``"127.0.0.1:10911"``, or ``"[::1]:10911"`` for IPv6, from a socket address tuple.

    Anything that is not a ``(host, port, ...)`` tuple is returned as ``str(addr)``.
    """
    if isinstance(addr, tuple) and len(addr) >= 2:
        host = addr[0]
        return f"[{host}]:{addr[1]}" if ":" in str(host) else f"{host}:{addr[1]}"
    return str(addr)


def parse_address(text: str, default_host: str = "127.0.0.1") -> tuple[str, int]:
    """Split ``HOST:PORT`` (also ``[v6]:PORT``, and ``:PORT`` for ``default_host``).

    Raises:
        ConfigError: no port, a port that is not a number, or one outside 0..65535.
    """
    host, sep, port_text = text.strip().rpartition(":")
    if not sep:
        raise ConfigError(f"expected HOST:PORT, got {text!r}")
    host = host.strip("[]") or default_host
    try:
        port = int(port_text)
    except ValueError:
        raise ConfigError(f"bad port in {text!r}") from None
    if not 0 <= port <= 65535:
        raise ConfigError(f"port out of range in {text!r}")
    return host, port
