"""The failover client: the broker addresses it takes from the network, SERVICE_NOT_AVAILABLE
refusals followed to the leader they name, two nodes naming each other."""

from __future__ import annotations

import json
from functools import partial

import pytest
import trio
from broker_support import broker_status

from hanet.boot import serve
from hanet.channel import HandlerContext, StreamChannel
from hanet.client import BrokerRequestError, FailoverClient, PutMessage, parse_broker_address
from hanet.protocol import (
    DLedgerInfo,
    HanetRequestCode,
    RemotingCommand,
    RemotingDispatcher,
    RequestCode,
    RequestProcessor,
    ResponseCode,
    decode_batch,
    remoting_pipeline,
    string_to_properties,
)
from hanet.store import PutStatus
from hanet.testing import free_ports


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("10.0.0.1:10911", ("10.0.0.1", 10911)),
        ("broker-a.example:1", ("broker-a.example", 1)),
        ("[::1]:10911", ("::1", 10911)),
        ("h:65535", ("h", 65535)),
    ],
)
def test_broker_addresses_are_split(text: str, parsed: tuple[str, int]) -> None:
    assert parse_broker_address(text) == parsed


@pytest.mark.parametrize(
    "text", ["", "h", "h:", ":10911", "[]:10911", "h:port", "h:\u00b2", "h:99999", "h:-1", "h:0"]
)
def test_anything_else_is_none(text: str) -> None:
    assert parse_broker_address(text) is None


async def _serve(nursery: trio.Nursery, processors: dict[int, RequestProcessor]) -> tuple[str, int]:
    """A remoting server on a free loopback port answering with ``processors``; its
    address."""

    def init(channel: StreamChannel) -> None:
        for handler_name, handler in remoting_pipeline():
            channel.pipeline.add_last(handler, handler_name)
        channel.pipeline.add_last(RemotingDispatcher(processors))

    server = await nursery.start(partial(serve, init, 0, host="127.0.0.1"))
    host, port = server.addresses[0][:2]
    return str(host), int(port)


async def _node(
    nursery: trio.Nursery, leader: list[str], served: list[str], name: str
) -> tuple[str, int]:
    """A broker port refusing every send SERVICE_NOT_AVAILABLE naming ``leader[0]``, or
    storing it when ``leader[0]`` is itself."""
    me: list[str] = []

    def send(ctx: HandlerContext, request: RemotingCommand) -> RemotingCommand:
        served.append(name)
        if leader[0] == me[0]:
            fields = {"msgId": "7F00000100002A9F0000000000000000", "queueId": 0, "queueOffset": 0}
            return request.response(ResponseCode.SUCCESS, None, fields)
        remark = f"not master: this node is FOLLOWER; the leader is n1 at {leader[0]}"
        return request.response(ResponseCode.SERVICE_NOT_AVAILABLE, remark)

    host, port = await _serve(nursery, {RequestCode.SEND_MESSAGE_V2: send})
    me.append(f"{host}:{port}")
    return host, port


async def test_two_nodes_naming_each_other_are_not_asked_at_full_speed() -> None:
    served: list[str] = []
    leaders = [[""], [""]]
    async with trio.open_nursery() as nursery:
        a = await _node(nursery, leaders[0], served, "a")
        b = await _node(nursery, leaders[1], served, "b")
        leaders[0][0], leaders[1][0] = f"{b[0]}:{b[1]}", f"{a[0]}:{a[1]}"
        async with FailoverClient.connect([a], retry_for=0.5) as client:
            with pytest.raises(BrokerRequestError) as raised:
                await client.put("T", b"x")
        assert raised.value.code is ResponseCode.SERVICE_NOT_AVAILABLE
        # One pause per round trip A -> B -> A: about 10 in 0.5 s, not thousands.
        assert 2 <= client.redirects <= 40
        assert len(served) == client.redirects + 1  # the last answer is raised
        nursery.cancel_scope.cancel()


async def test_a_refusal_naming_the_leader_is_sent_again_to_it() -> None:
    served: list[str] = []
    leaders = [[""], [""]]
    async with trio.open_nursery() as nursery:
        a = await _node(nursery, leaders[0], served, "a")
        b = await _node(nursery, leaders[1], served, "b")
        leaders[0][0] = leaders[1][0] = f"{b[0]}:{b[1]}"
        async with FailoverClient.connect([a]) as client:  # b known from the remark only
            reply = await client.put("T", b"x")
            assert reply.status is PutStatus.PUT_OK
            assert client.address == b and client.redirects == 1
            assert served == ["a", "b"]
            await client.put("T", b"y")  # straight to the leader now
            assert served == ["a", "b", "b"]
        nursery.cancel_scope.cancel()


