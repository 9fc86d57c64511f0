"""SimpleChannelInboundHandler: typed by its type argument, non-matching messages passed on."""

from __future__ import annotations

from typing import Any

import pytest

from hanet.channel import ChannelInboundHandler, HandlerContext
from hanet.handlers import SimpleChannelInboundHandler
from hanet.testing import EmbeddedChannel


class Strings(SimpleChannelInboundHandler[str]):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def channel_read0(self, ctx: HandlerContext, msg: str) -> None:
        self.seen.append(msg)


def test_handles_its_type_and_passes_on_the_rest() -> None:
    handler = Strings()
    ch = EmbeddedChannel(handler)
    ch.write_inbound("a", b"b", 3, "d")
    assert handler.seen == ["a", "d"]
    assert [ch.read_inbound(), ch.read_inbound(), ch.read_inbound()] == [b"b", 3, None]


def test_union_and_explicit_types() -> None:
    class Numbers(SimpleChannelInboundHandler[int | float]):
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[int | float] = []

        def channel_read0(self, ctx: HandlerContext, msg: int | float) -> None:
            self.seen.append(msg)

    numbers = Numbers()
    ch = EmbeddedChannel(numbers)
    ch.write_inbound(1, 2.5, "x")
    assert numbers.seen == [1, 2.5]
    assert ch.read_inbound() == "x"

    class Anything(SimpleChannelInboundHandler[Any]):
        def channel_read0(self, ctx: HandlerContext, msg: Any) -> None:
            pass

    assert Anything().accept_inbound_message(object())
    assert not Anything(inbound_type=bytes).accept_inbound_message("s")


def test_error_in_channel_read0_goes_to_exception_caught() -> None:
    caught: list[BaseException] = []

    class Failing(SimpleChannelInboundHandler[str]):
        def channel_read0(self, ctx: HandlerContext, msg: str) -> None:
            raise ValueError(msg)

    class Catch(ChannelInboundHandler):
        def exception_caught(self, ctx: HandlerContext, exc: BaseException) -> None:
            caught.append(exc)

    ch = EmbeddedChannel(Failing(), Catch())
    ch.write_inbound("bad")
    assert [str(e) for e in caught] == ["bad"]


def test_channel_read0_must_be_implemented() -> None:
    class Lazy(SimpleChannelInboundHandler[str]):
        pass

    ch = EmbeddedChannel(Lazy())
    with pytest.raises(NotImplementedError):
        ch.write_inbound("x")
