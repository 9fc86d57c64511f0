"""The name server: the registry in virtual time, the server over loopback TCP with
:class:`NameServerClient`, and ``hanet namesrv`` as a real process."""

from __future__ import annotations

import json
import logging
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing

from hanet.boot import AllowList
from hanet.channel import EmbeddedChannel
from hanet.cli import main
from hanet.client import (
    BrokerClient,
    BrokerConnectionError,
    BrokerError,
    BrokerRequestError,
    NameServerClient,
    NameServerConnection,
)
from hanet.namesrv import (
    DEFAULT_EXPIRE_AFTER,
    MAX_QUEUES,
    MAX_TOPICS,
    NameServer,
    RegisterAnswer,
    RegistrationError,
    Registry,
    registration_problem,
)
from hanet.protocol import (
    BrokerClientCodec,
    BrokerRegistration,
    BrokerServerCodec,
    ClusterRequest,
    ClusterResponse,
    ErrorCode,
    ErrorResponse,
    PutMessage,
    PutRequest,
    RegisterBrokerRequest,
    Request,
    Response,
    RouteBroker,
    UnregisterBrokerResponse,
    broker_frame_codec,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)

T0 = 1_700_000_000.0  # a virtual "now", seconds since the epoch

MASTER_A = BrokerRegistration(
    "DefaultCluster", "broker-a", 0, "SYNC_MASTER", "10.0.0.1:10911", "10.0.0.1:10912",
    (("TopicTest", 4), ("Orders", 8)),
)  # fmt: skip
SLAVE_A = BrokerRegistration(
    "DefaultCluster", "broker-a", 1, "SLAVE", "10.0.0.2:10911", "", (("TopicTest", 4),)
)
MASTER_B = BrokerRegistration(
    "DefaultCluster", "broker-b", 0, "ASYNC_MASTER", "10.0.0.3:10911", "10.0.0.3:10912",
    (("TopicTest", 2),),
)  # fmt: skip


# -- the registry, sans-IO ------------------------------------------------------------------


def test_a_registration_is_listed_with_its_time_in_ms() -> None:
    registry = Registry()
    assert registry.register(MASTER_A, T0) == RegisterAnswer(None, None)
    assert len(registry) == 1
    (info,) = registry.cluster().brokers
    assert info.registration == MASTER_A
    assert info.last_update == int(T0 * 1000)


