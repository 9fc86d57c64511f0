"""``free_ports``: distinct ports, free to bind once returned."""

from __future__ import annotations

import socket

from hanet.testing import free_ports


def test_free_ports_are_distinct_and_bindable() -> None:
    for _ in range(20):  # released one by one, the same port could come back twice
        ports = free_ports(8)
        assert len(ports) == 8 and len(set(ports)) == 8
    for port in free_ports(3):
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))
    assert free_ports(0) == []
