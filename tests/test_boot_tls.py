"""TLS, mutual TLS and the allow-list of hanet.boot over loopback TCP (trustme certificates)."""

from __future__ import annotations

import datetime
import logging
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
import trustme

from hanet import ChannelInboundHandler, HandlerContext, Server, StreamChannel, serve
from hanet.boot import (
    AllowList,
    TlsConfig,
    TlsHandshakeError,
    open_tls_stream,
    peer_identity,
    secure_stream,
)
from hanet.errors import ConfigError


class Echo(ChannelInboundHandler):
    seen: list[str | None] = []

    def channel_active(self, ctx: HandlerContext) -> None:
        Echo.seen.append(peer_identity(ctx.channel.stream))  # type: ignore[attr-defined]
        ctx.fire_channel_active()

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        ctx.write_and_flush(bytes(msg))


def init(channel: StreamChannel) -> None:
    channel.pipeline.add_last(Echo())


def pem(tmp_path: Path, name: str, blob: trustme.Blob) -> Path:
    path = tmp_path / name
    blob.write_to_path(str(path))
    return path


class Pki:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.ca = trustme.CA()
        self.ca_file = pem(tmp_path, "ca.pem", self.ca.cert_pem)
        server = self.ca.issue_cert("127.0.0.1", "localhost", common_name="broker-1")
        self.server = self.files("server", server)

    def files(self, name: str, leaf: trustme.LeafCert) -> TlsConfig:
        cert = self.tmp / f"{name}.crt"
        leaf.private_key_and_cert_chain_pem.write_to_path(str(cert))
        key = self.tmp / f"{name}.key"
        leaf.private_key_pem.write_to_path(str(key))
        return TlsConfig(cert=cert, key=key, ca=self.ca_file)

    def client(self, name: str, ca: trustme.CA | None = None, **kwargs: Any) -> TlsConfig:
        leaf = (ca or self.ca).issue_cert(f"{name}.example", common_name=name, **kwargs)
        return self.files(name, leaf)


async def attempt(port: int, context: ssl.SSLContext) -> str:
    """How a TLS client fares: refused at the handshake, closed, or answered."""
    try:
        stream = await open_tls_stream("127.0.0.1", port, context)
    except TlsHandshakeError:
        return "handshake refused"
    try:
        reply = await echo_once(stream)
    except trio.BrokenResourceError:
        return "broken"
    return "answered" if reply else "closed"


async def wait_refused(srv: Server, count: int) -> None:
    with trio.fail_after(5):
        while srv.statistics().connections_refused < count:  # noqa: ASYNC110
            await trio.sleep(0.01)


@asynccontextmanager
async def server(
    tls: ssl.SSLContext | None, allow: AllowList | None = None
) -> AsyncIterator[Server]:
    async with trio.open_nursery() as nursery:
        srv: Server = await nursery.start(
            partial(serve, init, 0, host="127.0.0.1", tls=tls, allow=allow, name="test port")
        )
        yield srv
        nursery.cancel_scope.cancel()


async def echo_once(stream: trio.abc.Stream) -> bytes:
    await stream.send_all(b"ping")
    with trio.fail_after(5):
        return bytes(await stream.receive_some(10))


async def test_mutual_tls_accepts_a_client_of_the_ca(tmp_path: Path) -> None:
    pki = Pki(tmp_path)
    Echo.seen.clear()
    async with server(pki.server.server_context()) as srv:
        context = pki.client("replica-1").client_context()
        stream = await open_tls_stream("127.0.0.1", srv.port, context)
        assert await echo_once(stream) == b"ping"
        assert peer_identity(stream) == "broker-1"
        await stream.aclose()
    assert Echo.seen == ["replica-1"]


@pytest.mark.parametrize("who", ["no certificate", "another CA", "expired"])
async def test_refused_clients_reach_no_pipeline(
    tmp_path: Path, who: str, caplog: pytest.LogCaptureFixture
) -> None:
    pki = Pki(tmp_path)
    if who == "no certificate":
        client = TlsConfig(ca=pki.ca_file)
    elif who == "another CA":
        client = pki.client("intruder", ca=trustme.CA())
    else:
        past = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)
        client = pki.client("old", not_before=past, not_after=past + datetime.timedelta(days=1))
    Echo.seen.clear()
    async with server(pki.server.server_context()) as srv:
        # TLS 1.3: the client may finish its side first and learn of the refusal on its
        # first read; either way it never gets an answer.
        assert await attempt(srv.port, client.client_context()) != "answered"
        await wait_refused(srv, 1)
        assert srv.statistics().connections_accepted == 0
    assert Echo.seen == []
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(
        "test port: refused 127.0.0.1:" in w and "TLS handshake failed" in w for w in warnings
    )


