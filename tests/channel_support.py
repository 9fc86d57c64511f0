"""What the channel tests over real TCP share."""

from __future__ import annotations

import trio


async def tcp_pair() -> tuple[trio.SocketStream, trio.SocketStream]:
    """A connected loopback pair: (client, server)."""
    (listener,) = await trio.open_tcp_listeners(0, host="127.0.0.1")
    async with listener:
        port = listener.socket.getsockname()[1]
        client = await trio.open_tcp_stream("127.0.0.1", port)
        server = await listener.accept()
    assert isinstance(server, trio.SocketStream)
    return client, server
