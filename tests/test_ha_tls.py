"""Brokers over TLS and mutual TLS (trustme certificates): who may replicate, put and ack."""

from __future__ import annotations

import datetime
import json
import signal
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import broker_support
import pytest
import trio
import trustme
from broker_support import running

from hanet.boot import TlsConfig, open_tls_stream
from hanet.client import (
    BrokerClient,
    BrokerConnectionError,
    NameServerClient,
    PutStatus,
    RemotingConnectionError,
)
from hanet.ha import BrokerConfig, BrokerRole
from hanet.namesrv import NameServer
from hanet.store import compare_commit_logs
from hanet.testing import HanetProcesses, wait_until


@attrs.frozen
class Pki:
    """A CA and PEM files of certificates it issued, in ``root``."""

    root: Path
    ca: trustme.CA
    ca_file: Path

    @classmethod
    def create(cls, root: Path) -> Pki:
        ca = trustme.CA()
        ca_file = root / "ca.pem"
        ca.cert_pem.write_to_path(str(ca_file))
        return cls(root, ca, ca_file)

    def issue(
        self, name: str, *hosts: str, ca: trustme.CA | None = None, **kwargs: Any
    ) -> tuple[Path, Path]:
        leaf = (ca or self.ca).issue_cert(
            *(hosts or (f"{name}.example",)), common_name=name, **kwargs
        )
        cert, key = self.root / f"{name}.crt", self.root / f"{name}.key"
        leaf.private_key_and_cert_chain_pem.write_to_path(str(cert))
        leaf.private_key_pem.write_to_path(str(key))
        return cert, key

    def tls(self, name: str, *hosts: str, **kwargs: Any) -> dict[str, Path]:
        cert, key = self.issue(name, *hosts, **kwargs)
        return {"tls_cert": cert, "tls_key": key, "tls_ca": self.ca_file}

    def client(self, name: str, **kwargs: Any) -> ssl.SSLContext:
        cert, key = self.issue(name, **kwargs)
        return TlsConfig(cert=cert, key=key, ca=self.ca_file).client_context()


def config(root: Path, **changes: Any) -> BrokerConfig:
    fast = broker_support.config(
        root, ha_send_heartbeat_interval=0.2, reconnect_interval=0.1, slave_timeout=1.0
    )
    return attrs.evolve(fast, **changes)


def master_config(tmp_path: Path, pki: Pki, **changes: Any) -> BrokerConfig:
    changes.setdefault("broker_role", BrokerRole.SYNC_MASTER)
    return config(tmp_path / "m", **pki.tls("master", "127.0.0.1"), **changes)


async def test_slave_with_a_certificate_replicates_over_mutual_tls(tmp_path: Path) -> None:
    pki = Pki.create(tmp_path)
    async with running(master_config(tmp_path, pki)) as (master, m_addr):
        assert m_addr.ha is not None and m_addr.broker is not None
        slave_cfg = config(
            tmp_path / "s",
            broker_role=BrokerRole.SLAVE,
            ha_master_address=f"127.0.0.1:{m_addr.ha[1]}",
            **pki.tls("replica-1"),
        )
        async with running(slave_cfg) as (slave, _):
            client_tls = pki.client("producer")
            async with BrokerClient.connect(*m_addr.broker, tls=client_tls) as client:
                await wait_until(
                    lambda: master.master is not None and master.master.status().slaves
                )
                replies = [await client.put("T", b"secret %d" % i) for i in range(20)]
                assert {r.status for r in replies} == {PutStatus.PUT_OK}
                (seen,) = (await client.status()).slaves
                assert seen.identity == "replica-1" and seen.replica
            await wait_until(lambda: slave.store.max_offset == master.store.max_offset)
    assert compare_commit_logs(tmp_path / "m", tmp_path / "s").identical


