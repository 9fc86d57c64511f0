"""Pipeline structure, event direction and mutation (docs/netty.md §5.1-5.3, §5.8), embedded."""

from __future__ import annotations

import logging
from typing import Any

import attrs
import pytest

from hanet import (
    ChannelDuplexHandler,
    ChannelHandler,
    ChannelInboundHandler,
    ChannelOutboundHandler,
    ChannelPipelineError,
    HandlerContext,
    WriteFuture,
)
from hanet.testing import EmbeddedChannel


class Named(ChannelDuplexHandler):
    """A pass-through handler that logs the events it sees into a shared list."""

    sharable = True

    def __init__(self, tag: str, log: list[str]) -> None:
        self.tag = tag
        self.log = log

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        self.log.append(f"{self.tag}:read:{msg}")
        ctx.fire_channel_read(msg)

    def write(self, ctx: HandlerContext, msg: Any, future: WriteFuture) -> None:
        self.log.append(f"{self.tag}:write:{msg!r}")
        ctx.write(msg, future)


class Plain(ChannelInboundHandler):
    """Non-sharable, handles nothing itself."""


class Shared(ChannelInboundHandler):
    sharable = True


class Lifecycle(ChannelInboundHandler):
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def handler_added(self, ctx: HandlerContext) -> None:
        self.log.append(f"added:{ctx.name}")

    def handler_removed(self, ctx: HandlerContext) -> None:
        self.log.append(f"removed:{ctx.name}")


# -- structure -------------------------------------------------------------------------------


def test_empty_pipeline() -> None:
    ch = EmbeddedChannel()
    assert ch.pipeline.names() == []
    assert ch.pipeline.first() is None
    assert ch.pipeline.last() is None
    assert ch.pipeline.get("anything") is None
    assert ch.pipeline.context("anything") is None
    assert list(ch.pipeline) == []


def test_context_order() -> None:
    """testChannelHandlerContextOrder."""
    p = EmbeddedChannel().pipeline
    h = [Shared() for _ in range(12)]
    p.add_first(h[1], "1")
    p.add_last(h[10], "10")
    p.add_before("10", h[5], "5")
    p.add_after("1", h[3], "3")
    p.add_before("5", h[4], "4")
    p.add_after("5", h[6], "6")
    p.add_before("1", h[0], "0")
    p.add_after("10", h[11], "11")
    assert p.names() == ["0", "1", "3", "4", "5", "6", "10", "11"]
    assert p.first() is h[0]
    assert p.last() is h[11]
    assert [c.name for c in p] == p.names()
    assert p.handlers() == [h[0], h[1], h[3], h[4], h[5], h[6], h[10], h[11]]


def test_duplicate_name_is_value_error() -> None:
    p = EmbeddedChannel().pipeline
    p.add_last(Plain(), "a")
    with pytest.raises(ValueError, match="Duplicate handler name: a"):
        p.add_last(Plain(), "a")
    with pytest.raises(ValueError, match="Duplicate handler name: a"):
        p.add_first(Plain(), "a")
    assert p.names() == ["a"]


def test_duplicate_name_does_not_consume_the_handler() -> None:
    """A handler refused for its name was never added: it can be added under another name."""
    p = EmbeddedChannel().pipeline
    p.add_last(Plain(), "a")
    h = Plain()
    with pytest.raises(ValueError):
        p.add_last(h, "a")
    p.add_last(h, "b")
    assert p.get("b") is h


def test_generated_names() -> None:
    p = EmbeddedChannel().pipeline
    p.add_last(Shared())
    p.add_last(Shared())
    p.add_last(Plain())
    assert p.names() == ["Shared#0", "Shared#1", "Plain#0"]
    p.remove("Shared#0")
    p.add_last(Shared())
    assert p.names() == ["Shared#1", "Plain#0", "Shared#0"]


