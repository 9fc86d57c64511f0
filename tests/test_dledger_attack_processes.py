"""Three ``hanet dledger`` processes on 127.0.0.1-3 (plain TCP) under ``ulimit -n 256``, and
an attacker on loopback: a VOTE of term 2^63-1 sent from a member's host in its name to the
other two, a HELLO from a stranger's address, 300 idle connections to a follower's peer port.
Every attack is logged and refused; no node changes role or term, none exits, and SIGTERM
still stops each cleanly; with mutual TLS (``--tls-cert/--tls-key/--tls-ca``) a certificate of
the CA that names no member is refused. (Checked through the nodes' logs and exit codes
only: the broker port's protocol is not needed.)"""

from __future__ import annotations

import re
import resource
import signal
import socket
from pathlib import Path

import pytest
import trio
import trustme

from hanet.boot import TlsConfig, open_tls_stream
from hanet.dledger import Envelope, Hello, VoteRequest, encode_envelope
from hanet.testing import HanetProcesses

pytestmark = pytest.mark.slow

IDS = ("n0", "n1", "n2")
HOSTS = {i: f"127.0.0.{k + 1}" for k, i in enumerate(IDS)}
ELECTION = 1.0
HUGE = 2**63 - 1
SMALL = ["--data-file-size", "1M", "--index-file-size", "64K", "--mapped-file-size", "1M"]


def _limit_descriptors() -> None:  # in the child, before exec
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def _frame(message: Envelope | Hello) -> bytes:
    body = bytes(encode_envelope(message))
    return len(body).to_bytes(4, "big") + body


async def _closed(stream: trio.SocketStream) -> bool:
    """Whether the node closed ``stream`` (EOF, or a reset: it had unread bytes)."""
    with trio.fail_after(5):
        try:
            while await stream.receive_some(1024):
                pass
        except trio.BrokenResourceError:
            pass
    await stream.aclose()
    return True


_ROLE = re.compile(r"dledger (n\d): (LEADER|FOLLOWER|CANDIDATE) in term (\d+)")


def _roles(text: str) -> list[tuple[str, str, int]]:
    return [(m[1], m[2], int(m[3])) for m in _ROLE.finditer(text)]


