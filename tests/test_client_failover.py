"""The failover client: the broker addresses it takes from the network, NOT_LEADER
redirects between two nodes naming each other."""

from __future__ import annotations

import pytest
import trio

from hanet.client import BrokerRequestError, ErrorCode, FailoverClient, parse_broker_address
from hanet.protocol import ErrorResponse, decode_request, encode_response


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


async def _not_leader(listener: trio.SocketListener, leader: list[str], served: list[int]) -> None:
    """A broker port answering every request NOT_LEADER naming ``leader[0]``."""

    async def serve(stream: trio.SocketStream) -> None:
        buffer = b""
        async with stream:
            while data := await stream.receive_some(65536):
                buffer += data
                while len(buffer) >= 4 and len(buffer) >= 4 + int.from_bytes(buffer[:4], "big"):
                    size = int.from_bytes(buffer[:4], "big")
                    request = decode_request(buffer[4 : 4 + size])
                    buffer = buffer[4 + size :]
                    served.append(request.request_id)
                    answer = ErrorResponse(
                        request.request_id, ErrorCode.NOT_LEADER, "not the leader", leader[0]
                    )
                    payload = encode_response(answer)
                    await stream.send_all(len(payload).to_bytes(4, "big") + payload)

    await trio.serve_listeners(serve, [listener])


async def test_two_nodes_naming_each_other_are_not_asked_at_full_speed() -> None:
    listeners = [(await trio.open_tcp_listeners(0, host="127.0.0.1"))[0] for _ in range(2)]
    addresses = [listener.socket.getsockname()[:2] for listener in listeners]
    served: list[int] = []
    async with trio.open_nursery() as nursery:
        for listener, other in zip(listeners, reversed(addresses), strict=True):
            nursery.start_soon(_not_leader, listener, [f"{other[0]}:{other[1]}"], served)
        async with FailoverClient.connect([addresses[0]], retry_for=0.5) as client:
            with pytest.raises(BrokerRequestError) as raised:
                await client.put("T", b"x")
        assert raised.value.code is ErrorCode.NOT_LEADER
        # One pause per round trip A -> B -> A: about 10 in 0.5 s, not thousands.
        assert 2 <= client.redirects <= 40
        assert len(served) == client.redirects + 1  # the last answer is raised
        nursery.cancel_scope.cancel()
