"""RocketMQ's ACL with real clients as processes: npm ``ali-ons`` (accessKey/secretKey) and the
C++ client (``set_session_credentials``) sign their requests as RocketMQ's AclClientRPCHook
does, against ``hanet namesrv --acl-file`` and ``hanet master --acl-enable`` (the master
registers signing as an admin account). A signed producer and consumer work; a wrong secret
and a missing permission are refused; a consumer signed for group A cannot consume or commit
as group B, and hanet's own client, signed as that consumer, cannot commit group B's offsets
(the attack of issue 20)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from interop_support import alions_command, cpp_command, run_driver
from test_interop_clients import DRIVER_SECONDS, NamesrvCluster, write_topics

from hanet.client import BrokerClient, BrokerRequestError, Credentials, signing
from hanet.protocol import ResponseCode
from hanet.testing import split_address

pytestmark = pytest.mark.slow

BUILDERS = {"alions": alions_command, "cpp": cpp_command}
CLIENTS = sorted(BUILDERS)

ACL = """
# who may do what on the ACL interop cluster
accounts:
  - accessKey: brokerAdmin
    secretKey: admin-secret
    admin: true
  - accessKey: producerA
    secretKey: producer-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
{produce}
  - accessKey: consumerA
    secretKey: consumer-secret
    defaultTopicPerm: SUB
    defaultGroupPerm: DENY
    groupPerms:
{groups}
{extra}
"""


def topic(client: str, case: str) -> str:
    return f"Acl-{client}-{case}"


def group(client: str, name: str) -> str:
    return f"G-{client}-{name}"


class AclCluster(NamesrvCluster):
    """``hanet namesrv --acl-file`` and ``hanet master --acl-enable`` sharing one file."""

    def __init__(self, root: Path, *, namesrv_acl: bool = True) -> None:
        topics = [topic(c, case) for c in CLIENTS for case in ("ok", "denied")]
        produce = "\n".join(f"      - {topic(c, 'ok')}=PUB" for c in CLIENTS)
        produce += "\n" + "\n".join(f"      - {topic(c, 'denied')}=SUB" for c in CLIENTS)
        groups = "\n".join(f"      - {group(c, 'A')}=SUB" for c in CLIENTS)
        self.acl = root / "plain_acl.yml"
        extra = "\n".join(
            f"  - accessKey: signer-{c}\n    secretKey: signer-secret\n"
            f"    defaultTopicPerm: PUB\n    defaultGroupPerm: SUB"
            for c in CLIENTS
        )
        self.acl.write_text(ACL.format(produce=produce, groups=groups, extra=extra))
        write_topics(root / "master", topics)
        acl = ("--acl-file", str(self.acl)) if namesrv_acl else ()
        super().__init__(root, *acl)
        ports = ("--listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0")
        store = ("--store", str(root / "master"), "--mapped-file-size", "4M")
        admin = ("--access-key", "brokerAdmin", "--secret-key", "admin-secret")
        self.master = self.add_broker(
            "master", "master", *store, *ports, "--acl-enable", "--acl-file", str(self.acl), *admin
        )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclCluster]:
    started = AclCluster(tmp_path_factory.mktemp("acl-interop")).start_all()
    try:
        yield started
    finally:
        started.close()
    started.assert_no_traceback()


@pytest.fixture(scope="module")
def open_namesrv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclCluster]:
    """The same master behind a name server without ACL: requests reach the broker."""
    started = AclCluster(tmp_path_factory.mktemp("acl-open"), namesrv_acl=False).start_all()
    try:
        yield started
    finally:
        started.close()


@pytest.fixture(params=CLIENTS)
def client(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    BUILDERS[name]("produce", "127.0.0.1:1", "T")  # skips when the client cannot run here
    return name


def command(client: str, cluster: AclCluster, mode: str, t: str, **options: object) -> list[str]:
    return BUILDERS[client](mode, cluster.namesrv_address, t, **options)


PRODUCER = {"access_key": "producerA", "secret_key": "producer-secret"}
CONSUMER = {"access_key": "consumerA", "secret_key": "consumer-secret"}


async def test_a_signed_producer_and_consumer_work(client: str, cluster: AclCluster) -> None:
    t = topic(client, "ok")
    out = await run_driver(
        command(client, cluster, "produce", t, count=10, prefix="ok", **PRODUCER),
        timeout=DRIVER_SECONDS,
    )
    assert out.returncode == 0, (out, out.stderr, cluster.logs())
    assert [line["status"] for line in out.events("sent")] == ["SEND_OK"] * 10
    consume = command(
        client, cluster, "consume", t, group=group(client, "A"), expect=10, timeout=40, **CONSUMER
    )
    got = await run_driver(consume, timeout=DRIVER_SECONDS + 20)
    received = {line["body"] for line in got.events("received") if line.get("action") == "ok"}
    assert received == {f"ok-{i}" for i in range(10)}, (got, got.stderr[-2000:], cluster.logs())


async def test_a_wrong_secret_and_a_missing_permission_are_refused(
    client: str, cluster: AclCluster
) -> None:
    wrong = {"access_key": f"signer-{client}", "secret_key": "not-the-secret"}
    for t, keys in ((topic(client, "ok"), wrong), (topic(client, "denied"), PRODUCER)):
        out = await run_driver(
            command(client, cluster, "produce", t, count=2, prefix="no", timeout=15, **keys),
            timeout=DRIVER_SECONDS,
        )
        assert out.returncode != 0, (out, cluster.logs())
        assert not out.events("sent"), out
    # refused by the name server already (the route lookup is signed too)
    assert f"Check signature failed for accessKey=signer-{client}" in cluster.namesrv.text()
    assert f"No default permission for topic:{topic(client, 'denied')}" in cluster.master.text()
    with signing(Credentials("brokerAdmin", "admin-secret")):
        async with BrokerClient.connect(*split_address(cluster.master.ready["broker"])) as admin:
            ends = [await admin.max_offset(topic(client, "denied"), q) for q in range(4)]
    assert sum(ends) == 0


async def test_a_consumer_of_group_a_cannot_act_as_group_b(
    client: str, cluster: AclCluster
) -> None:
    """The consumer account holds SUB on its own group only: as group B it gets nothing."""
    t = topic(client, "ok")
    consume = command(
        client, cluster, "consume", t, group=group(client, "B"), expect=1, timeout=8, **CONSUMER
    )
    out = await run_driver(consume, timeout=DRIVER_SECONDS)
    assert out.returncode != 0 and not out.events("received"), out
    assert f"No default permission for group:{group(client, 'B')}" in cluster.master.text()


async def test_hanet_signed_as_a_consumer_cannot_commit_another_groups_offsets(
    cluster: AclCluster,
) -> None:
    broker = split_address(cluster.master.ready["broker"])
    t = topic("alions", "ok")
    with signing(Credentials("brokerAdmin", "admin-secret")):
        async with BrokerClient.connect(*broker) as admin:
            await admin.commit_offset("victim-group", t, 0, 5)
    with signing(Credentials("consumerA", "consumer-secret")):
        async with BrokerClient.connect(*broker) as attacker:
            await attacker.commit_offset(group("alions", "A"), t, 0, 1)  # its own: allowed
            with pytest.raises(BrokerRequestError) as caught:
                await attacker.commit_offset("victim-group", t, 0, 10_000)
    assert caught.value.code == ResponseCode.NO_PERMISSION
    with signing(Credentials("brokerAdmin", "admin-secret")):
        async with BrokerClient.connect(*broker) as admin:
            assert await admin.query_offset("victim-group", t, 0) == 5


async def test_the_broker_refuses_a_wrong_secret(client: str, open_namesrv: AclCluster) -> None:
    wrong = {"access_key": f"signer-{client}", "secret_key": "not-the-secret"}
    t = topic(client, "ok")
    out = await run_driver(
        command(client, open_namesrv, "produce", t, count=2, prefix="no", timeout=15, **wrong),
        timeout=DRIVER_SECONDS,
    )
    assert out.returncode != 0 and not out.events("sent"), out
    refused = f"Check signature failed for accessKey=signer-{client}"
    assert refused in open_namesrv.master.text(), open_namesrv.logs()
