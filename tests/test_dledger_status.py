"""A DLedger node's broker port asked for its status while the node starts or stops: the
request is answered with an error and the connection stays open (loopback TCP, one node)."""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path

import pytest
import trio
from broker_support import connect, status

from hanet.boot import serve_listeners
from hanet.broker import DLedgerBrokerService
from hanet.dledger import (
    DLedgerNode,
    NodeConfig,
    RaftConfig,
)
from hanet.protocol import HanetRequestCode, RemotingCommand, ResponseCode
from hanet.testing import MemoryNetwork


def _node(tmp_path: Path) -> DLedgerNode:
    raft = RaftConfig(election_timeout=0.3, heartbeat_interval=0.05, retransmit_timeout=0.15)
    config = NodeConfig(
        group="g", node_id="solo", peers={"solo": "x:0"}, store_dir=tmp_path, raft=raft
    )
    return DLedgerNode(config, connector=MemoryNetwork().connector_for("solo"), listen=False)


async def _status_answer(port: int) -> tuple[int, str | None, bool]:
    async with connect(("127.0.0.1", port)) as conn:
        answer = await conn.invoke(RemotingCommand.request(HanetRequestCode.HANET_STATUS))
        # the same connection still answers
        again = await conn.invoke(RemotingCommand.request(HanetRequestCode.HANET_STATUS))
        assert again.code == answer.code
        return answer.code, answer.remark, conn.is_connected


async def test_status_before_the_node_runs_and_after_it_stopped_answers_an_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A deliberate answer: SYSTEM_ERROR naming why, no traceback logged as a bug."""
    node = _node(tmp_path)
    service = DLedgerBrokerService(node)
    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        await nursery.start(partial(serve_listeners, service.initialize, listeners))

        code, remark, connected = await _status_answer(port)  # starting: not running yet
        assert code == ResponseCode.SYSTEM_ERROR
        assert remark is not None and "not running" in remark
        assert connected

        with trio.CancelScope() as scope:  # running, then stopped
            async with trio.open_nursery() as inner:
                await inner.start(node.run)
                with trio.fail_after(10):
                    while not node.is_leader:  # noqa: ASYNC110
                        await trio.sleep(0.02)
                async with connect(("127.0.0.1", port)) as conn:
                    assert (await status(conn)).dledger is not None
                scope.cancel()

        code, remark, connected = await _status_answer(port)
        assert code == ResponseCode.SYSTEM_ERROR
        assert remark is not None and "not running" in remark
        assert connected
        nursery.cancel_scope.cancel()
    bugs = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not bugs, [r.getMessage() for r in bugs]