def test_lookup_by_name_instance_and_type() -> None:
    p = EmbeddedChannel().pipeline
    a, b = Plain(), Shared()
    p.add_last(a, "a").add_last(b, "b")
    ctx = p.context("a")
    assert ctx is not None and ctx.handler is a and ctx.name == "a"
    assert p.context(b) is p.context("b")
    assert p.context(Shared) is p.context("b")
    assert p.context(ChannelInboundHandler) is p.context("a")  # first match
    assert ctx.channel is p.channel


def test_missing_handler_is_lookup_error() -> None:
    p = EmbeddedChannel().pipeline
    p.add_last(Plain(), "a")
    with pytest.raises(LookupError):
        p.remove("handlerXXX")
    with pytest.raises(LookupError):
        p.remove(Shared())
    with pytest.raises(LookupError):
        p.remove(Shared)
    with pytest.raises(LookupError):
        p.add_before("nope", Plain())
    with pytest.raises(LookupError):
        p.add_after("nope", Plain())
    with pytest.raises(LookupError):
        p.replace("nope", Plain())
    assert p.remove_if_exists("nope") is None
    assert p.remove_if_exists(Shared) is None
    assert p.names() == ["a"]


def test_remove_by_name_instance_type() -> None:
    """testRemoveChannelHandler / testRemoveIfExists."""
    p = EmbeddedChannel().pipeline
    h1, h2, h3 = Plain(), Shared(), Lifecycle([])
    p.add_last(h1, "handler1").add_last(h2, "handler2").add_last(h3, "handler3")
    assert p.remove("handler1") is h1
    assert p.get("handler1") is None
    assert p.remove(h2) is h2
    assert p.get("handler2") is None
    assert p.remove_if_exists(Lifecycle) is h3
    assert p.names() == []


def test_non_sharable_handler_cannot_be_added_twice() -> None:
    p = EmbeddedChannel().pipeline
    h = Plain()
    p.add_last(h, "a")
    with pytest.raises(ChannelPipelineError, match="not a sharable handler"):
        p.add_last(h, "b")
    # ... not even after it was removed, nor in another pipeline.
    p.remove(h)
    with pytest.raises(ChannelPipelineError):
        p.add_last(h)
    with pytest.raises(ChannelPipelineError):
        EmbeddedChannel(h)
    assert isinstance(ChannelPipelineError("x"), ValueError)


def test_sharable_handler_can_sit_twice() -> None:
    p = EmbeddedChannel().pipeline
    h = Shared()
    p.add_last(h).add_last(h)
    EmbeddedChannel(h)
    assert p.names() == ["Shared#0", "Shared#1"]


def test_unhashable_handler() -> None:
    """attrs' default ``define`` makes instances unhashable; they still go into pipelines."""

    @attrs.define
    class Config(ChannelInboundHandler):
        limit: int = 3

    h = Config()
    ch = EmbeddedChannel(h)
    assert ch.pipeline.first() is h
    with pytest.raises(ChannelPipelineError):
        ch.pipeline.add_last(h)


def test_add_non_handler_is_type_error() -> None:
    p = EmbeddedChannel().pipeline
    with pytest.raises(TypeError):
        p.add_last(object())  # type: ignore[arg-type]


# -- replace ---------------------------------------------------------------------------------


def test_replace_same_and_new_names() -> None:
    """testReplaceChannelHandler / testRenameChannelHandler."""
    p = EmbeddedChannel().pipeline
    h = Shared()
    p.add_last(h, "handler1").add_last(h, "handler2").add_last(h, "handler3")
    new1, new2, new3 = Shared(), Shared(), Shared()
    assert p.replace("handler1", new1, "handler1") is h
    assert p.replace("handler2", new2, "handler2-new") is h
    assert p.replace(h, new3, "handler3-new") is h
    assert p.names() == ["handler1", "handler2-new", "handler3-new"]
    assert p.handlers() == [new1, new2, new3]
    assert p.get("handler2") is None


def test_replace_checks_duplicate_names() -> None:
    p = EmbeddedChannel().pipeline
    p.add_last(Shared(), "handler1").add_last(Shared(), "handler2")
    h = Shared()
    with pytest.raises(ValueError, match="Duplicate handler name: handler2"):
        p.replace("handler1", h, "handler2")
    assert p.names() == ["handler1", "handler2"]
    p.replace("handler1", h, "handler3")  # h was not consumed by the failed replace