async def test_a_client_that_does_not_trust_the_server_says_why(tmp_path: Path) -> None:
    pki = Pki(tmp_path)
    async with server(pki.server.server_context()) as srv:
        stranger = TlsConfig(ca=pem(tmp_path, "other.pem", trustme.CA().cert_pem))
        with pytest.raises(
            TlsHandshakeError, match=r"CERTIFICATE_VERIFY_FAILED|certificate verify"
        ):
            await open_tls_stream("127.0.0.1", srv.port, stranger.client_context())


async def test_plain_tcp_to_a_tls_port_is_refused(tmp_path: Path) -> None:
    pki = Pki(tmp_path)
    async with server(pki.server.server_context()) as srv:
        stream = await trio.open_tcp_stream("127.0.0.1", srv.port)
        await stream.send_all(b"\x00" * 8)  # an HA report, in the clear
        with trio.fail_after(5):
            answer = await stream.receive_some(100)
        assert not answer.startswith(b"\x00")  # an alert or nothing, never an HA frame
        await wait_refused(srv, 1)
        assert srv.statistics().connections_accepted == 0


async def test_allow_list_closes_other_addresses_and_logs_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with server(None, AllowList.parse("10.0.0.0/8, ::1")) as srv:
        for _ in range(3):
            stream = await trio.open_tcp_stream("127.0.0.1", srv.port)
            with trio.fail_after(5):
                assert await stream.receive_some(10) == b""
        await wait_refused(srv, 3)
        assert srv.statistics().connections_accepted == 0
    refused = [r for r in caplog.records if "not in the allow-list" in r.getMessage()]
    assert len(refused) == 1


async def test_allow_list_lets_its_networks_in() -> None:
    async with server(None, AllowList.parse("127.0.0.0/8")) as srv:
        stream = await trio.open_tcp_stream("127.0.0.1", srv.port)
        assert await echo_once(stream) == b"ping"


def test_allow_list_parsing() -> None:
    allow = AllowList.parse("10.1.0.0/16,192.168.1.7,fd00::/8")
    assert allow.allows("10.1.2.3") and allow.allows("192.168.1.7")
    assert allow.allows("::ffff:10.1.0.9")  # IPv4-mapped IPv6
    assert allow.allows("fd00::1") and not allow.allows("10.2.0.1")
    assert not allow.allows("not an address")
    assert AllowList.parse("").allows("8.8.8.8")  # empty: everyone
    with pytest.raises(ConfigError, match="not a network"):
        AllowList.parse("10.0.0.0/33")


def test_tls_config_checks_its_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="go together"):
        TlsConfig(cert=tmp_path / "a")
    with pytest.raises(ConfigError, match="not found"):
        TlsConfig(ca=tmp_path / "missing.pem")
    with pytest.raises(ConfigError, match="needs --tls-cert"):
        TlsConfig().server_context()


async def until_closed(stream: trio.abc.Stream) -> None:
    """Read until the peer closes (EOF or a reset); fails after 5 s."""
    with trio.fail_after(5):
        try:
            while await stream.receive_some():
                pass
        except trio.BrokenResourceError:
            pass


async def test_a_client_handshake_cancelled_from_outside_closes_the_socket(
    tmp_path: Path,
) -> None:
    (listener,) = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listener.socket.getsockname()[1]
    kept: list[BaseException] = []  # keeps the failed call's frames (and its stream) alive
    async with listener, trio.open_nursery() as nursery:

        async def client() -> None:
            try:
                with trio.fail_after(0.2):  # the server never answers the ClientHello
                    await open_tls_stream("127.0.0.1", port, TlsConfig().client_context())
            except trio.TooSlowError as exc:
                kept.append(exc)

        nursery.start_soon(client)
        server = await listener.accept()
        async with server:
            await until_closed(server)
    assert kept


async def test_a_server_handshake_cancelled_from_outside_closes_the_socket(
    tmp_path: Path,
) -> None:
    context = Pki(tmp_path).server.server_context()
    (listener,) = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listener.socket.getsockname()[1]
    kept: list[BaseException] = []
    async with listener, trio.open_nursery() as nursery:

        async def server() -> None:
            stream = await listener.accept()
            try:
                with trio.fail_after(0.2):  # the client never says a word
                    await secure_stream(stream, tls=context, allow=None, what="test port")
            except trio.TooSlowError as exc:
                kept.append(exc)

        nursery.start_soon(server)
        client = await trio.open_tcp_stream("127.0.0.1", port)
        async with client:
            await until_closed(client)
    assert kept
