"""A DLedger node's broker port takes the sends of one read together: a leader appends
them through one ``put_many_nowait`` (one proposal batch, one append round) and answers each
in order with its own outcome (stored, refused in its place, busy on a quorum timeout); a
follower refuses each in order."""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import attrs
import trio
from broker_support import send_request

from hanet.boot import serve_on
from hanet.broker import DLedgerBrokerService
from hanet.dledger import DLedgerNode, NodeConfig, PutOutcome, RaftConfig
from hanet.protocol import (
    FLAG_ONEWAY,
    RemotingCommand,
    ResponseCode,
    SendMessageResponseHeader,
    decode_command,
    encode_command,
)
from hanet.store import Message
from hanet.testing import MemoryNetwork, wait_until

RAFT = RaftConfig(
    election_timeout=0.5, heartbeat_interval=0.05, retransmit_timeout=0.15, append_timeout=0.3
)


def _frames(opaques: Sequence[int], *, bad: int | None = None, oneway: int | None = None) -> bytes:
    """Sends to topic T queue 1 with these opaques (``bad``: to queue 9 of 4, refused;
    ``oneway``: not answered), as one buffer."""
    out = []
    for opaque in opaques:
        request = send_request("T", b"m%d" % opaque, 9 if opaque == bad else 1)
        flag = FLAG_ONEWAY if opaque == oneway else 0
        out.append(encode_command(attrs.evolve(request, opaque=opaque, flag=flag)))
    return b"".join(out)


async def _exchange(port: int, data: bytes, answers: int) -> list[RemotingCommand]:
    """Write ``data`` in one go and read ``answers`` answers."""
    got: list[RemotingCommand] = []
    buffer = b""
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(data)
            while len(got) < answers:
                chunk = await stream.receive_some()
                assert chunk, "the broker closed the connection"
                buffer += chunk
                while len(buffer) >= 4:
                    (length,) = struct.unpack_from(">I", buffer)
                    if len(buffer) < 4 + length:
                        break
                    got.append(decode_command(buffer[4 : 4 + length]))
                    buffer = buffer[4 + length :]
    return got


def _config(tmp_path: Path, node_id: str, peers: dict[str, str]) -> NodeConfig:
    return NodeConfig(
        group="g",
        node_id=node_id,
        peers=peers,
        store_dir=tmp_path / node_id,
        raft=RAFT,
        data_file_size=1 << 20,
        index_file_size=64 * 1024,
        mapped_file_size=1 << 20,
    )


async def _serve(nursery: trio.Nursery, service: DLedgerBrokerService) -> int:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    await nursery.start(partial(serve_on, service.initialize, listeners))
    return int(listeners[0].socket.getsockname()[1])


async def test_a_leader_appends_a_reads_sends_in_one_put_and_answers_each_in_order(
    tmp_path: Path,
) -> None:
    node = DLedgerNode(
        _config(tmp_path, "solo", {"solo": "x:0"}),
        connector=MemoryNetwork().connector_for("solo"),
        listen=False,
    )
    calls: list[int] = []
    put_many = node.put_many_nowait

    def counted(messages: Sequence[Message], done: Callable[[list[PutOutcome]], None]) -> None:
        calls.append(len(messages))
        put_many(messages, done)

    node.put_many_nowait = counted  # type: ignore[method-assign]
    async with trio.open_nursery() as nursery:
        await nursery.start(node.run)
        service = DLedgerBrokerService(node)
        port = await _serve(nursery, service)
        await wait_until(lambda: node.is_leader, 10)
        # the topic exists first (a send alone), then one read of 8 sends: one refused
        # (queue 9 of 4), one oneway
        (first,) = await _exchange(port, _frames([100]), 1)
        assert first.code == ResponseCode.SUCCESS
        calls.clear()
        answers = await _exchange(port, _frames(range(1, 9), bad=3, oneway=6), 7)
        assert [a.opaque for a in answers] == [1, 2, 3, 4, 5, 7, 8]
        assert answers[2].code == ResponseCode.SYSTEM_ERROR
        assert "queueId[9]" in str(answers[2].remark)
        stored = [a for a in answers if a.opaque != 3]
        assert all(a.code == ResponseCode.SUCCESS for a in stored)
        offsets = [SendMessageResponseHeader.from_fields(a.fields).queue_offset for a in stored]
        assert offsets == [1, 2, 3, 4, 6, 7]  # the oneway send (6) took 5
        assert len({a.fields["msgId"] for a in stored}) == len(stored)
        # one read, one put of all 7 messages (loopback delivers a small write in one read)
        assert sum(calls) == 7 and len(calls) <= 2
        assert service.puts == 8
        nursery.cancel_scope.cancel()


async def test_a_read_of_sends_without_a_quorum_is_answered_busy_each_and_a_follower_refuses_each(
    tmp_path: Path,
) -> None:
    network = MemoryNetwork()
    peers = {"n0": "n0:0", "n1": "n1:0", "n2": "n2:0"}
    nodes = {
        n: DLedgerNode(
            _config(tmp_path, n, peers), connector=network.connector_for(n), listen=False
        )
        for n in peers
    }
    async with trio.open_nursery() as nursery:
        for node in nodes.values():
            network.register(node, nursery)
            await nursery.start(node.run)
        leader = await wait_until(
            lambda: next((n for n in nodes.values() if n.is_leader), None), 10
        )
        assert leader is not None
        follower = next(n for n in nodes.values() if n is not leader)
        port = await _serve(nursery, DLedgerBrokerService(leader))
        follower_port = await _serve(nursery, DLedgerBrokerService(follower))
        refused = await _exchange(follower_port, _frames(range(1, 5)), 4)
        assert [a.opaque for a in refused] == [1, 2, 3, 4]
        assert all(a.code == ResponseCode.SERVICE_NOT_AVAILABLE for a in refused)
        assert all("not master" in str(a.remark) for a in refused)
        (ok,) = await _exchange(port, _frames([10]), 1)
        assert ok.code == ResponseCode.SUCCESS
        for other, node in nodes.items():
            if node is not leader:
                network.cut(leader.config.node_id, other)
        busy = await _exchange(port, _frames(range(11, 15), bad=12), 4)
        assert [a.opaque for a in busy] == [11, 12, 13, 14]
        assert "queueId[9]" in str(busy[1].remark)
        for answer in (busy[0], busy[2], busy[3]):
            assert answer.code == ResponseCode.SYSTEM_ERROR
            assert "[PC_SYNCHRONIZED]broker busy" in str(answer.remark)
            assert "WAIT_QUORUM_ACK_TIMEOUT" in str(answer.remark)
        nursery.cancel_scope.cancel()