def test_replace_with_generated_name() -> None:
    p = EmbeddedChannel().pipeline
    p.add_last(Shared(), "handler1")
    p.replace("handler1", Plain())
    assert p.names() == ["Plain#0"]


def test_replace_calls_added_before_removed() -> None:
    log: list[str] = []
    p = EmbeddedChannel().pipeline
    p.add_last(Lifecycle(log), "old")
    p.replace("old", Lifecycle(log), "new")
    assert log == ["added:old", "added:new", "removed:old"]


class BufferingInbound(ChannelInboundHandler):
    """Holds reads back until removed, then forwards them (testReplaceAndForwardInbound)."""

    def __init__(self) -> None:
        self.held: list[Any] = []

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        self.held.append(msg)

    def handler_removed(self, ctx: HandlerContext) -> None:
        for msg in self.held:
            ctx.fire_channel_read(msg)


class BufferingOutbound(ChannelOutboundHandler):
    def __init__(self) -> None:
        self.held: list[tuple[Any, WriteFuture]] = []

    def write(self, ctx: HandlerContext, msg: Any, future: WriteFuture) -> None:
        self.held.append((msg, future))

    def handler_removed(self, ctx: HandlerContext) -> None:
        for msg, future in self.held:
            ctx.write(msg, future)
        ctx.flush()


class Upper(ChannelDuplexHandler):
    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        ctx.fire_channel_read(msg.upper())

    def write(self, ctx: HandlerContext, msg: Any, future: WriteFuture) -> None:
        ctx.write(msg.upper(), future)


def test_replace_forwards_inbound_to_the_new_handler() -> None:
    ch = EmbeddedChannel(BufferingInbound())
    assert not ch.write_inbound(b"abc", b"def")
    ch.pipeline.replace(BufferingInbound, Upper())
    assert ch.read_inbound() == b"ABC"
    assert ch.read_inbound() == b"DEF"
    assert ch.read_inbound() is None


def test_replace_forwards_outbound_to_the_new_handler() -> None:
    ch = EmbeddedChannel(BufferingOutbound())
    ch.pipeline.add_first(Shared(), "first")
    future = ch.write_one_outbound(b"abc")
    ch.flush_outbound()
    assert ch.read_outbound() is None and not future.done()
    ch.pipeline.replace(BufferingOutbound, Upper())
    # The old handler's context now points at the new one both ways; Netty forwards a
    # removed outbound handler's writes from its old position, which is the new handler.
    assert ch.read_outbound() == b"ABC"
    assert future.succeeded()


def test_remove_and_forward_inbound() -> None:
    """testRemoveAndForwardInbound: data held by a removed handler reaches its neighbour."""
    log: list[str] = []
    ch = EmbeddedChannel(BufferingInbound(), Named("after", log))
    ch.write_inbound(b"x")
    assert log == []
    ch.pipeline.remove(BufferingInbound)
    assert log == ["after:read:b'x'"]
    assert ch.read_inbound() == b"x"


def test_remove_and_forward_outbound() -> None:
    log: list[str] = []
    ch = EmbeddedChannel(Named("before", log), BufferingOutbound())
    ch.write_outbound(b"x")
    assert ch.read_outbound() is None
    ch.pipeline.remove(BufferingOutbound)
    assert log == ["before:write:b'x'"]
    assert ch.read_outbound() == b"x"


# -- handler_added / handler_removed -----------------------------------------------------------


def test_added_and_removed_callbacks() -> None:
    log: list[str] = []
    ch = EmbeddedChannel()
    ch.pipeline.add_last(Lifecycle(log), "a")
    ch.pipeline.add_last(Lifecycle(log), "b")
    ch.pipeline.remove("a")
    assert log == ["added:a", "added:b", "removed:a"]
    ch.close()
    assert log == ["added:a", "added:b", "removed:a", "removed:b"]
    assert ch.pipeline.names() == []


