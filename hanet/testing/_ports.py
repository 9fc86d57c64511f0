"""Free loopback ports for test and benchmark processes."""

from __future__ import annotations

import contextlib
import socket

__all__ = ["free_ports"]


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct TCP ports of ``host`` that are free right now.

    Every socket stays bound until all ``count`` ports are known, so no port is returned
    twice; they are released on return, so another process may still take one before the
    caller binds it (unlikely, not impossible).
    """
    with contextlib.ExitStack() as stack:
        ports: list[int] = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket())
            sock.bind((host, 0))
            ports.append(sock.getsockname()[1])
        return ports