async def _start(
    processes: HanetProcesses, extra: dict[str, list[str]] | None = None
) -> tuple[dict[str, str], dict[str, Path], str, dict[str, list[tuple[str, str, int]]]]:
    """Start the three nodes; wait for one leader followed by all. Returns the peer addresses,
    the logs, the leader and the role changes so far."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1024:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    peer = {i: f"{HOSTS[i]}:{_free_port(HOSTS[i])}" for i in IDS}
    peers = ",".join(f"{i}={a}" for i, a in peer.items())
    for node_id in IDS:
        group = ("--group", "g", "--id", node_id, "--peers", peers)
        node = ("--store", str(processes.root / node_id), "--listen", f"{HOSTS[node_id]}:0")
        timeout = ("--election-timeout", str(ELECTION), *SMALL, *(extra or {}).get(node_id, []))
        argv = ("dledger", *group, *node, *timeout)
        processes.add(node_id, *argv, preexec_fn=_limit_descriptors).spawn()
    for node_id in IDS:
        assert (await processes[node_id].wait_ready())["id"] == node_id
    logs = {i: processes[i].log for i in IDS}
    # a leader, and every node following it
    with trio.fail_after(20):
        while True:
            roles = {i: _roles(logs[i].read_text()) for i in IDS}
            leaders = {(r[0], r[2]) for rs in roles.values() for r in rs if r[1] == "LEADER"}
            if len(leaders) == 1:
                break
            await trio.sleep(0.05)
    ((leader, term),) = leaders
    await trio.sleep(ELECTION * 2)
    before = {i: _roles(logs[i].read_text()) for i in IDS}
    assert {i: rs[-1] for i, rs in before.items()} == {
        i: (i, "LEADER" if i == leader else "FOLLOWER", term) for i in IDS
    }
    return peer, logs, leader, before


async def _stop(processes: HanetProcesses) -> None:
    for node_id in IDS:
        processes[node_id].send_signal(signal.SIGTERM)
    for node_id in IDS:
        assert await processes[node_id].wait() == 0, processes[node_id].text()


async def test_forged_votes_hellos_and_idle_connections_change_nothing(
    processes: HanetProcesses,
) -> None:
    peer, logs, leader, before = await _start(processes)
    follower = next(i for i in IDS if i != leader)
    sender = next(i for i in IDS if i not in (leader, follower))

    # a VOTE of term 2^63-1 in the name of `sender`, from its host, to the other two
    for target in (leader, follower):
        host, _, port = peer[target].rpartition(":")
        stream = await trio.open_tcp_stream(host, int(port), local_address=HOSTS[sender])
        vote = VoteRequest(HUGE, sender, HUGE, HUGE)
        await stream.send_all(_frame(Envelope(sender, target, vote)))
        await stream.send_all(_frame(Hello(sender, target, "127.0.0.9:6666")))
        assert await _closed(stream)
    # a HELLO from a stranger's address
    host, _, port = peer[follower].rpartition(":")
    stranger = await trio.open_tcp_stream(host, int(port), local_address="127.0.0.9")
    await stranger.send_all(_frame(Hello(leader, follower, "127.0.0.9:6666")))
    assert await _closed(stranger)
    # 300 idle connections from the sender's host to the follower's peer port
    idle = [
        await trio.open_tcp_stream(host, int(port), local_address=HOSTS[sender]) for _ in range(300)
    ]
    await trio.sleep(ELECTION * 4)
    for stream in idle:
        stream.socket.close()
    await trio.sleep(ELECTION * 2)

    after = {i: _roles(logs[i].read_text()) for i in IDS}
    assert after == before, after
    assert processes.running
    texts = {i: logs[i].read_text() for i in IDS}
    for target in (leader, follower):
        assert re.search(
            rf"ERROR .*{target}: refused VoteRequest from {sender}: term {HUGE} is more than",
            texts[target],
        ), texts[target]
    assert "refused a peer connection from 127.0.0.9" in texts[follower]
    assert "dledger peer port: refusing new connections" in texts[follower]
    assert "Too many open files" not in "".join(texts.values())
    await _stop(processes)


async def test_mutual_tls_members_elect_and_a_certificate_naming_no_member_is_refused(
    processes: HanetProcesses, tmp_path: Path
) -> None:
    ca = trustme.CA()
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))

    def issue(name: str) -> tuple[Path, Path]:
        leaf = ca.issue_cert(name, common_name=name)
        cert, key = tmp_path / f"{name}.crt", tmp_path / f"{name}.key"
        leaf.cert_chain_pems[0].write_to_path(str(cert))
        leaf.private_key_pem.write_to_path(str(key))
        return cert, key

    extra = {}
    for node_id in IDS:
        cert, key = issue(node_id)
        extra[node_id] = ["--tls-cert", str(cert), "--tls-key", str(key), "--tls-ca", str(ca_file)]
    cert, key = issue("intruder")
    intruder = TlsConfig(cert=cert, key=key, ca=ca_file).client_context()
    peer, logs, leader, before = await _start(processes, extra)
    follower = next(i for i in IDS if i != leader)
    host, _, port = peer[follower].rpartition(":")
    stream = await open_tls_stream(host, int(port), intruder, server_hostname=follower)
    vote = VoteRequest(HUGE, leader, HUGE, HUGE)
    await stream.send_all(_frame(Envelope(leader, follower, vote)))
    with trio.fail_after(5):
        try:
            while await stream.receive_some(1024):
                pass
        except trio.BrokenResourceError:
            pass
    plain = await trio.open_tcp_stream(host, int(port))
    await plain.send_all(_frame(Hello(leader, follower, "127.0.0.9:6666")))
    assert await _closed(plain)
    await trio.sleep(ELECTION * 2)
    assert {i: _roles(logs[i].read_text()) for i in IDS} == before
    text = logs[follower].read_text()
    assert "its certificate names no member (intruder)" in text, text
    assert "TLS handshake failed" in text
    await _stop(processes)