def test_destroy_removes_tail_to_head() -> None:
    log: list[str] = []
    ch = EmbeddedChannel(*(Lifecycle(log) for _ in range(3)))
    log.clear()
    ch.finish()
    assert log == ["removed:Lifecycle#2", "removed:Lifecycle#1", "removed:Lifecycle#0"]


class AddedRaises(ChannelInboundHandler):
    def __init__(self) -> None:
        self.removed = False

    def handler_added(self, ctx: HandlerContext) -> None:
        raise RuntimeError("boom in handler_added")

    def handler_removed(self, ctx: HandlerContext) -> None:
        self.removed = True


class Catcher(ChannelInboundHandler):
    def __init__(self) -> None:
        self.caught: list[BaseException] = []

    def exception_caught(self, ctx: HandlerContext, exc: BaseException) -> None:
        self.caught.append(exc)


def test_handler_added_raising_removes_and_fires_exception() -> None:
    catcher = Catcher()
    ch = EmbeddedChannel(catcher)
    bad = AddedRaises()
    ch.pipeline.add_first(bad, "bad")
    assert ch.pipeline.names() == ["Catcher#0"]
    assert bad.removed
    [err] = catcher.caught
    assert isinstance(err, ChannelPipelineError)
    assert "AddedRaises.handler_added() has thrown an exception; removed." in str(err)
    assert isinstance(err.__cause__, RuntimeError)


def test_handler_added_raising_reaches_the_embedded_caller() -> None:
    ch = EmbeddedChannel()
    ch.pipeline.add_last(AddedRaises())
    with pytest.raises(ChannelPipelineError, match="removed"):
        ch.check_exception()
    assert ch.pipeline.names() == []
    assert ch.is_active


class RemovedRaises(ChannelInboundHandler):
    def handler_removed(self, ctx: HandlerContext) -> None:
        raise RuntimeError("boom in handler_removed")


def test_handler_removed_raising_fires_exception() -> None:
    catcher = Catcher()
    ch = EmbeddedChannel(RemovedRaises(), catcher)
    ch.pipeline.remove(RemovedRaises)
    [err] = catcher.caught
    assert "RemovedRaises.handler_removed() has thrown an exception." in str(err)
    assert ch.pipeline.names() == ["Catcher#0"]


# -- direction and skipping ---------------------------------------------------------------------


def test_inbound_head_to_tail_outbound_tail_to_head() -> None:
    log: list[str] = []
    ch = EmbeddedChannel(Named("a", log), Named("b", log), Named("c", log))
    ch.write_inbound(1)
    ch.write_outbound(b"x")
    assert log == [
        "a:read:1",
        "b:read:1",
        "c:read:1",
        "c:write:b'x'",
        "b:write:b'x'",
        "a:write:b'x'",
    ]


def test_ctx_write_starts_before_the_context() -> None:
    log: list[str] = []

    class Answer(ChannelInboundHandler):
        def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
            ctx.write_and_flush(b"answer")

    ch = EmbeddedChannel(Named("a", log), Answer(), Named("c", log))
    ch.write_inbound(b"q")
    assert log == ["a:read:b'q'", "a:write:b'answer'"]
    assert ch.read_outbound() == b"answer"
    assert ch.read_inbound() is None


def test_pipeline_write_runs_every_outbound_handler() -> None:
    log: list[str] = []
    ch = EmbeddedChannel(Named("a", log), Named("b", log))
    future = ch.pipeline.write_and_flush(b"m")
    assert future.succeeded()
    assert log == ["b:write:b'm'", "a:write:b'm'"]


def test_contexts_skip_handlers_that_do_not_override() -> None:
    seen: list[str] = []

    class OnlyActive(ChannelInboundHandler):
        def channel_active(self, ctx: HandlerContext) -> None:
            seen.append("active")
            ctx.fire_channel_active()

    ch = EmbeddedChannel(OnlyActive(), Plain())
    assert seen == ["active"]
    ch.write_inbound(b"x")
    assert ch.read_inbound() == b"x"


