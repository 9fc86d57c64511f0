"""What the broker tests share: a small broker configuration, a broker running for a block,
and a fake name server that records what brokers register."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import trio

from hanet.boot import serve_listeners
from hanet.broker import Broker, BrokerAddresses
from hanet.channel import ChannelInboundHandler, HandlerContext, StreamChannel
from hanet.ha import BrokerConfig
from hanet.protocol import (
    MASTER_ID,
    BrokerRegistration,
    BrokerServerCodec,
    RegisterBrokerRequest,
    RegisterBrokerResponse,
    UnregisterBrokerRequest,
    UnregisterBrokerResponse,
    broker_frame_codec,
)

FILE = 64 * 1024
"""The tests' commit log file size."""


def config(root: Path, **changes: Any) -> BrokerConfig:
    """A broker on ``root`` with any free ports and small commit log files."""
    return BrokerConfig(
        store_path_root_dir=root,
        listen_port=0,
        ha_listen_port=0,
        mapped_file_size_commit_log=FILE,
        **changes,
    )


@asynccontextmanager
async def running(
    cfg: BrokerConfig, **kwargs: Any
) -> AsyncIterator[tuple[Broker, BrokerAddresses]]:
    """A broker serving for the block: it and its addresses."""
    async with trio.open_nursery() as nursery:
        broker = Broker(cfg, **kwargs)
        addresses: BrokerAddresses = await nursery.start(broker.run)
        yield broker, addresses
        nursery.cancel_scope.cancel()


def fmt(address: tuple[str, int] | None) -> str:
    """``host:port``."""
    assert address is not None
    return f"{address[0]}:{address[1]}"


async def wait_for(predicate: Callable[[], bool], seconds: float = 10) -> None:
    """Poll ``predicate`` until it holds (fails after ``seconds``)."""
    with trio.fail_after(seconds):
        while not predicate():  # noqa: ASYNC110 - polls another service's state
            await trio.sleep(0.01)


@attrs.define
class FakeNameServer:
    """Answers REGISTER_BROKER with ``master`` (broker address, HA address) for slaves, and
    records every registration and unregistration."""

    master: tuple[str, str] | None = None
    registrations: list[BrokerRegistration] = attrs.Factory(list)
    unregistered: list[tuple[str, int]] = attrs.Factory(list)

    def initialize(self, channel: StreamChannel) -> None:
        for name, handler in broker_frame_codec(1 << 20, BrokerServerCodec()):
            channel.pipeline.add_last(handler, name)
        channel.pipeline.add_last(_FakeNameServerHandler(self))


class _FakeNameServerHandler(ChannelInboundHandler):
    def __init__(self, server: FakeNameServer) -> None:
        self.server = server

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        server = self.server
        if isinstance(msg, RegisterBrokerRequest):
            server.registrations.append(msg.registration)
            master = server.master if msg.registration.broker_id != MASTER_ID else None
            answer = RegisterBrokerResponse(msg.request_id, *(master or (None, None)))
            ctx.write_and_flush(answer)
        elif isinstance(msg, UnregisterBrokerRequest):
            server.unregistered.append((msg.broker_name, msg.broker_id))
            ctx.write_and_flush(UnregisterBrokerResponse(msg.request_id))


@asynccontextmanager
async def name_server() -> AsyncIterator[tuple[FakeNameServer, str]]:
    """A :class:`FakeNameServer` on loopback for the block: it and its ``host:port``."""
    server = FakeNameServer()
    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        address = fmt(listeners[0].socket.getsockname())
        await nursery.start(partial(serve_listeners, server.initialize, listeners))
        yield server, address
        nursery.cancel_scope.cancel()