@pytest.mark.parametrize("who", ["no certificate", "another CA", "expired"])
async def test_a_slave_without_a_valid_certificate_gets_no_byte(
    tmp_path: Path, who: str, caplog: pytest.LogCaptureFixture
) -> None:
    pki = Pki.create(tmp_path)
    if who == "no certificate":
        tls: dict[str, Path] = {"tls_ca": pki.ca_file}
    elif who == "another CA":
        tls = pki.tls("intruder", ca=trustme.CA())
        tls["tls_ca"] = pki.ca_file  # it trusts our master, but our master does not trust it
    else:
        past = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)
        tls = pki.tls("old", not_before=past, not_after=past + datetime.timedelta(days=1))
    async with running(master_config(tmp_path, pki)) as (master, m_addr):
        assert m_addr.ha is not None and m_addr.broker is not None
        async with BrokerClient.connect(*m_addr.broker, tls=pki.client("producer")) as client:
            assert (await client.put("T", b"secret")).status is PutStatus.SLAVE_NOT_AVAILABLE
        slave_cfg = config(
            tmp_path / "s",
            broker_role=BrokerRole.SLAVE,
            ha_master_address=f"127.0.0.1:{m_addr.ha[1]}",
            **tls,
        )
        async with running(slave_cfg) as (slave, _):
            await trio.sleep(1.0)  # a few reconnect attempts
            assert master.master is not None and master.master.status().slaves == ()
            assert slave.store.max_offset == 0
            assert slave.slave is not None
            reason = slave.slave.status().last_close_reason or ""
            assert "SSL" in reason or "TLS" in reason, reason
    refused = [r.getMessage() for r in caplog.records if "HA port: refused" in r.getMessage()]
    assert refused and all("TLS handshake failed" in line for line in refused)


async def test_a_client_without_a_certificate_cannot_put(tmp_path: Path) -> None:
    pki = Pki.create(tmp_path)
    async with running(master_config(tmp_path, pki, broker_role=BrokerRole.ASYNC_MASTER)) as (
        master,
        m_addr,
    ):
        assert m_addr.broker is not None
        anonymous = TlsConfig(ca=pki.ca_file).client_context()
        with pytest.raises(BrokerConnectionError, match="certificate"):
            async with BrokerClient.connect(*m_addr.broker, tls=anonymous) as client:
                await client.put("T", b"x")
        with pytest.raises(BrokerConnectionError):
            async with BrokerClient.connect(*m_addr.broker) as client:  # plain TCP
                await client.put("T", b"x")
        assert master.store.max_offset == 0


async def fake_slave(stream: trio.abc.Stream) -> None:
    """Reads the transfers, stores nothing, acks everything: the attack on SYNC replication."""
    await stream.send_all((0).to_bytes(8, "big", signed=True))
    buffer = bytearray()
    while chunk := await stream.receive_some(65536):
        buffer += chunk
        while len(buffer) >= 12:
            offset = int.from_bytes(buffer[:8], "big", signed=True)
            size = int.from_bytes(buffer[8:12], "big")
            if len(buffer) < 12 + size:
                break
            del buffer[: 12 + size]
            await stream.send_all((offset + size).to_bytes(8, "big", signed=True))


async def test_a_fake_acker_cannot_obtain_put_ok(tmp_path: Path) -> None:
    pki = Pki.create(tmp_path)
    cfg = master_config(tmp_path, pki, tls_replica_pattern=r"replica-\d+")
    async with running(cfg) as (master, m_addr):
        assert m_addr.ha is not None and m_addr.broker is not None
        async with trio.open_nursery() as nursery:
            # Plain TCP: refused at the handshake. A certificate of the CA that does not name a
            # replica: served, but its acks do not count.
            plain = await trio.open_tcp_stream(*m_addr.ha)
            nursery.start_soon(fake_slave, plain)
            ssl_stream = await open_tls_stream(*m_addr.ha, pki.client("not-a-replica"))
            nursery.start_soon(fake_slave, ssl_stream)
            await wait_until(lambda: master.master is not None and master.master.status().slaves)
            async with BrokerClient.connect(*m_addr.broker, tls=pki.client("producer")) as c:
                statuses = {(await c.put("T", b"m%d" % i)).status for i in range(10)}
                assert statuses == {PutStatus.SLAVE_NOT_AVAILABLE}
                (seen,) = (await c.status()).slaves
                assert seen.identity == "not-a-replica" and not seen.replica
            nursery.cancel_scope.cancel()