def test_user_events_and_writability_reach_handlers() -> None:
    seen: list[object] = []

    class Watch(ChannelInboundHandler):
        def user_event_triggered(self, ctx: HandlerContext, event: object) -> None:
            seen.append(event)
            ctx.fire_user_event_triggered(event)

        def channel_writability_changed(self, ctx: HandlerContext) -> None:
            seen.append(ctx.channel.is_writable)

    ch = EmbeddedChannel(Watch())
    ch.pipeline.fire_user_event_triggered("evt")
    ch.pipeline.fire_channel_writability_changed()
    assert seen == ["evt", True]
    assert ch.read_inbound() is None  # user events are not queued at the tail


def test_outbound_read_and_close_pass_through_handlers() -> None:
    ops: list[str] = []

    class Ops(ChannelOutboundHandler):
        def read(self, ctx: HandlerContext) -> None:
            ops.append("read")
            ctx.read()

        def close(self, ctx: HandlerContext) -> None:
            ops.append("close")
            ctx.close()

    ch = EmbeddedChannel(Ops())
    ch.pipeline.read()
    assert ch.read_requests == 1
    ch.close("bye")
    assert ops == ["read", "close"]
    assert not ch.is_open
    assert ch.close_reason == "bye"


def test_close_can_be_intercepted() -> None:
    class Keep(ChannelOutboundHandler):
        def close(self, ctx: HandlerContext) -> None:
            pass

    ch = EmbeddedChannel(Keep())
    ch.close()
    assert ch.is_open and ch.is_active


# -- mutation while events flow -------------------------------------------------------------


class RemoveSelfAfterFirst(ChannelInboundHandler):
    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        ctx.pipeline.remove(self)
        ctx.fire_channel_read(b"first:" + msg)


def test_remove_self_while_reading() -> None:
    ch = EmbeddedChannel(RemoveSelfAfterFirst())
    ch.write_inbound(b"a", b"b", b"c")
    assert list(ch.inbound_messages) == [b"first:a", b"b", b"c"]


class ReplaceSelf(ChannelInboundHandler):
    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        ctx.pipeline.replace(self, Upper())
        ctx.fire_channel_read(msg)  # continues from the old position: the new handler


def test_replace_self_while_reading() -> None:
    ch = EmbeddedChannel(ReplaceSelf())
    ch.write_inbound(b"a", b"b")
    assert list(ch.inbound_messages) == [b"A", b"B"]
    assert ch.pipeline.names() == ["Upper#0"]


class InsertAfterSelf(ChannelInboundHandler):
    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        if ctx.pipeline.get("upper") is None:
            ctx.pipeline.add_after(ctx.name, Upper(), "upper")
        ctx.fire_channel_read(msg)


def test_add_while_reading_sees_the_event_in_flight() -> None:
    ch = EmbeddedChannel(InsertAfterSelf())
    ch.write_inbound(b"a", b"b")
    assert list(ch.inbound_messages) == [b"A", b"B"]


class RemoveNext(ChannelInboundHandler):
    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        ctx.pipeline.remove_if_exists(Upper)
        ctx.fire_channel_read(msg)


def test_remove_next_handler_while_reading() -> None:
    ch = EmbeddedChannel(RemoveNext(), Upper())
    ch.write_inbound(b"a")
    assert ch.read_inbound() == b"a"


def test_pipeline_repr_lists_names() -> None:
    ch = EmbeddedChannel(Shared())
    assert "Shared#0" in repr(ch.pipeline)
    assert "Shared" in repr(ch.pipeline.context("Shared#0"))


def test_handler_base_defaults_are_callable() -> None:
    h = ChannelHandler()
    ch = EmbeddedChannel(h)
    assert ch.pipeline.names() == ["ChannelHandler#0"]
    ch.write_inbound(b"x")
    assert ch.read_inbound() == b"x"


def test_no_logging_for_normal_flow(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="hanet")
    ch = EmbeddedChannel(Upper())
    ch.write_inbound(b"a")
    ch.write_outbound(b"b")
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
