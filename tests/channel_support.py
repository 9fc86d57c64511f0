"""What the channel tests over real TCP share."""

from __future__ import annotations

import functools
from typing import Any

import trio

from hanet import StreamChannel, run_channel
from hanet.channel import ChannelConfig


async def tcp_pair() -> tuple[trio.SocketStream, trio.SocketStream]:
    """A connected loopback pair: (client, server)."""
    (listener,) = await trio.open_tcp_listeners(0, host="127.0.0.1")
    async with listener:
        port = listener.socket.getsockname()[1]
        client = await trio.open_tcp_stream("127.0.0.1", port)
        server = await listener.accept()
    assert isinstance(server, trio.SocketStream)
    return client, server


async def start(
    nursery: trio.Nursery,
    stream: trio.abc.Stream,
    handler: Any,
    config: ChannelConfig | None = None,
) -> StreamChannel:
    """A channel running ``stream`` in ``nursery`` with ``handler`` as its pipeline."""

    def init(channel: StreamChannel) -> None:
        channel.pipeline.add_last(handler)

    channel: StreamChannel = await nursery.start(
        functools.partial(run_channel, stream, init, config=config)
    )
    return channel