async def test_a_refusal_naming_no_leader_asks_the_nodes_status_for_it() -> None:
    """A follower answering a bare SERVICE_NOT_AVAILABLE (as a RocketMQ slave does): the
    client asks its HANET_STATUS, whose DLedger section names the leader's broker port."""
    served: list[str] = []
    leader: list[str] = []

    def refuse(ctx: HandlerContext, request: RemotingCommand) -> RemotingCommand:
        served.append("follower")
        return request.response(ResponseCode.SERVICE_NOT_AVAILABLE, "broker role is slave")

    def status(ctx: HandlerContext, request: RemotingCommand) -> RemotingCommand:
        node = DLedgerInfo("g", "n1", "FOLLOWER", 3, "n0", 0, 0, 0, leader[0])
        document = broker_status(role="FOLLOWER", dledger=node)
        return request.response(body=json.dumps(document.to_json()).encode())

    processors: dict[int, RequestProcessor] = {
        RequestCode.SEND_MESSAGE_V2: refuse,
        HanetRequestCode.HANET_STATUS: status,
    }
    async with trio.open_nursery() as nursery:
        follower = await _serve(nursery, processors)
        leaders = [[""]]
        real = await _node(nursery, leaders[0], served, "leader")
        leaders[0][0] = f"{real[0]}:{real[1]}"
        leader.append(leaders[0][0])
        async with FailoverClient.connect([follower, real]) as client:
            reply = await client.put("T", b"x")
        assert reply.ok and served == ["follower", "leader"] and client.redirects == 1
        nursery.cancel_scope.cancel()


async def test_a_put_whose_connection_is_lost_is_sent_again_and_counted() -> None:
    """The first node reads the put and closes the connection without answering (a leader
    killed mid-put: it may have stored it): the client sends it again to the next address,
    and counts it in ``resent``, which a refusal followed elsewhere does not touch."""
    served: list[str] = []

    def vanish(ctx: HandlerContext, request: RemotingCommand) -> RemotingCommand | None:
        served.append("lost")
        ctx.close("gone mid-put")
        return None

    async with trio.open_nursery() as nursery:
        lost = await _serve(nursery, {RequestCode.SEND_MESSAGE_V2: vanish})
        leaders = [[""]]
        real = await _node(nursery, leaders[0], served, "leader")
        leaders[0][0] = f"{real[0]}:{real[1]}"
        async with FailoverClient.connect([lost, real]) as client:
            reply = await client.put("T", b"x")
            assert reply.status is PutStatus.PUT_OK
            assert served == ["lost", "leader"]
            assert client.resent == 1 and client.redirects == 0
            await client.put("T", b"y")
            assert client.resent == 1
        nursery.cancel_scope.cancel()


def _unique_keys(request: RemotingCommand) -> list[str]:
    """The ``UNIQ_KEY`` of each message a send request carries."""
    if request.code == RequestCode.SEND_BATCH_MESSAGE:
        return [m.properties["UNIQ_KEY"] for m in decode_batch(request.body)]
    return [string_to_properties(request.fields["i"])["UNIQ_KEY"]]


async def test_a_put_sent_again_keeps_its_unique_key() -> None:
    """A put (and each message of a batch) sent again after its connection was lost carries
    the ``UNIQ_KEY`` it carried the first time, as a RocketMQ producer's retries do: stored
    twice, it is one message id twice. The next put gets a new one; a caller's own is kept."""
    seen: list[tuple[str, list[str]]] = []

    def vanish(ctx: HandlerContext, request: RemotingCommand) -> RemotingCommand | None:
        seen.append(("lost", _unique_keys(request)))
        ctx.close("gone mid-put")
        return None

    def store(ctx: HandlerContext, request: RemotingCommand) -> RemotingCommand:
        keys = _unique_keys(request)
        seen.append(("stored", keys))
        fields = {"msgId": ",".join(keys), "queueId": 0, "queueOffset": 0}
        return request.response(ResponseCode.SUCCESS, None, fields)

    codes = (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)
    async with trio.open_nursery() as nursery:
        addresses = [
            await _serve(nursery, dict.fromkeys(codes, processor)) for processor in (vanish, store)
        ]
        async with FailoverClient.connect(addresses) as client:
            assert (await client.put("T", b"x")).ok
            assert [what for what, _ in seen] == ["lost", "stored"]
            assert seen[0][1] == seen[1][1]
            first = seen[1][1]
            assert (await client.put("T", b"y")).ok  # to the second node now
            assert seen[2][1] != first
            own = await client.put("T", b"z", properties={"UNIQ_KEY": "MINE", "a": "b"})
            assert own.ok and seen[3][1] == ["MINE"]
        seen.clear()
        async with FailoverClient.connect(addresses) as client:
            batch = [PutMessage("T", b"1", queue_id=0), PutMessage("T", b"2", queue_id=0)]
            assert all(reply.ok for reply in await client.put_batch(batch))
            assert [what for what, _ in seen] == ["lost", "stored"]
            assert seen[0][1] == seen[1][1] and len(set(seen[1][1])) == 2
        nursery.cancel_scope.cancel()


async def test_a_node_naming_a_leader_that_is_down_is_not_asked_at_full_speed() -> None:
    """The leader was just killed and the follower still names it (it has not timed out
    yet): the client cannot connect there, falls back on the follower, is refused again, and
    pauses between rounds rather than reconnecting at full speed."""
    served: list[str] = []
    (down,) = free_ports(1)
    async with trio.open_nursery() as nursery:
        follower = await _node(nursery, [f"127.0.0.1:{down}"], served, "follower")
        async with FailoverClient.connect([follower, ("127.0.0.1", down)], retry_for=0.5) as client:
            with pytest.raises(BrokerRequestError) as raised:
                await client.put("T", b"x")
        assert raised.value.code is ResponseCode.SERVICE_NOT_AVAILABLE
        # One pause per round: about 10 in 0.5 s, not hundreds.
        assert 2 <= client.redirects <= 40
        assert len(served) == client.redirects + 1
        nursery.cancel_scope.cancel()
