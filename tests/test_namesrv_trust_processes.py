"""Attacks on a real ``hanet namesrv`` with a real ``hanet master`` registered (issue 20,
item 4):

- plain TCP: from another host (127.0.0.2) a registration of the master's key at the master's
  own broker address with a decoy HA port (what would send slaves to the attacker), one at the
  attacker's address, and an unregistration: refused or ignored; a slave is still told the
  real master;
- mutual TLS with ``--tls-broker-pattern``: a producer's certificate may look routes up but not
  register; another broker's certificate cannot take the master's registration over;
- 10,000 junk registrations from one host: 64 are kept, the rest refused, and a broker
  registering afterwards is taken.

Command: ``.venv/bin/pytest -q tests/test_namesrv_trust_processes.py``.
"""

from __future__ import annotations

import ssl
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trustme

from hanet.boot import TlsConfig, open_tls_stream
from hanet.client import NameServerClient
from hanet.protocol import (
    BrokerRegistration,
    GetRouteInfoRequestHeader,
    RegisterBrokerResponse,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    decode_command,
    encode_command,
)
from hanet.testing import HanetProcesses, split_address

pytestmark = pytest.mark.slow


class Raw:
    """A remoting connection made by hand (from any local address, over TLS or not)."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.buffer = bytearray()

    async def send(self, request: RemotingCommand) -> None:
        await self.stream.send_all(encode_command(request))

    async def receive(self) -> RemotingCommand:
        while True:
            if len(self.buffer) >= 4:
                (length,) = struct.unpack_from(">I", self.buffer)
                if len(self.buffer) >= 4 + length:
                    frame = bytes(self.buffer[4 : 4 + length])
                    del self.buffer[: 4 + length]
                    return decode_command(frame)
            data = await self.stream.receive_some(65536)
            assert data, "the name server closed the connection"
            self.buffer += data

    async def invoke(self, request: RemotingCommand) -> RemotingCommand:
        await self.send(request)
        return await self.receive()


@asynccontextmanager
async def raw(
    address: tuple[str, int],
    *,
    local: str | None = None,
    tls: ssl.SSLContext | None = None,
) -> AsyncIterator[Raw]:
    stream: trio.abc.Stream
    if tls is not None:
        stream = await open_tls_stream(*address, tls, local_address=local)
    else:
        stream = await trio.open_tcp_stream(*address, local_address=local)
    async with stream:
        yield Raw(stream)


def _master(ready: dict[str, Any]) -> BrokerRegistration:
    """What the running master registers."""
    return BrokerRegistration(
        "DefaultCluster", "broker-a", 0, "ASYNC_MASTER", ready["broker"], ready["ha"]
    )


async def _registered(namesrv: tuple[str, int], tls: ssl.SSLContext | None = None) -> list[Any]:
    client = NameServerClient([namesrv], tls=tls)
    with trio.fail_after(15):
        while True:
            members = (await client.cluster()).members()
            if members:
                return members
            await trio.sleep(0.1)


MASTER_FLAGS = ("--listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0", "--mapped-file-size", "1M")


async def start_namesrv(p: HanetProcesses, *extra: str) -> dict[str, Any]:
    return (await p.start("namesrv", "namesrv", "--listen", "127.0.0.1:0", *extra)).ready


async def start_master(p: HanetProcesses, namesrv: str, *extra: str) -> dict[str, Any]:
    """``hanet master`` broker-a on ``<root>/m`` registered with ``namesrv``: its ready data."""
    argv = ("--store", str(p.root / "m"), *MASTER_FLAGS, "--namesrv", namesrv)
    return (await p.start("master", "master", *argv, "--broker-name", "broker-a", *extra)).ready


async def test_a_route_takeover_over_plain_tcp_is_refused(tmp_path: Path) -> None:
    async with HanetProcesses(tmp_path) as p:
        ns = await start_namesrv(p)
        namesrv = split_address(ns["namesrv"])
        master = await start_master(p, ns["namesrv"])
        real = _master(master)
        assert await _registered(namesrv) == [
            ("DefaultCluster", "broker-a", 0, real.broker_address)
        ]
        decoy = attrs.evolve(real, ha_address="127.0.0.2:1")
        elsewhere = attrs.evolve(real, broker_address="127.0.0.2:2", ha_address="127.0.0.2:1")
        async with raw(namesrv, local="127.0.0.2") as attacker:
            # an unregistration first (it used to free the key for anyone): ignored
            await attacker.invoke(real.unregister_request())
            answer = await attacker.invoke(decoy.request())
            assert answer.code == ResponseCode.NO_PERMISSION
            assert "held by ip:127.0.0.1" in (answer.remark or "")
            answer = await attacker.invoke(elsewhere.request())
            assert answer.code == ResponseCode.NO_PERMISSION
            assert f"held by {real.broker_address}" in (answer.remark or "")
        # the route and a slave's answer still name the real master
        assert await _registered(namesrv) == [
            ("DefaultCluster", "broker-a", 0, real.broker_address)
        ]
        slave = BrokerRegistration("DefaultCluster", "broker-a", 1, "SLAVE", "127.0.0.3:3")
        async with raw(namesrv, local="127.0.0.3") as newcomer:
            answer = await newcomer.invoke(slave.request())
        assert answer.code == ResponseCode.SUCCESS
        told = RegisterBrokerResponse.from_command(answer)
        assert (told.master_address, told.master_ha_address) == (
            real.broker_address,
            real.ha_address,
        )
        log = p["namesrv"].text()
        assert "registration of DefaultCluster/broker-a/0 at" in log and "refused" in log
        assert "unregistration of DefaultCluster/broker-a/0 at" in log
        assert p.running


async def test_a_producers_certificate_cannot_register_or_take_a_route_over(
    tmp_path: Path,
) -> None:
    ca = trustme.CA()
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))

    def issue(name: str) -> tuple[Path, Path]:
        leaf = ca.issue_cert("127.0.0.1", f"{name}.example", common_name=name)
        cert, key = tmp_path / f"{name}.crt", tmp_path / f"{name}.key"
        leaf.private_key_and_cert_chain_pem.write_to_path(str(cert))
        leaf.private_key_pem.write_to_path(str(key))
        return cert, key

    def flags(name: str) -> list[str]:
        cert, key = issue(name)
        return ["--tls-cert", str(cert), "--tls-key", str(key), "--tls-ca", str(ca_file)]

    def context(name: str) -> ssl.SSLContext:
        cert, key = issue(name)
        return TlsConfig(cert=cert, key=key, ca=ca_file).client_context()

    async with HanetProcesses(tmp_path) as p:
        pattern = ("--tls-broker-pattern", "broker-[a-z]+")
        ns = await start_namesrv(p, *flags("namesrv"), *pattern)
        namesrv = split_address(ns["namesrv"])
        master = await start_master(p, ns["namesrv"], *flags("broker-a"))
        real = _master(master)
        producer = context("producer-1")
        assert await _registered(namesrv, producer) == [
            ("DefaultCluster", "broker-a", 0, real.broker_address)
        ]
        decoy = attrs.evolve(real, ha_address="127.0.0.1:1")
        async with raw(namesrv, tls=producer) as attacker:
            answer = await attacker.invoke(decoy.request())
            assert answer.code == ResponseCode.NO_PERMISSION
            assert "names no broker" in (answer.remark or "")
            answer = await attacker.invoke(real.unregister_request())
            assert answer.code == ResponseCode.NO_PERMISSION
            # it still looks routes up
            lookup = RemotingCommand.request(
                RequestCode.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader("TBW102").to_fields()
            )
            answer = await attacker.invoke(lookup)
            assert answer.code in (ResponseCode.SUCCESS, ResponseCode.TOPIC_NOT_EXIST)
        async with raw(namesrv, tls=context("broker-b")) as other_broker:
            answer = await other_broker.invoke(decoy.request())
            assert answer.code == ResponseCode.NO_PERMISSION
            assert "held by cert:broker-a" in (answer.remark or "")
        assert await _registered(namesrv, producer) == [
            ("DefaultCluster", "broker-a", 0, real.broker_address)
        ]
        async with raw(namesrv, tls=producer) as newcomer:
            slave = BrokerRegistration("DefaultCluster", "broker-a", 1, "SLAVE", "127.0.0.1:3")
            assert (await newcomer.invoke(slave.request())).code == ResponseCode.NO_PERMISSION
        assert p.running


async def test_junk_registrations_from_one_host_leave_room_for_brokers(tmp_path: Path) -> None:
    async with HanetProcesses(tmp_path) as p:
        ns = await start_namesrv(p)
        namesrv = split_address(ns["namesrv"])
        count = 10_000
        codes: list[int] = []
        async with raw(namesrv, local="127.0.0.2") as attacker:

            async def send_all() -> None:
                for i in range(count):
                    junk = BrokerRegistration(
                        "Junk", f"junk-{i}", 0, "ASYNC_MASTER", f"127.0.0.2:{i + 1}"
                    )
                    await attacker.send(junk.request())

            async with trio.open_nursery() as nursery:
                nursery.start_soon(send_all)
                with trio.fail_after(60):
                    for _ in range(count):
                        codes.append((await attacker.receive()).code)
            assert codes.count(ResponseCode.SUCCESS) == 64
            assert codes.count(ResponseCode.SYSTEM_ERROR) == count - 64
            master = await start_master(p, ns["namesrv"])
            with trio.fail_after(15):
                while True:
                    members = (await NameServerClient([namesrv]).cluster()).members()
                    if ("DefaultCluster", "broker-a", 0, master["broker"]) in members:
                        break
                    await trio.sleep(0.1)
            assert len(members) == 65
        assert p.running
