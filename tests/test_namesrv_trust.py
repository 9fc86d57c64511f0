"""Who a registration belongs to (issue 20, item 4), deterministic: the registry with
identities, the quotas, BrokerTrust on fake connections, and the name server's answers to a
connection of another identity."""

from __future__ import annotations

import logging
from typing import Any

import attrs
import pytest

from hanet.cli import main
from hanet.errors import ConfigError
from hanet.namesrv import (
    MAX_PER_IDENTITY,
    BrokerTrust,
    NameServer,
    RegistrationQuotaError,
    RegistrationRefused,
    Registry,
)
from hanet.protocol import (
    BrokerRegistration,
    RegisterBrokerBody,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponse,
    ResponseCode,
)

T0 = 1_700_000_000.0
BROKER = "ip:10.0.0.1"
ATTACKER = "ip:10.6.6.6"

TOPICS = (("TopicTest", 4),)
MASTER_A = BrokerRegistration(
    "DefaultCluster", "broker-a", 0, "SYNC_MASTER", "10.0.0.1:10911", "10.0.0.1:10912", TOPICS
)
SLAVE_A = BrokerRegistration("DefaultCluster", "broker-a", 1, "SLAVE", "10.0.0.2:10911", "", TOPICS)
DECOY = attrs.evolve(MASTER_A, ha_address="10.6.6.6:10912")
"""The holder's own broker address, with the attacker's HA port: slaves would replicate it."""


def parts(
    registration: BrokerRegistration,
) -> tuple[RegisterBrokerRequestHeader, RegisterBrokerBody]:
    body = registration.body()
    return registration.header(body.encode()), body


def register(
    registry: Registry,
    registration: BrokerRegistration,
    now: float,
    identity: str | None,
    connection: object = None,
) -> RegisterBrokerResponse:
    return registry.register(*parts(registration), now, connection, identity)


def junk(i: int) -> BrokerRegistration:
    return BrokerRegistration("Junk", f"junk-{i}", 0, "ASYNC_MASTER", f"10.6.6.6:{i + 1}")


def test_a_live_registration_is_not_taken_over_from_another_identity_at_its_address() -> None:
    registry = Registry()
    register(registry, MASTER_A, T0, BROKER)
    with pytest.raises(RegistrationRefused, match=r"held by ip:10\.0\.0\.1"):
        register(registry, DECOY, T0 + 1, ATTACKER)
    (entry,) = registry.brokers()
    assert (entry.ha_address, entry.identity) == ("10.0.0.1:10912", BROKER)
    # a slave asking for its master is still told the real one
    answer = register(registry, SLAVE_A, T0 + 2, "ip:10.0.0.2")
    assert answer == RegisterBrokerResponse("10.0.0.1:10911", "10.0.0.1:10912")


def test_the_address_rule_holds_within_one_identity() -> None:
    registry = Registry()
    register(registry, MASTER_A, T0, BROKER)
    moved = attrs.evolve(MASTER_A, broker_address="10.0.0.1:20911")
    with pytest.raises(RegistrationRefused, match=r"held by 10\.0\.0\.1:10911"):
        register(registry, moved, T0 + 1, BROKER)


def test_the_holder_renews_over_a_new_connection() -> None:
    registry = Registry()
    register(registry, MASTER_A, T0, BROKER, "first")
    register(registry, attrs.evolve(MASTER_A, ha_address="10.0.0.1:30912"), T0 + 30, BROKER, "2")
    (entry,) = registry.brokers()
    assert (entry.connection, entry.ha_address, entry.last_update) == (
        "2",
        "10.0.0.1:30912",
        T0 + 30,
    )
    assert registry.held_by(BROKER) == 1


@pytest.mark.parametrize("how", ["expired", "closed", "unregistered"])
def test_another_identity_takes_the_key_once_the_holder_is_gone(how: str) -> None:
    registry = Registry()
    register(registry, MASTER_A, T0, BROKER, "holder")
    now = T0 + 10
    if how == "expired":
        now = T0 + 120
    elif how == "closed":
        registry.connection_closed("holder")
    else:
        assert registry.unregister("DefaultCluster", "broker-a", 0, "10.0.0.1:10911", BROKER)
    register(registry, DECOY, now, ATTACKER)
    (entry,) = registry.brokers()
    assert entry.identity == ATTACKER
    assert registry.held_by(BROKER) == 0
    assert registry.held_by(ATTACKER) == 1


