"""Who may speak on a DLedger peer port, over real loopback TCP: three in-process nodes on
127.0.0.1-3 (plain TCP, identity = the ``--peers`` host) or with mutual TLS (identity = the
member id in the certificate), and an attacker that forges HELLO, VOTE and APPEND frames.
None of it changes what the members see: same leader, same term, puts go on."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
import trustme

from hanet.boot import TlsConfig, open_tls_stream
from hanet.dledger import (
    AppendRequest,
    AppendStatus,
    DLedgerNode,
    Envelope,
    Hello,
    LogEntry,
    NodeConfig,
    RaftConfig,
    VoteRequest,
    encode_envelope,
)
from hanet.errors import ConfigError
from hanet.store import Message
from hanet.testing import cli_flags

IDS = ("n0", "n1", "n2")
HOSTS = {i: f"127.0.0.{k + 1}" for k, i in enumerate(IDS)}
RAFT = RaftConfig(election_timeout=1.0, heartbeat_interval=0.05, retransmit_timeout=0.2)
HUGE = 2**63 - 1


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def frame(message: Envelope | Hello) -> bytes:
    body = bytes(encode_envelope(message))
    return len(body).to_bytes(4, "big") + body


async def closed_by_peer(stream: trio.abc.Stream) -> bool:
    with trio.fail_after(5):
        try:
            while await stream.receive_some(65536):
                pass
        except trio.BrokenResourceError:
            pass
    return True


class Group:
    def __init__(
        self,
        root: Path,
        tls: dict[str, TlsConfig] | None = None,
        hosts: dict[str, str] = HOSTS,
        **extra: float,
    ) -> None:
        self.root = root
        self.tls = tls
        self.extra = extra
        self.peers = {i: f"{hosts[i]}:{free_port(hosts[i])}" for i in IDS}
        self.nodes: dict[str, DLedgerNode] = {}

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Group]:
        async with trio.open_nursery() as nursery:
            for node_id in IDS:
                config = NodeConfig(
                    group="g",
                    node_id=node_id,
                    peers=self.peers,
                    store_dir=self.root / node_id,
                    broker_addresses={node_id: f"{HOSTS[node_id]}:10911"},
                    raft=RAFT,
                    data_file_size=64 * 1024,
                    index_file_size=32 * 256,
                    mapped_file_size=64 * 1024,
                    tls=self.tls[node_id] if self.tls else None,
                    **self.extra,  # type: ignore[arg-type]
                )
                node = DLedgerNode(config)
                await nursery.start(node.run)
                self.nodes[node_id] = node
            yield self
            nursery.cancel_scope.cancel()

    async def leader(self) -> DLedgerNode:
        with trio.fail_after(10):
            while True:
                leaders = [n for n in self.nodes.values() if n.is_leader]
                if len(leaders) == 1 and all(
                    n.status().leader == leaders[0].config.node_id for n in self.nodes.values()
                ):
                    return leaders[0]
                await trio.sleep(0.02)

    def seen(self) -> list[tuple[object, ...]]:
        return [
            (n.status().term, n.status().leader, dict(n.broker_addresses))
            for n in self.nodes.values()
        ]

    def address(self, node_id: str) -> tuple[str, int]:
        host, _, port = self.peers[node_id].rpartition(":")
        return host, int(port)


async def test_plain_tcp_binds_a_connection_to_the_member_of_its_address(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    group = Group(tmp_path)
    async with group.running():
        leader = await group.leader()
        followers = [i for i in IDS if i != leader.config.node_id]
        target = followers[0]
        other = followers[1]
        assert (await leader.put(Message("T", b"before"))).status is AppendStatus.SUCCESS
        before = group.seen()
        host, port = group.address(target)

        # a stranger's address: closed at accept, HELLO or not
        stranger = await trio.open_tcp_stream(host, port, local_address="127.0.0.9")
        await stranger.send_all(frame(Hello(other, target, "127.0.0.9:6666")))
        assert await closed_by_peer(stranger)

        # from the other follower's host, claiming to be the leader: closed
        spoof = await trio.open_tcp_stream(host, port, local_address=HOSTS[other])
        forged = AppendRequest(HUGE, leader.config.node_id, 0, 0, (), 0)
        await spoof.send_all(frame(Envelope(leader.config.node_id, target, forged)))
        assert await closed_by_peer(spoof)

        # as the other follower itself: a VOTE of term 2^63-1, then a HELLO redirecting
        # producers; the core refuses the vote and the connection goes
        vote = await trio.open_tcp_stream(host, port, local_address=HOSTS[other])
        await vote.send_all(frame(Envelope(other, target, VoteRequest(HUGE, other, HUGE, HUGE))))
        await vote.send_all(frame(Hello(other, target, "127.0.0.9:6666")))
        assert await closed_by_peer(vote)

        # an APPEND overwriting a committed entry, in the leader's name from its host
        with trio.fail_after(5):
            while group.nodes[target].status().commit_index < leader.status().commit_index:  # noqa: ASYNC110
                await trio.sleep(0.01)
        commit = group.nodes[target].status().commit_index
        assert commit >= 2  # the no-op of term 1 and "before"
        term = group.nodes[target].status().term
        overwrite = AppendRequest(
            term + 1,
            leader.config.node_id,
            commit - 1,
            term,
            (LogEntry(commit, term + 1, b"", noop=True),),
            commit,
        )
        bad = await trio.open_tcp_stream(host, port, local_address=HOSTS[leader.config.node_id])
        await bad.send_all(frame(Envelope(leader.config.node_id, target, overwrite)))
        assert await closed_by_peer(bad)

        await trio.sleep(RAFT.election_timeout * 2)
        assert group.seen() == before
        assert (await leader.put(Message("T", b"after"))).status is AppendStatus.SUCCESS
        assert leader.is_leader

    messages = [r.getMessage() for r in caplog.records]
    assert any("refused a peer connection from 127.0.0.9" in m for m in messages)
    assert any("claims to be" in m for m in messages)
    assert any(f"refused VoteRequest from {other}" in m and "beyond" in m for m in messages)
    assert any("refused AppendRequest" in m and "overwrite the committed" in m for m in messages)
    assert [r.levelname for r in caplog.records if "refused VoteRequest" in r.getMessage()] == [
        "ERROR"
    ]


async def test_the_peer_port_closes_idle_connections_but_never_a_member_s(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    group = Group(tmp_path, idle_timeout=1.0, keepalive_interval=0.2)
    async with group.running():
        leader = await group.leader()
        follower = next(i for i in IDS if i != leader.config.node_id)
        host, port = group.address(follower)
        silent = await trio.open_tcp_stream(host, port, local_address=HOSTS[leader.config.node_id])
        began = trio.current_time()
        assert await closed_by_peer(silent)
        assert 1.0 <= trio.current_time() - began < 2.5
        await trio.sleep(1.5)  # members' links (even follower to follower) stay up
        assert all(p.connected for n in group.nodes.values() for p in n.status().peers)
        assert (await leader.put(Message("T", b"still"))).status is AppendStatus.SUCCESS
    disconnects = [r for r in caplog.records if "disconnected" in r.getMessage()]
    assert disconnects == []
    assert sum("idle for 1 s" in r.getMessage() for r in caplog.records) == 1


async def test_members_listed_at_a_wildcard_address_connect_from_anywhere(
    tmp_path: Path,
) -> None:
    group = Group(tmp_path, hosts=dict.fromkeys(IDS, "0.0.0.0"))
    async with group.running():
        leader = await group.leader()
        assert (await leader.put(Message("T", b"x"))).status is AppendStatus.SUCCESS


class Pki:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.ca = trustme.CA()
        self.ca_file = tmp_path / "ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_file))

    def member(self, name: str, ca: trustme.CA | None = None) -> TlsConfig:
        leaf = (ca or self.ca).issue_cert(name, common_name=name)
        prefix = "outsider-" if ca is not None else ""
        cert, key = self.tmp / f"{prefix}{name}.crt", self.tmp / f"{prefix}{name}.key"
        leaf.cert_chain_pems[0].write_to_path(str(cert))
        leaf.private_key_pem.write_to_path(str(key))
        return TlsConfig(cert=cert, key=key, ca=self.ca_file)


async def test_mutual_tls_binds_a_connection_to_the_member_its_certificate_names(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pki = Pki(tmp_path)
    group = Group(tmp_path, {i: pki.member(i) for i in IDS})
    intruder = pki.member("intruder").client_context()
    outsider_ca = trustme.CA()
    outsider = pki.member("n1", ca=outsider_ca).client_context()
    async with group.running():
        leader = await group.leader()
        assert (await leader.put(Message("T", b"over TLS"))).status is AppendStatus.SUCCESS
        target = next(i for i in IDS if i != leader.config.node_id)
        before = group.seen()
        host, port = group.address(target)

        # a certificate of the CA that names no member: closed once the handshake is done
        stream = await open_tls_stream(host, port, intruder, server_hostname=target)
        await stream.send_all(frame(Hello("n1", target, "127.0.0.9:6666")))
        assert await closed_by_peer(stream)
        # a certificate naming a member, from another CA: refused in the handshake (with TLS
        # 1.3 the client learns it at its first read)
        try:
            refused = await open_tls_stream(host, port, outsider, server_hostname=target)
            assert await closed_by_peer(refused)
        except (ConnectionError, trio.BrokenResourceError):
            pass
        # plain TCP to the TLS port
        plain = await trio.open_tcp_stream(host, port)
        await plain.send_all(frame(Hello("n1", target, "127.0.0.9:6666")))
        assert await closed_by_peer(plain)

        await trio.sleep(RAFT.election_timeout * 2)
        assert group.seen() == before
        assert (await leader.put(Message("T", b"after"))).status is AppendStatus.SUCCESS
    assert any(
        "its certificate names no member (intruder)" in r.getMessage() for r in caplog.records
    )


def test_peer_tls_is_mutual(tmp_path: Path) -> None:
    pki = Pki(tmp_path)
    full = pki.member("n0")
    with pytest.raises(ConfigError, match="mutual"):
        NodeConfig(
            group="g",
            node_id="n0",
            peers={"n0": "127.0.0.1:1"},
            store_dir=tmp_path,
            tls=TlsConfig(cert=full.cert, key=full.key),
        )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--tls-cert", "{cert}", "--tls-key", "{key}"], "mutual"),
        (["--tls-cert", "{cert}"], "--tls-cert and --tls-key go together"),
        (["--tls-ca", "{missing}"], "TLS file not found"),
        (["--peer-allow", "10.0.0.0/33"], "not a network"),
    ],
)
def test_hanet_dledger_refuses_half_a_tls_setting_in_one_line(
    tmp_path: Path, flags: list[str], message: str
) -> None:
    pki = Pki(tmp_path)
    n0 = pki.member("n0")
    values = {"cert": str(n0.cert), "key": str(n0.key), "missing": str(tmp_path / "nope.pem")}
    node = cli_flags(
        group="g", id="n0", peers="n0=127.0.0.1:0", store=tmp_path / "s", listen="127.0.0.1:0"
    )
    result = subprocess.run(
        [sys.executable, "-m", "hanet", "dledger", *node, *(f.format(**values) for f in flags)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
