"""``--repair-from`` says why a replica gave nothing back: a lost tail no replica returned is
named in the log (issue #21's soak found one skipped in silence)."""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from hanet.boot import serve_on
from hanet.broker import repair_store
from hanet.channel import HandlerContext, StreamChannel
from hanet.protocol import HanetRequestCode, RemotingCommand, RemotingDispatcher, remoting_pipeline
from hanet.store import CommitLogStore, Message, StoreConfig
from hanet.testing import free_ports

CONFIG = StoreConfig(mapped_file_size=4096)


async def test_a_replica_that_gave_nothing_is_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with CommitLogStore.open(tmp_path, CONFIG) as store:
        store.put(Message("T", b"x"))
    (port,) = free_ports(1)  # nothing listens there
    with caplog.at_level(logging.WARNING, "hanet.broker.repair"):
        assert await repair_store(CONFIG, tmp_path, f"127.0.0.1:{port}") == []
    (line,) = [r.getMessage() for r in caplog.records if r.name == "hanet.broker.repair"]
    assert line.startswith(f"--repair-from: nothing taken from 127.0.0.1:{port}: ")
    assert "connect" in line


async def test_a_replica_claiming_a_blank_past_its_file_gives_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A replica's blankSize is checked against the file it ends before any byte is made."""

    def read_log(ctx: HandlerContext, request: RemotingCommand) -> RemotingCommand:
        fields = {"maxOffset": "8192", "minOffset": "0", "stopReason": "blank"}
        return request.response(fields={**fields, "stopOffset": "0", "blankSize": str(1 << 40)})

    def initialize(channel: StreamChannel) -> None:
        for name, handler in remoting_pipeline():
            channel.pipeline.add_last(handler, name)
        processors: dict[int, Any] = {HanetRequestCode.HANET_READ_LOG: read_log}
        channel.pipeline.add_last(RemotingDispatcher(processors, port="fake replica"))

    CommitLogStore.open(tmp_path, CONFIG).close()
    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        await nursery.start(partial(serve_on, initialize, listeners))
        with caplog.at_level(logging.WARNING, "hanet.broker.repair"):
            assert await repair_store(CONFIG, tmp_path, f"127.0.0.1:{port}") == []
        nursery.cancel_scope.cancel()
    (line,) = [r.getMessage() for r in caplog.records if r.name == "hanet.broker.repair"]
    assert "a bad blank record at 0" in line