def test_another_identity_cannot_unregister_or_renew(caplog: pytest.LogCaptureFixture) -> None:
    registry = Registry()
    register(registry, MASTER_A, T0, BROKER)
    with caplog.at_level(logging.WARNING, logger="hanet.namesrv"):
        assert not registry.unregister("DefaultCluster", "broker-a", 0, "10.0.0.1:10911", ATTACKER)
    assert "held by ip:10.0.0.1" in caplog.text
    assert len(registry) == 1
    version = registry.brokers()[0].data_version
    key = ("DefaultCluster", "broker-a", 0)
    assert registry.query_data_version(key, "10.0.0.1:10911", version, T0 + 100, ATTACKER) == (
        True,
        None,
    )
    assert registry.brokers()[0].last_update == T0  # not renewed
    assert registry.query_data_version(key, "10.0.0.1:10911", version, T0 + 100, BROKER) == (
        False,
        version,
    )
    assert registry.brokers()[0].last_update == T0 + 100


def test_another_identity_cannot_replace_a_member_by_its_address() -> None:
    """Registering another id of the broker name from a member's address replaces that member
    (a slave restarted as the master); only that member's identity may."""
    registry = Registry()
    register(registry, MASTER_A, T0, BROKER)
    as_slave = attrs.evolve(MASTER_A, broker_id=5, role="SLAVE", ha_address="")
    with pytest.raises(RegistrationRefused, match=r"10\.0\.0\.1:10911 is held by ip:10\.0\.0\.1"):
        register(registry, as_slave, T0 + 1, ATTACKER)
    assert [b.broker_id for b in registry.brokers()] == [0]
    register(registry, as_slave, T0 + 2, BROKER)
    assert [b.broker_id for b in registry.brokers()] == [5]
    assert registry.held_by(BROKER) == 1


def test_an_identity_holds_at_most_its_quota() -> None:
    registry = Registry(max_per_identity=3)
    for i in range(3):
        register(registry, junk(i), T0, ATTACKER)
    with pytest.raises(RegistrationQuotaError, match=r"ip:10\.6\.6\.6 holds 3 registrations"):
        register(registry, junk(3), T0, ATTACKER)
    register(registry, junk(0), T0 + 1, ATTACKER)  # renewals go through
    register(registry, MASTER_A, T0 + 1, BROKER)  # others register
    assert len(registry) == 4
    # expired entries give their share back
    register(registry, junk(3), T0 + 121, ATTACKER)
    assert registry.held_by(ATTACKER) == 1  # junk-0 was renewed at T0 + 1, the rest expired


def test_ten_thousand_junk_registrations_leave_room_for_brokers() -> None:
    registry = Registry()
    refused = 0
    for i in range(10_000):
        try:
            register(registry, junk(i), T0, ATTACKER)
        except RegistrationQuotaError:
            refused += 1
    assert refused == 10_000 - MAX_PER_IDENTITY
    assert len(registry) == MAX_PER_IDENTITY
    register(registry, MASTER_A, T0, BROKER)
    assert len(registry) == MAX_PER_IDENTITY + 1


def test_the_total_is_bounded_across_identities() -> None:
    registry = Registry(max_brokers=5, max_per_identity=2)
    for i in range(5):
        register(registry, junk(i), T0, f"ip:10.6.6.{i // 2}")
    with pytest.raises(RegistrationQuotaError, match="holds 5 brokers"):
        register(registry, MASTER_A, T0, BROKER)


# -- whose a connection's registrations are ---------------------------------------------------


@attrs.frozen
class _FakeTls:
    cert: dict[str, Any]

    def getpeercert(self) -> dict[str, Any]:
        return self.cert


@attrs.frozen
class _Connection:
    remote_address: object = None
    stream: object = None


def _tls(cn: str, *sans: str) -> _Connection:
    cert = {
        "subject": ((("commonName", cn),),),
        "subjectAltName": tuple(("DNS", s) for s in sans),
    }
    return _Connection(("10.0.0.1", 5555), _FakeTls(cert))


