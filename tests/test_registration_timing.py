"""A broker's registration with its name servers in virtual time: hanet's own name servers
reached over memory streams, the clock jumping (every 30 s to every name server, a oneway
registration when a topic is created, a short back-off for a name server that is down or
restarting, UNREGISTER_BROKER on a clean stop, a slave's master taken from the answer)."""

from __future__ import annotations

import errno
import itertools
import logging
from collections.abc import Callable
from functools import partial
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from hanet.boot import Connector, run_channel
from hanet.broker import NameServerRegistrar, apply_properties
from hanet.channel import ChannelInboundHandler, HandlerContext, StreamChannel
from hanet.client import NameServerClient
from hanet.errors import ConfigError
from hanet.ha import BrokerConfig
from hanet.namesrv import NameServer
from hanet.protocol import BrokerRegistration, RegisterBrokerResponse, RemotingCommand, RequestCode

Address = tuple[str, int]
A: Address = ("ns-a", 9876)
B: Address = ("ns-b", 9876)

MASTER = BrokerRegistration(
    "C", "broker-a", 0, "ASYNC_MASTER", "10.0.0.1:10911", "10.0.0.1:10912", (("T", 4),)
)
SLAVE = BrokerRegistration("C", "broker-a", 1, "SLAVE", "10.0.0.2:10911", "", (("T", 4),))


@attrs.frozen
class Seen:
    """A request a name server received: when (trio time), where, what, oneway or not."""

    at: float
    server: Address
    code: int
    oneway: bool


class _Recorder(ChannelInboundHandler):
    def __init__(self, seen: list[Seen], server: Address) -> None:
        self.seen = seen
        self.server = server

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        if isinstance(msg, RemotingCommand) and not msg.is_response:
            self.seen.append(Seen(trio.current_time(), self.server, msg.code, msg.is_oneway))
        ctx.fire_channel_read(msg)


@attrs.define
class NameServers:
    """hanet name servers reached over memory streams; each can be stopped (its connections
    closed, new ones refused) and started again (empty, as a restarted process)."""

    nursery: trio.Nursery
    servers: dict[Address, NameServer] = attrs.Factory(dict)
    seen: list[Seen] = attrs.Factory(list)
    channels: dict[Address, list[StreamChannel]] = attrs.Factory(dict)

    def start(self, address: Address) -> NameServer:
        server = self.servers[address] = NameServer(address)
        self.channels[address] = []
        return server

    async def stop(self, address: Address) -> None:
        del self.servers[address]
        for channel in self.channels.pop(address, []):
            await channel.close("name server stopped")

    def registered(self, address: Address) -> list[tuple[str, int]]:
        server = self.servers.get(address)
        if server is None:
            return []
        return sorted((b.broker_name, b.broker_id) for b in server.registry.brokers())

    def times(self, address: Address, code: int = RequestCode.REGISTER_BROKER) -> list[float]:
        return [s.at for s in self.seen if s.server == address and s.code == code]

    def connector(self, address: Address) -> Connector:
        async def open_stream() -> trio.abc.Stream:
            await trio.lowlevel.checkpoint()
            server = self.servers.get(address)
            if server is None:
                raise OSError(errno.ECONNREFUSED, "Connection refused")
            ours, theirs = trio.testing.memory_stream_pair()

            def initialize(channel: StreamChannel) -> None:
                server.initialize(channel)
                channel.pipeline.add_before("dispatch", _Recorder(self.seen, address))

            channel = await self.nursery.start(partial(run_channel, theirs, initialize))
            self.channels[address].append(channel)
            return ours

        return open_stream

    def client(self, *addresses: Address) -> NameServerClient:
        return NameServerClient(addresses, connector=self.connector)


def registrar(
    servers: NameServers,
    *addresses: Address,
    registration: BrokerRegistration = MASTER,
    on_answer: Callable[[RegisterBrokerResponse], None] | None = None,
) -> NameServerRegistrar:
    return NameServerRegistrar(
        servers.client(*addresses), lambda: registration, on_answer=on_answer
    )


async def test_every_30_s_to_every_name_server(autojump_clock: trio.testing.MockClock) -> None:
    async with trio.open_nursery() as nursery:
        servers = NameServers(nursery)
        servers.start(A)
        servers.start(B)
        reg = registrar(servers, A, B)
        start = trio.current_time()
        await nursery.start(reg.run)
        await trio.sleep(95)
        for address in (A, B):
            times = [round(t - start, 3) for t in servers.times(address)]
            assert times == [0.0, 30.0, 60.0, 90.0]
            assert servers.registered(address) == [("broker-a", 0)]
        assert reg.registrations == 4 and reg.failures == 0
        nursery.cancel_scope.cancel()


async def test_a_broker_started_before_its_name_server_registers_within_seconds(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "hanet.broker")
    async with trio.open_nursery() as nursery:
        servers = NameServers(nursery)
        servers.start(B)
        reg = registrar(servers, A, B)
        start = trio.current_time()
        await nursery.start(reg.run)
        await trio.sleep(12)
        assert servers.registered(B) == [("broker-a", 0)]
        assert reg.last_error is None  # B took the rounds
        # A is retried after 0.5, 1, 2, 4 s, then every 5 s: not at the 30 s round.
        servers.start(A)
        up = trio.current_time()
        await trio.sleep(6)
        (first,) = servers.times(A)
        assert first - up <= 5.0
        assert servers.registered(A) == [("broker-a", 0)]
        # Then A is on the 30 s period of its own; B kept its own (0, 30, ...).
        await trio.sleep(30)
        assert [round(t - first, 3) for t in servers.times(A)] == [0.0, 30.0]
        assert [round(t - start, 3) for t in servers.times(B)] == [0.0, 30.0]
        nursery.cancel_scope.cancel()
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1  # logged once, not at every retry
    assert "cannot register C/broker-a id 0 with name server ns-a:9876" in warnings[0]
    assert "name server ns-a:9876 took the registration again" in caplog.text