def _hanet(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hanet", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_master_slave_and_producer_processes_over_tls(tmp_path: Path) -> None:
    pki = Pki.create(tmp_path)
    cert, key = pki.issue("master", "127.0.0.1")
    s_cert, s_key = pki.issue("replica-1")
    p_cert, p_key = pki.issue("producer")
    ca = str(pki.ca_file)
    master_tls = ["--tls-cert", str(cert), "--tls-key", str(key), "--tls-ca", ca]
    slave_tls = ["--tls-cert", str(s_cert), "--tls-key", str(s_key), "--tls-ca", ca]
    producer_tls = ["--tls-ca", ca, "--tls-cert", str(p_cert), "--tls-key", str(p_key)]
    files = ["--mapped-file-size", "64K"]
    with HanetProcesses(tmp_path, close_signal=signal.SIGTERM) as processes:
        store = ["--store", str(tmp_path / "m"), "--role", "SYNC_MASTER", *files]
        ports = ["--listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0"]
        replicas = ["--tls-replica-pattern", "replica-.*"]
        argv = ["master", *store, *ports, *replicas, *master_tls]
        master = processes.start_blocking("master", *argv).ready
        store = ["--store", str(tmp_path / "s"), "--master-ha", master["ha"], *files]
        argv = ["slave", *store, "--reconnect-interval", "0.2", *slave_tls]
        processes.start_blocking("slave", *argv)
        broker = ["--broker", master["broker"], "--topic", "T"]
        put = _hanet("put", *broker, "--count", "300", "--size", "512", "--json", *producer_tls)
        summary = json.loads(put.stdout)
        # The first puts may come before the slave's first report: SLAVE_NOT_AVAILABLE.
        assert summary["statuses"].get("PUT_OK", 0) > 250, put.stdout + put.stderr
        refused = _hanet("put", *broker, "--body", "x", "--tls-ca", ca)  # no certificate
        assert refused.returncode == 2
        (line,) = refused.stderr.strip().splitlines()
        assert line.startswith("hanet: ") and "certificate" in line
    assert compare_commit_logs(tmp_path / "m", tmp_path / "s").identical


async def test_a_cluster_over_mutual_tls_name_server_included(tmp_path: Path) -> None:
    """A name server with mutual TLS: a master and a slave holding certificates of its CA
    register, the slave finds its master through it and replicates over TLS; a client without
    a certificate cannot look anything up."""
    pki = Pki.create(tmp_path)
    cert, key = pki.issue("namesrv", "127.0.0.1")
    server_tls = TlsConfig(cert=cert, key=key, ca=pki.ca_file).server_context()
    async with trio.open_nursery() as nursery:
        server = NameServer(("127.0.0.1", 0), tls=server_tls)
        host, port = await nursery.start(server.run)
        names = f"{host}:{port}"
        master_cfg = master_config(
            tmp_path, pki, broker_role=BrokerRole.ASYNC_MASTER, namesrv_addr=names
        )
        async with running(master_cfg) as (_, m_addr):
            assert m_addr.broker is not None
            slave_cfg = config(
                tmp_path / "s",
                broker_role=BrokerRole.SLAVE,
                namesrv_addr=names,
                **pki.tls("replica-1"),
            )
            async with running(slave_cfg) as (slave, _):
                async with BrokerClient.connect(*m_addr.broker, tls=pki.client("app")) as c:
                    reply = await c.put("T", b"over tls")
                    assert reply.ok
                end = reply.wrote_offset + reply.wrote_size
                await wait_until(lambda: slave.store.max_offset == end)
                link = slave.status().master
                assert link is not None and link.address == f"127.0.0.1:{m_addr.ha[1]}"  # type: ignore[index]
                cluster = await NameServerClient([(host, port)], tls=pki.client("ops")).cluster()
                assert [m[2] for m in cluster.members()] == [0, 1]  # the master and its slave
                with pytest.raises(RemotingConnectionError):
                    await NameServerClient([(host, port)], tls=None, timeout=2).cluster()
                stranger = pki.client("stranger", ca=trustme.CA())
                with pytest.raises(RemotingConnectionError):
                    await NameServerClient([(host, port)], tls=stranger, timeout=2).cluster()
        nursery.cancel_scope.cancel()