def test_identity_of_plain_tls_and_in_process_connections() -> None:
    trust = BrokerTrust()
    assert trust.identity(_Connection(("10.0.0.7", 40000))) == ("ip:10.0.0.7", None)
    assert trust.identity(_tls("producer-1")) == ("cert:producer-1", None)
    assert trust.identity(None) == (None, None)
    assert trust.identity("in-process") == (None, None)


def test_a_broker_pattern_admits_only_certificates_naming_a_broker() -> None:
    trust = BrokerTrust(broker_pattern=r"broker-[a-z]+")
    assert trust.identity(_tls("host-7", "broker-a")) == ("cert:broker-a", None)
    identity, refusal = trust.identity(_tls("producer-1", "app.example"))
    assert identity == "cert:producer-1"
    assert refusal is not None and "names no broker" in refusal and "broker-[a-z]+" in refusal
    # the pattern matches whole names
    assert trust.identity(_tls("broker-a.evil"))[1] is not None
    with pytest.raises(ConfigError, match="not a regular expression"):
        BrokerTrust(broker_pattern="(")


def test_the_server_answers_another_identity_no_permission() -> None:
    server = NameServer(("127.0.0.1", 0), clock=lambda: T0)
    holder = _Connection(("10.0.0.1", 40000))
    attacker = _Connection(("10.6.6.6", 40000))
    assert server.handle(MASTER_A.request(), holder) is not None
    answer = server.handle(DECOY.request(), attacker)
    assert answer is not None and answer.code == ResponseCode.NO_PERMISSION
    assert "held by ip:10.0.0.1" in (answer.remark or "")
    assert server.registry.brokers()[0].ha_address == "10.0.0.1:10912"
    answer = server.handle(MASTER_A.unregister_request(), attacker)
    assert answer is not None and answer.code == ResponseCode.SUCCESS
    assert len(server.registry) == 1  # nothing removed (RocketMQ answers SUCCESS regardless)


def test_the_server_refuses_a_certificate_that_names_no_broker() -> None:
    server = NameServer(
        ("127.0.0.1", 0), clock=lambda: T0, trust=BrokerTrust(broker_pattern="broker-.*")
    )
    answer = server.handle(MASTER_A.request(), _tls("producer-1"))
    assert answer is not None and answer.code == ResponseCode.NO_PERMISSION
    assert "names no broker" in (answer.remark or "")
    assert len(server.registry) == 0
    answer = server.handle(MASTER_A.request(), _tls("broker-a"))
    assert answer is not None and answer.code == ResponseCode.SUCCESS
    assert server.registry.brokers()[0].identity == "cert:broker-a"
    answer = server.handle(MASTER_A.unregister_request(), _tls("producer-1"))
    assert answer is not None and answer.code == ResponseCode.NO_PERMISSION
    # a second broker certificate cannot take broker-a over either
    answer = server.handle(DECOY.request(), _tls("broker-b"))
    assert answer is not None and answer.code == ResponseCode.NO_PERMISSION
    assert len(server.registry) == 1


def test_quota_answers_are_system_errors_with_the_reason() -> None:
    server = NameServer(("127.0.0.1", 0), clock=lambda: T0, max_per_identity=2)
    attacker = _Connection(("10.6.6.6", 40000))
    codes = [server.handle(junk(i).request(), attacker) for i in range(3)]
    assert [c.code if c else None for c in codes] == [
        ResponseCode.SUCCESS,
        ResponseCode.SUCCESS,
        ResponseCode.SYSTEM_ERROR,
    ]
    last = codes[2]
    assert last is not None and "holds 2 registrations" in (last.remark or "")


# -- the command line ---------------------------------------------------------------------------


def test_namesrv_refuses_a_broker_pattern_without_mutual_tls(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["namesrv", "--tls-broker-pattern", "broker-.*"]) == 2
    assert "--tls-broker-pattern needs mutual TLS" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--max-registrations", "--max-registrations-per-identity"])
def test_namesrv_refuses_a_bad_registration_bound(
    flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as raised:
        main(["namesrv", flag, "0"])
    assert raised.value.code == 2
    assert flag in capsys.readouterr().err