def test_renewal_moves_the_last_update_and_logs_nothing_new(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = Registry()
    with caplog.at_level(logging.INFO, logger="hanet.namesrv"):
        registry.register(MASTER_A, T0)
        registry.register(MASTER_A, T0 + 30)
    assert [r.getMessage() for r in caplog.records] == [
        "new broker DefaultCluster/broker-a/0: SYNC_MASTER at 10.0.0.1:10911 "
        "(HA 10.0.0.1:10912), 2 topics"
    ]
    assert registry.cluster().brokers[0].last_update == int((T0 + 30) * 1000)


def test_expiry_at_120_s_exactly(caplog: pytest.LogCaptureFixture) -> None:
    registry = Registry()
    registry.register(MASTER_A, T0)
    registry.register(SLAVE_A, T0 + 60)
    assert registry.expire(T0 + DEFAULT_EXPIRE_AFTER - 0.001) == []
    assert len(registry) == 2
    with caplog.at_level(logging.INFO, logger="hanet.namesrv"):
        assert registry.expire(T0 + 120) == [MASTER_A]
    assert [r.getMessage() for r in caplog.records] == [
        "broker DefaultCluster/broker-a/0 at 10.0.0.1:10911 expired: no registration for 120 s"
    ]
    assert [b.registration for b in registry.cluster().brokers] == [SLAVE_A]
    assert registry.expire(T0 + 180) == [SLAVE_A]
    assert len(registry) == 0


def test_renewal_postpones_expiry() -> None:
    registry = Registry()
    for t in range(0, 600, 30):
        registry.register(MASTER_A, T0 + t)
        assert registry.expire(T0 + t + 10) == []
    assert len(registry) == 1


def test_expiry_is_configurable() -> None:
    registry = Registry(expire_after=5)
    registry.register(MASTER_A, T0)
    assert registry.expire(T0 + 4.9) == []
    assert registry.expire(T0 + 5) == [MASTER_A]
    with pytest.raises(ValueError, match="expire_after"):
        Registry(expire_after=0)


def test_a_slave_learns_its_master() -> None:
    registry = Registry()
    assert registry.register(SLAVE_A, T0) == RegisterAnswer(None, None)  # no master yet
    registry.register(MASTER_B, T0)  # another broker name's master: not this slave's
    assert registry.register(SLAVE_A, T0 + 1) == RegisterAnswer(None, None)
    assert registry.register(MASTER_A, T0 + 2) == RegisterAnswer(None, None)  # a master: none
    answer = registry.register(SLAVE_A, T0 + 30)
    assert answer == RegisterAnswer("10.0.0.1:10911", "10.0.0.1:10912")


def test_a_slave_of_another_cluster_does_not_learn_the_master() -> None:
    registry = Registry()
    registry.register(MASTER_A, T0)
    other = attrs.evolve(SLAVE_A, cluster="OtherCluster")
    assert registry.register(other, T0) == RegisterAnswer(None, None)


def test_a_master_not_renewed_is_not_named_even_before_the_scan() -> None:
    registry = Registry()
    registry.register(MASTER_A, T0)
    assert registry.register(SLAVE_A, T0 + 119).master_address == "10.0.0.1:10911"
    assert registry.register(SLAVE_A, T0 + 120) == RegisterAnswer(None, None)


def test_a_master_without_an_ha_address_names_none() -> None:
    registry = Registry()
    registry.register(attrs.evolve(MASTER_A, ha_address=""), T0)
    assert registry.register(SLAVE_A, T0) == RegisterAnswer("10.0.0.1:10911", None)


def test_a_master_moving_is_followed(caplog: pytest.LogCaptureFixture) -> None:
    registry = Registry()
    registry.register(MASTER_A, T0)
    registry.register(SLAVE_A, T0)
    moved = attrs.evolve(MASTER_A, broker_address="10.0.0.9:20911", ha_address="10.0.0.9:20912")
    with caplog.at_level(logging.INFO, logger="hanet.namesrv"):
        registry.register(moved, T0 + 40)  # restarted on new ports: replaces the old entry
    assert [r.getMessage() for r in caplog.records] == [
        "broker DefaultCluster/broker-a/0 changed: SYNC_MASTER at 10.0.0.1:10911 "
        "(HA 10.0.0.1:10912) -> SYNC_MASTER at 10.0.0.9:20911 (HA 10.0.0.9:20912)"
    ]
    assert [b.registration for b in registry.cluster().brokers] == [moved, SLAVE_A]
    answer = registry.register(SLAVE_A, T0 + 60)
    assert answer == RegisterAnswer("10.0.0.9:20911", "10.0.0.9:20912")


def test_a_member_changing_id_on_the_same_address_replaces_its_old_entry() -> None:
    registry = Registry()
    registry.register(SLAVE_A, T0)
    promoted = attrs.evolve(SLAVE_A, broker_id=0, role="SYNC_MASTER", ha_address="10.0.0.2:1")
    registry.register(promoted, T0 + 1)
    assert [b.registration for b in registry.cluster().brokers] == [promoted]


def test_unregister_removes_only_the_address_registered() -> None:
    registry = Registry()
    registry.register(MASTER_A, T0)
    assert not registry.unregister("DefaultCluster", "broker-a", 0, "10.0.0.7:10911")
    assert not registry.unregister("DefaultCluster", "broker-a", 1, "10.0.0.1:10911")
    assert len(registry) == 1
    assert registry.unregister("DefaultCluster", "broker-a", 0, "10.0.0.1:10911")
    assert len(registry) == 0
    assert registry.register(SLAVE_A, T0) == RegisterAnswer(None, None)


def test_route_groups_members_by_broker_name_master_first() -> None:
    registry = Registry()
    registry.register(SLAVE_A, T0)
    registry.register(MASTER_B, T0)
    registry.register(MASTER_A, T0)
    slave_b = BrokerRegistration("DefaultCluster", "broker-b", 2, "SLAVE", "10.0.0.4:10911")
    registry.register(slave_b, T0)  # holds no topic yet: still a member of broker-b
    route = registry.route("TopicTest")
    assert route is not None
    assert route.topic == "TopicTest"
    assert route.brokers == (
        RouteBroker("broker-a", 4, ((0, "10.0.0.1:10911"), (1, "10.0.0.2:10911"))),
        RouteBroker("broker-b", 2, ((0, "10.0.0.3:10911"), (2, "10.0.0.4:10911"))),
    )
    assert route.brokers[0].master_address == "10.0.0.1:10911"
    orders = registry.route("Orders")
    assert orders is not None
    assert orders.brokers == (
        RouteBroker("broker-a", 8, ((0, "10.0.0.1:10911"), (1, "10.0.0.2:10911"))),
    )
    assert registry.route("Nowhere") is None


def test_route_without_a_master_takes_the_slaves_queues() -> None:
    registry = Registry()
    registry.register(SLAVE_A, T0)
    route = registry.route("TopicTest")
    assert route is not None
    (broker,) = route.brokers
    assert broker == RouteBroker("broker-a", 4, ((1, "10.0.0.2:10911"),))
    assert broker.master_address is None


def test_the_cluster_is_listed_by_cluster_name_and_id() -> None:
    registry = Registry()
    other = attrs.evolve(MASTER_A, cluster="AnotherCluster", broker_address="10.0.1.1:10911")
    for r, t in ((MASTER_B, 1.0), (SLAVE_A, 2.5), (MASTER_A, 3.0), (other, 4.0)):
        registry.register(r, T0 + t)
    listed = [(b.registration, b.last_update) for b in registry.cluster().brokers]
    assert listed == [
        (other, int((T0 + 4) * 1000)),
        (MASTER_A, int((T0 + 3) * 1000)),
        (SLAVE_A, int((T0 + 2.5) * 1000)),
        (MASTER_B, int((T0 + 1) * 1000)),
    ]


BAD_REGISTRATIONS = [
    (attrs.evolve(MASTER_A, cluster=""), "the cluster name is empty"),
    (attrs.evolve(MASTER_A, broker_name=""), "the broker name is empty"),
    (attrs.evolve(SLAVE_A, broker_id=-1), "broker id -1 is negative"),
    (attrs.evolve(MASTER_A, role="MASTER"), "role 'MASTER' is not one of"),
    (attrs.evolve(MASTER_A, role="SLAVE"), "broker id 0 is a master's, but the role is SLAVE"),
    (
        attrs.evolve(SLAVE_A, role="ASYNC_MASTER"),
        "broker id 1 is a slave's, but the role is ASYNC_MASTER",
    ),
    (attrs.evolve(MASTER_A, broker_address=""), "broker address '' is not HOST:PORT"),
    (attrs.evolve(MASTER_A, broker_address="10.0.0.1"), "broker address '10.0.0.1' is not"),
    (attrs.evolve(MASTER_A, broker_address=":10911"), "broker address ':10911' is not"),
    (attrs.evolve(MASTER_A, broker_address="h:0"), "broker address 'h:0' is not"),
    (attrs.evolve(MASTER_A, broker_address="h:99999"), "broker address 'h:99999' is not"),
    (attrs.evolve(MASTER_A, ha_address="h:port"), "HA address 'h:port' is not HOST:PORT"),
    (attrs.evolve(MASTER_A, topics=(("", 4),)), "a topic name is empty"),
    (attrs.evolve(MASTER_A, topics=(("T", 0),)), "topic 'T' has 0 queues"),
    (attrs.evolve(MASTER_A, topics=(("T", 2**31 - 1),)), "topic 'T' has 2147483647 queues"),
    (
        attrs.evolve(MASTER_A, topics=(("T", MAX_QUEUES + 1),)),
        f"topic 'T' has {MAX_QUEUES + 1} queues",
    ),
    (
        attrs.evolve(MASTER_A, topics=tuple((f"T{i}", 1) for i in range(MAX_TOPICS + 1))),
        f"{MAX_TOPICS + 1} topics",
    ),
]


@pytest.mark.parametrize(("registration", "complaint"), BAD_REGISTRATIONS)
def test_bad_registrations_are_refused(registration: BrokerRegistration, complaint: str) -> None:
    registry = Registry()
    registry.register(MASTER_A, T0)
    with pytest.raises(RegistrationError, match=complaint.replace("(", r"\(")):
        registry.register(registration, T0 + 1)
    assert [b.registration for b in registry.cluster().brokers] == [MASTER_A]  # unchanged
    problem = registration_problem(registration)
    assert problem is not None
    assert complaint in problem


def test_good_registrations_have_no_problem() -> None:
    for r in (MASTER_A, SLAVE_A, MASTER_B, attrs.evolve(MASTER_A, broker_address="[::1]:1")):
        assert registration_problem(r) is None
    most = tuple((f"T{i}", MAX_QUEUES) for i in range(MAX_TOPICS))
    assert registration_problem(attrs.evolve(MASTER_A, topics=most)) is None


# -- the server, in-process -------------------------------------------------------------------


def test_the_codecs_carry_the_name_server_requests_and_answers() -> None:
    client = EmbeddedChannel()
    for name, handler in broker_frame_codec(1 << 20, BrokerClientCodec()):
        client.pipeline.add_last(handler, name)
    client.write_outbound(RegisterBrokerRequest(7, MASTER_A))
    frame = b"".join(bytes(part) for part in client.outbound_messages)
    assert decode_request(frame[4:]) == RegisterBrokerRequest(7, MASTER_A)
    server = EmbeddedChannel()
    for name, handler in broker_frame_codec(1 << 20, BrokerServerCodec()):
        server.pipeline.add_last(handler, name)
    answer = ClusterResponse(7, Registry().cluster())
    server.write_outbound(answer)
    frame = b"".join(bytes(part) for part in server.outbound_messages)
    assert decode_response(frame[4:]) == answer


def test_handle_answers_other_requests_not_supported() -> None:
    server = NameServer(clock=lambda: T0)
    answer = server.handle(ClusterRequest(3))
    assert answer == ClusterResponse(3, Registry().cluster())
    answer = server.handle(PutRequest(4, (PutMessage("T", b"x"),)))
    assert isinstance(answer, ErrorResponse)
    assert answer.code is ErrorCode.NOT_SUPPORTED
    assert answer.message == "a name server does not serve Put requests"


async def _start(
    nursery: trio.Nursery, server: NameServer | None = None
) -> tuple[NameServer, NameServerClient]:
    """Run ``server`` (default: one on a free loopback port); a client of it."""
    server = server or NameServer(("127.0.0.1", 0))
    address = await nursery.start(server.run)
    return server, NameServerClient([address])


async def test_registration_route_and_cluster_over_tcp(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with trio.open_nursery() as nursery:
        server, client = await _start(nursery)
        answer = await client.register_broker(SLAVE_A)  # no master yet
        assert (answer.master_address, answer.master_ha_address) == (None, None)
        await client.register_broker(MASTER_A)
        answer = await client.register_broker(SLAVE_A)
        assert (answer.master_address, answer.master_ha_address) == (
            "10.0.0.1:10911",
            "10.0.0.1:10912",
        )
        route = await client.route("TopicTest")
        assert route.brokers == (
            RouteBroker("broker-a", 4, ((0, "10.0.0.1:10911"), (1, "10.0.0.2:10911"))),
        )
        with pytest.raises(BrokerRequestError) as raised:
            await client.route("Nowhere")
        assert raised.value.code is ErrorCode.TOPIC_NOT_EXIST
        assert "'Nowhere'" in raised.value.message
        cluster = await client.cluster()
        assert [b.registration for b in cluster.brokers] == [MASTER_A, SLAVE_A]
        assert cluster == server.registry.cluster()
        await client.unregister_broker(SLAVE_A)
        assert [b.registration for b in (await client.cluster()).brokers] == [MASTER_A]
        nursery.cancel_scope.cancel()


async def test_expiry_and_master_discovery_in_virtual_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with trio.open_nursery() as nursery:
        server, client = await _start(nursery)
        started = trio.current_time()
        await client.register_broker(MASTER_A)
        await client.register_broker(SLAVE_A)

        async def slave_heartbeats() -> None:
            while True:
                await trio.sleep(30)
                await client.register_broker(SLAVE_A)

        nursery.start_soon(slave_heartbeats)
        # The master stops registering: the scan (every 10 s) drops it after 120 s..130 s.
        while len((await client.cluster()).brokers) == 2:  # noqa: ASYNC110 - polls the server
            await trio.sleep(1)
        gone_after = trio.current_time() - started
        assert 120 <= gone_after <= 131
        assert [b.registration for b in (await client.cluster()).brokers] == [SLAVE_A]
        assert (await client.register_broker(SLAVE_A)).master_address is None
        # The master comes back on another port: the slave learns it.
        moved = attrs.evolve(MASTER_A, broker_address="10.0.0.9:1", ha_address="10.0.0.9:2")
        await client.register_broker(moved)
        answer = await client.register_broker(SLAVE_A)
        assert (answer.master_address, answer.master_ha_address) == ("10.0.0.9:1", "10.0.0.9:2")
        # The slave keeps registering every 30 s: it never expires.
        await trio.sleep(600)
        assert SLAVE_A in [b.registration for b in server.registry.cluster().brokers]
        nursery.cancel_scope.cancel()


async def test_last_update_is_epoch_ms_moved_by_the_trio_clock(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with trio.open_nursery() as nursery:
        server, client = await _start(nursery)
        before = server.now()
        await trio.sleep(50)
        await client.register_broker(MASTER_A)
        (info,) = (await client.cluster()).brokers
        assert info.last_update / 1000 == pytest.approx(before + 50, abs=1)
        assert info.last_update > 1_600_000_000_000
        nursery.cancel_scope.cancel()


async def test_a_bad_registration_is_answered_and_the_connection_stays_open(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with trio.open_nursery() as nursery:
        server, _ = await _start(nursery)
        assert server.address is not None
        host, port = server.address
        async with NameServerConnection.connect(host, port) as connection:
            with pytest.raises(BrokerRequestError) as raised:
                await connection.register_broker(attrs.evolve(MASTER_A, role="SLAVE"))
            assert raised.value.code is ErrorCode.SYSTEM_ERROR
            assert raised.value.message == (
                "registration refused: broker id 0 is a master's, but the role is SLAVE"
            )
            await connection.register_broker(MASTER_A)  # the same connection goes on
            assert connection.is_connected
        assert "refused" in caplog.text
        nursery.cancel_scope.cancel()


async def test_the_client_of_several_name_servers_raises_a_refusal_as_it_is() -> None:
    async with trio.open_nursery() as nursery:
        server, _ = await _start(nursery)
        assert server.address is not None
        client = NameServerClient([server.address, ("127.0.0.1", 1)], timeout=2.0)
        with pytest.raises(BrokerRequestError, match="registration refused"):
            await client.register_broker(attrs.evolve(MASTER_A, role="SLAVE"))
        answer = await client.register_broker(MASTER_A)  # one name server down: still fine
        assert answer.master_ha_address is None
        nursery.cancel_scope.cancel()


async def test_broker_requests_answer_not_supported() -> None:
    async with trio.open_nursery() as nursery:
        server, _ = await _start(nursery)
        assert server.address is not None
        host, port = server.address
        async with BrokerClient.connect(host, port) as broker:
            with pytest.raises(BrokerRequestError) as raised:
                await broker.status()
            assert raised.value.code is ErrorCode.NOT_SUPPORTED
            with pytest.raises(BrokerRequestError) as raised:
                await broker.put("TopicTest", b"hello")
            assert raised.value.code is ErrorCode.NOT_SUPPORTED
            assert broker.is_connected
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        (b"\x00\x00\x00\x05\x7e\x00\x00\x00\x01", "opcode"),  # unknown opcode 0x7e
        (b"\x00\x00\x00\x07\x12\x00\x00\x00\x01\x00\x09", "GET_ROUTE"),  # truncated
        (b"\x00\x10\x00\x00\x12", "exceeds"),  # 1 MiB > the 4 KiB maximum
    ],
)
async def test_a_malformed_frame_closes_only_its_connection(
    frame: bytes, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with trio.open_nursery() as nursery:
        server, client = await _start(nursery, NameServer(("127.0.0.1", 0), max_frame_length=4096))
        assert server.address is not None
        host, port = server.address
        async with NameServerConnection.connect(host, port) as good:
            await good.register_broker(MASTER_A)
            bad = await trio.open_tcp_stream(host, port)
            await bad.send_all(frame)
            with trio.fail_after(5):
                while await bad.receive_some(1024):
                    pass  # the server closes it
            await bad.aclose()
            assert len((await good.cluster()).brokers) == 1
        assert len((await client.cluster()).brokers) == 1
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any("closing" in w and reason in w for w in warnings), warnings
        nursery.cancel_scope.cancel()


async def test_the_allow_list_refuses_other_networks() -> None:
    async with trio.open_nursery() as nursery:
        server = NameServer(("127.0.0.1", 0), allow=AllowList.parse("10.0.0.0/8"))
        _, client = await _start(nursery, server)
        with pytest.raises(BrokerConnectionError):
            await client.cluster()
        nursery.cancel_scope.cancel()


async def test_no_name_server_reachable() -> None:
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    await listener.aclose()
    client = NameServerClient([("127.0.0.1", port)], timeout=2)
    with pytest.raises(BrokerConnectionError):
        await client.cluster()


# -- hanet namesrv, a real process -------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(("stop", "status"), [(signal.SIGTERM, 0), (signal.SIGINT, 130)])
async def test_hanet_namesrv_process(tmp_path: Path, stop: signal.Signals, status: int) -> None:
    ready = tmp_path / "namesrv.ready"
    log_path = tmp_path / "namesrv.log"
    with log_path.open("wb") as out:
        process = await trio.lowlevel.open_process(
            [
                sys.executable, "-m", "hanet", "namesrv", "--listen", "127.0.0.1:0",
                "--expire-after", "60", "--ready-file", str(ready),
            ],
            stdin=subprocess.DEVNULL, stdout=out, stderr=out,
        )  # fmt: skip
    try:
        with trio.fail_after(15):
            while not ready.exists():
                assert process.returncode is None, log_path.read_text()
                await trio.sleep(0.02)
        data = json.loads(ready.read_text())
        host, _, port = data["namesrv"].rpartition(":")
        assert data["expire_after"] == 60
        client = NameServerClient([(host, int(port))])
        await client.register_broker(MASTER_A)
        answer = await client.register_broker(SLAVE_A)
        assert answer.master_ha_address == "10.0.0.1:10912"
        assert len((await client.cluster()).brokers) == 2
        process.send_signal(stop)
        with trio.fail_after(10):
            assert await process.wait() == status
    finally:
        if process.returncode is None:
            process.kill()
        with trio.CancelScope(shield=True):
            await process.wait()
    text = log_path.read_text()
    assert "new broker DefaultCluster/broker-a/0" in text
    assert f"{stop.name}: stopping" in text
    assert "Traceback" not in text


def test_namesrv_port_in_use(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["namesrv", "--listen", f"127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hanet: cannot listen: ")
    assert f"(127.0.0.1:{port})" in err


@pytest.mark.parametrize("value", ["0", "-5", "soon"])
def test_namesrv_refuses_a_bad_expiry(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        main(["namesrv", "--expire-after", value])
    assert raised.value.code == 2
    assert "--expire-after" in capsys.readouterr().err


def test_namesrv_refuses_half_a_tls_setup(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cert = tmp_path / "cert.pem"
    cert.write_text("x")
    assert main(["namesrv", "--tls-cert", str(cert)]) == 2
    assert "--tls-cert and --tls-key go together" in capsys.readouterr().err


async def test_where_a_client_puts_and_pulls_a_topic() -> None:
    async with trio.open_nursery() as nursery:
        _, client = await _start(nursery)
        for registration in (MASTER_A, SLAVE_A, MASTER_B):
            await client.register_broker(registration)
        # puts: the masters holding the topic; a new topic: every master
        assert await client.put_addresses("Orders") == [("10.0.0.1", 10911)]
        assert await client.put_addresses("TopicTest") == [
            ("10.0.0.1", 10911),
            ("10.0.0.3", 10911),
        ]
        assert await client.put_addresses("NewTopic") == [
            ("10.0.0.1", 10911),
            ("10.0.0.3", 10911),
        ]
        # pulls: one broker name's members, the master first
        assert await client.pull_addresses("TopicTest") == [
            ("10.0.0.1", 10911),
            ("10.0.0.2", 10911),
        ]
        assert await client.pull_addresses("TopicTest", "broker-b") == [("10.0.0.3", 10911)]
        with pytest.raises(BrokerConnectionError, match="no broker name 'broker-c'"):
            await client.pull_addresses("TopicTest", "broker-c")
        with pytest.raises(BrokerRequestError) as raised:
            await client.pull_addresses("NewTopic")
        assert raised.value.code is ErrorCode.TOPIC_NOT_EXIST
        await client.unregister_broker(MASTER_A)
        await client.unregister_broker(MASTER_B)
        with pytest.raises(BrokerConnectionError, match="no master"):
            await client.put_addresses("NewTopic")
        nursery.cancel_scope.cancel()


def test_the_registry_holds_at_most_max_brokers() -> None:
    registry = Registry(max_brokers=2)
    registry.register(MASTER_A, 1000.0)
    registry.register(SLAVE_A, 1000.0)
    with pytest.raises(RegistrationError, match="holds 2 brokers, its most"):
        registry.register(MASTER_B, 1000.0)
    registry.register(MASTER_A, 1010.0)  # a renewal always goes through
    assert len(registry) == 2
    registry.register(MASTER_B, 1125.0)  # SLAVE_A expired meanwhile: room again
    assert {b.registration.broker_name for b in registry.cluster().brokers} == {
        "broker-a",
        "broker-b",
    }


class _CountingNameServer(NameServer):
    """Counts the requests it answered."""

    answered = 0

    def handle(self, request: Request) -> Response:
        self.answered += 1
        return super().handle(request)


async def test_a_client_not_reading_its_answers_is_not_read_either() -> None:
    server = _CountingNameServer(("127.0.0.1", 0))
    for i in range(20):  # answers of some size: the server's outbound fills sooner
        registration = attrs.evolve(MASTER_A, broker_name=f"broker-{i}", broker_address=f"h{i}:1")
        server.registry.register(registration, T0)
    answer_size = len(encode_response(ClusterResponse(1, server.registry.cluster())))
    async with trio.open_nursery() as nursery:
        host, port = await nursery.start(server.run)
        sock = trio.socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        await sock.connect((host, port))
        stream = trio.SocketStream(sock)
        request = encode_request(ClusterRequest(1))
        frame = len(request).to_bytes(4, "big") + request
        sent = 0
        with trio.move_on_after(3):
            while True:  # never reads: the server stops reading once its buffers are full
                await stream.send_all(frame * 100)
                sent += 100
        answered = server.answered
        await trio.sleep(0.5)
        assert server.answered == answered  # reading paused
        assert answered < sent
        assert answered * answer_size < 64 << 20  # not every answer is held
        await stream.aclose()
        nursery.cancel_scope.cancel()


class _BadNameServer(NameServer):
    """Answers everything with ``answer`` (an ERROR, or an answer of the wrong kind)."""

    def __init__(self, answer: Callable[[int], Response]) -> None:
        super().__init__(("127.0.0.1", 0))
        self.answer = answer

    def handle(self, request: Request) -> Response:
        return self.answer(request.request_id)


@pytest.mark.parametrize(
    "answer",
    [
        lambda rid: ErrorResponse(rid, ErrorCode.NOT_SUPPORTED, "not a name server"),
        lambda rid: ErrorResponse(rid, ErrorCode.SYSTEM_ERROR, "busy"),
        UnregisterBrokerResponse,  # malformed: not the answer asked for
    ],
)
async def test_a_bad_name_server_makes_the_client_ask_the_next(
    answer: Callable[[int], Response],
) -> None:
    async with trio.open_nursery() as nursery:
        bad = await nursery.start(_BadNameServer(answer).run)
        good_server = NameServer(("127.0.0.1", 0))
        good = await nursery.start(good_server.run)
        client = NameServerClient([bad, good], timeout=2.0)
        good_server.registry.register(MASTER_A, T0)
        route = await client.route("TopicTest")
        assert route.brokers[0].broker_name == "broker-a"
        assert len((await client.cluster()).brokers) == 1
        with pytest.raises(BrokerRequestError) as raised:
            await client.route("Nowhere")  # an answer: not asked again
        assert raised.value.code is ErrorCode.TOPIC_NOT_EXIST
        await client.unregister_broker(MASTER_A)  # the bad one is logged, the good one done
        assert len(good_server.registry) == 0
        with pytest.raises(BrokerError):
            await NameServerClient([bad], timeout=2.0).route("TopicTest")
        nursery.cancel_scope.cancel()