async def test_the_back_off_doubles_up_to_5_s(autojump_clock: trio.testing.MockClock) -> None:
    attempts: list[float] = []
    async with trio.open_nursery() as nursery:
        servers = NameServers(nursery)

        def connector(address: Address) -> Connector:
            attempts.append(trio.current_time())
            return servers.connector(address)

        reg = NameServerRegistrar(NameServerClient([A], connector=connector), lambda: MASTER)
        start = trio.current_time()
        await nursery.start(reg.run)
        await trio.sleep(30)
        gaps = [round(b - a, 3) for a, b in itertools.pairwise(attempts)]
        assert attempts[0] == start
        assert gaps[:6] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
        assert reg.registrations == 0 and reg.failures == len(attempts)
        assert reg.last_error is not None and "Connection refused" in reg.last_error
        nursery.cancel_scope.cancel()


async def test_a_restarted_name_server_is_registered_with_again_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with trio.open_nursery() as nursery:
        servers = NameServers(nursery)
        servers.start(A)
        reg = registrar(servers, A)
        await nursery.start(reg.run)
        await trio.sleep(40)  # registered at 0 and 30
        await servers.stop(A)
        await trio.sleep(3)
        servers.start(A)  # empty: it knows no broker
        restarted = trio.current_time()
        await trio.sleep(5)
        assert servers.registered(A) == [("broker-a", 0)]
        assert servers.times(A)[-1] - restarted <= 4.0  # not at 60 s
        nursery.cancel_scope.cancel()


async def test_a_created_topic_is_announced_oneway_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    topics = [("T", 4)]
    async with trio.open_nursery() as nursery:
        servers = NameServers(nursery)
        servers.start(A)
        servers.start(B)
        reg = NameServerRegistrar(
            servers.client(A, B), lambda: attrs.evolve(MASTER, topics=tuple(topics))
        )
        await nursery.start(reg.run)
        await trio.sleep(10)
        topics.append(("U", 4))
        reg.wake()
        await trio.sleep(0.001)
        for address in (A, B):
            assert [(round(s.at), s.oneway) for s in servers.seen if s.server == address] == [
                (0, False),
                (10, True),
            ]
            route = servers.servers[address].registry.route("U")
            assert route is not None and route.broker_datas[0].broker_name == "broker-a"
        assert reg.announcements == 2
        # The 30 s period goes on from the last full registration.
        await trio.sleep(25)
        assert [round(t) for t in servers.times(A)] == [0, 10, 30]
        nursery.cancel_scope.cancel()


async def test_a_clean_stop_unregisters_from_every_name_server(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with trio.open_nursery() as nursery:
        servers = NameServers(nursery)
        servers.start(A)
        servers.start(B)
        reg = registrar(servers, A, B)
        async with trio.open_nursery() as broker:
            await broker.start(reg.run)
            await trio.sleep(1)
            assert servers.registered(A) == servers.registered(B) == [("broker-a", 0)]
            broker.cancel_scope.cancel()
        await trio.sleep(1)
        assert servers.registered(A) == servers.registered(B) == []
        for address in (A, B):
            assert servers.times(address, RequestCode.UNREGISTER_BROKER) != []
        nursery.cancel_scope.cancel()


async def test_a_slave_takes_its_masters_addresses_from_the_answer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    answers: list[RegisterBrokerResponse] = []
    async with trio.open_nursery() as nursery:
        servers = NameServers(nursery)
        servers.start(A)
        servers.start(B)
        slave = registrar(servers, A, B, registration=SLAVE, on_answer=answers.append)
        await nursery.start(slave.run)
        await trio.sleep(1)
        assert answers[-1].master_address is None  # no master yet
        # The master registers with B only: B's answer names it (the one that tells most).
        master = registrar(servers, B)
        await nursery.start(master.run)
        await trio.sleep(31)
        last = answers[-1]
        assert last.master_address == "10.0.0.1:10911"
        assert last.master_ha_address == "10.0.0.1:10912"
        assert slave.last_answer == last
        nursery.cancel_scope.cancel()


def test_namesrv_addr_takes_semicolons_as_rocketmq_and_commas() -> None:
    for text in ("ns-a:9876;ns-b:9877", "ns-a:9876,ns-b:9877", "ns-a:9876; ns-b:9877;"):
        config = BrokerConfig(namesrv_addr=text)
        assert config.namesrv_addresses == [("ns-a", 9876), ("ns-b", 9877)]
    conf = apply_properties({"namesrvAddr": "ns-a:9876;ns-b:9877"})  # broker.conf
    assert conf.namesrv_addresses == [("ns-a", 9876), ("ns-b", 9877)]
    for bad in ("ns-a:9876;;ns-b:9877", ";", "ns-a:9876;nope"):
        with pytest.raises(ConfigError, match=r"empty address|HOST:PORT"):
            BrokerConfig(namesrv_addr=bad)
