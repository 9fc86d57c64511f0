"""RocketMQ 4.9.8's plain ACL check: accounts, address patterns, permissions per request code,
the guard's answers (NO_PERMISSION with RocketMQ's remark), and reloading the file."""

from __future__ import annotations

import json
import os
from pathlib import Path

import attrs
import pytest

from hanet.protocol import (
    NAMESRV_ADMIN_CODES,
    AclConfigError,
    AclDenied,
    AclGuard,
    AddressPattern,
    Credentials,
    HanetRequestCode,
    HeartbeatData,
    PlainAclConfig,
    PlainAclFile,
    RemotingCommand,
    RemotingDispatcher,
    RequestCode,
    ResponseCode,
    check_request,
    sign_request,
)
from hanet.testing import EmbeddedChannel

FIXTURE = Path(__file__).parent / "fixtures" / "acl" / "plain_acl.yml"
CONFIG = PlainAclConfig.from_yaml(FIXTURE.read_text(), str(FIXTURE))
ORDINARY = Credentials("ordinaryUser", "87654321")
ADMIN = Credentials("adminUser", "87654321")
HOST = "10.0.0.5"  # in no white list


def signed(
    code: int, fields: dict[str, str], body: bytes = b"", creds: Credentials = ORDINARY
) -> RemotingCommand:
    return sign_request(RemotingCommand.request(code, fields, body), creds)


def refusal(request: RemotingCommand, host: str = HOST) -> str:
    with pytest.raises(AclDenied) as caught:
        check_request(CONFIG, request, host)
    return str(caught.value)


# -- the file ---------------------------------------------------------------------------------


def test_the_fixture_loads_as_rocketmq_reads_it() -> None:
    assert set(CONFIG.accounts) == {"ordinaryUser", "adminUser"}
    ordinary = CONFIG.accounts["ordinaryUser"]
    assert not ordinary.admin and ordinary.resource_perms is not None
    assert ordinary.resource_perms["%RETRY%billing"] == 1  # DENY, kept under the retry topic
    assert CONFIG.accounts["adminUser"].admin
    assert CONFIG.accounts["adminUser"].resource_perms is None


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("accounts:\n  - accessKey: short\n    secretKey: 12345678\n", "accessKey must be longer"),
        ("accounts:\n  - accessKey: longEnough\n    secretKey: 123\n", "secretKey must be longer"),
        (
            "accounts:\n  - accessKey: longEnough\n    secretKey: 12345678\n"
            "    topicPerms: [t=WRITE]\n",
            "'WRITE' is not PUB, SUB",
        ),
        (
            "accounts:\n  - accessKey: longEnough\n    secretKey: 12345678\n    groupPerms: [g]\n",
            "is not NAME=PERM",
        ),
        (
            "accounts:\n  - accessKey: longEnough\n    secretKey: 12345678\n"
            "  - accessKey: longEnough\n    secretKey: 12345678\n",
            "repeated",
        ),
        ("globalWhiteRemoteAddresses: [10.0.0.0/8]\n", "CIDR is not a RocketMQ 4.9.8"),
        ("accounts: yes\n", "accounts is not a list"),
        ("accounts:\n  - accessKey: x: y\n", "acl.yml:2:"),
    ],
)
def test_a_bad_file_is_refused_with_the_reason(text: str, reason: str) -> None:
    with pytest.raises(AclConfigError) as caught:
        PlainAclConfig.from_yaml(text, "acl.yml")
    assert reason in str(caught.value)


@pytest.mark.parametrize(
    ("pattern", "inside", "outside"),
    [
        ("*", ["1.2.3.4", "::1"], []),
        ("", [], ["1.2.3.4"]),
        ("192.168.0.{100,101}", ["192.168.0.100", "192.168.0.101"], ["192.168.0.102"]),
        (
            "192.168.1.100-200",
            ["192.168.1.100", "192.168.1.200"],
            ["192.168.1.99", "192.168.2.150"],
        ),
        ("192.168.*.*", ["192.168.0.1", "192.168.255.3"], ["192.169.0.1"]),
        ("192.168.1.*", ["192.168.1.7", "::ffff:192.168.1.7"], ["192.168.2.7"]),
        ("10.1.1.1,10.1.1.2", ["10.1.1.2"], ["10.1.1.3"]),
        ("127.0.0.1", ["127.0.0.1"], ["127.0.0.2", "::1"]),
        ("::1", ["::1", "0:0:0:0:0:0:0:1"], ["127.0.0.1"]),
        ("1050::5:600:300c:*", ["1050:0:0:0:5:600:300c:1"], ["1050:0:0:0:5:600:300d:1"]),
        ("1050::5:600:1-20:*", ["1050::5:600:1f:9"], ["1050::5:600:21:9"]),
    ],
)
def test_rocketmq_address_patterns(pattern: str, inside: list[str], outside: list[str]) -> None:
    parsed = AddressPattern.parse(pattern)
    for host in inside:
        assert parsed.matches(host), host
    for host in outside:
        assert not parsed.matches(host), host


@pytest.mark.parametrize(
    "pattern",
    ["10.0.0.0/8", "192.168.*.5", "192.168", "300.1.1.*", "1.2.3.9-2", "*.1.2.3", "x", "1.2.3.4*"],
)
def test_bad_address_patterns(pattern: str) -> None:
    with pytest.raises(ValueError):
        AddressPattern.parse(pattern)


# -- the check --------------------------------------------------------------------------------


def test_global_white_list_passes_anything() -> None:
    request = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"b": "orders"})
    assert check_request(CONFIG, request, "10.20.30.4") is None


def test_unsigned_unknown_and_forged_requests_are_refused() -> None:
    request = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"b": "payments"}, b"x")
    assert refusal(request) == "No accessKey is configured"
    assert refusal(signed(10, {"topic": "payments"}, creds=Credentials("nobody1", "xxxxxxx"))) == (
        "No acl config for nobody1"
    )
    wrong = signed(310, {"b": "payments"}, b"x", Credentials("ordinaryUser", "wrong-secret"))
    assert refusal(wrong) == "Check signature failed for accessKey=ordinaryUser"
    good = signed(310, {"b": "payments"}, b"x")
    tampered = RemotingCommand.request(310, good.fields, b"y")  # body changed after signing
    assert refusal(tampered) == "Check signature failed for accessKey=ordinaryUser"
    assert check_request(CONFIG, good, HOST) is CONFIG.accounts["ordinaryUser"]
    surrogate = RemotingCommand.request(310, {**good.fields, "Signature": "\ud800"}, b"x")
    assert refusal(surrogate) == "Check signature failed for accessKey=ordinaryUser"


NO_ORDERS = "No default permission for topic:orders"


def test_send_needs_pub_on_the_topic() -> None:
    assert (
        refusal(signed(310, {"a": "p", "b": "orders"})) == "No default permission for topic:orders"
    )
    assert refusal(signed(310, {"a": "p", "b": "other"})) == "No default permission for topic:other"
    assert refusal(signed(10, {"producerGroup": "p", "topic": "audit"})) == (
        "No default permission for topic:audit"  # SUB only
    )
    check_request(CONFIG, signed(10, {"producerGroup": "p", "topic": "payments"}), HOST)
    # hanet also checks batches (4.9.8 leaves SEND_BATCH_MESSAGE to the signature)
    assert (
        refusal(signed(320, {"a": "p", "b": "orders"})) == "No default permission for topic:orders"
    )
    # a retry topic send needs SUB on the sending group
    assert refusal(signed(310, {"a": "billing", "b": "%RETRY%billing"})) == (
        "No default permission for group:billing"
    )
    check_request(CONFIG, signed(310, {"a": "shipping", "b": "%RETRY%shipping"}), HOST)


def test_pull_and_offsets_need_sub_on_group_and_topic() -> None:
    pull = {"consumerGroup": "shipping", "topic": "payments", "queueId": "0"}
    check_request(CONFIG, signed(RequestCode.PULL_MESSAGE, pull), HOST)
    assert refusal(signed(RequestCode.PULL_MESSAGE, {**pull, "topic": "orders"})) == (
        "No default permission for topic:orders"
    )
    assert refusal(signed(RequestCode.PULL_MESSAGE, {**pull, "consumerGroup": "billing"})) == (
        "No default permission for group:billing"
    )
    for code in (RequestCode.UPDATE_CONSUMER_OFFSET, RequestCode.QUERY_CONSUMER_OFFSET):
        fields = {"consumerGroup": "billing", "topic": "payments", "queueId": "0"}
        assert refusal(signed(code, {**fields, "commitOffset": "5"})) == (
            "No default permission for group:billing"
        )
        check_request(CONFIG, signed(code, {**fields, "consumerGroup": "anyOther"}), HOST)


def test_heartbeat_checks_every_group_and_subscription() -> None:
    def heartbeat(group: str, topic: str) -> RemotingCommand:
        consumer = {
            "groupName": group,
            "consumeType": "CONSUME_PASSIVELY",
            "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
            "subscriptionDataSet": [{"topic": topic, "subString": "*"}],
            "unitMode": False,
        }
        document = {"clientID": "c1", "consumerDataSet": [consumer], "producerDataSet": []}
        body = json.dumps(document).encode()
        HeartbeatData.from_json(body)  # the shape is right
        return signed(RequestCode.HEART_BEAT, {}, body)

    check_request(CONFIG, heartbeat("shipping", "audit"), HOST)
    assert refusal(heartbeat("billing", "audit")) == "No default permission for group:billing"
    assert refusal(heartbeat("shipping", "orders")) == "No default permission for topic:orders"


def test_admin_codes_and_admin_accounts() -> None:
    create = signed(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "t"})
    assert refusal(create) == (
        "Need admin permission for request code=17, but accessKey=ordinaryUser is not"
    )
    check_request(
        CONFIG, signed(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "t"}, creds=ADMIN), HOST
    )
    # an admin without permission lists passes every resource check
    check_request(CONFIG, signed(310, {"b": "orders"}, creds=ADMIN), HOST)
    # on the name server registrations are admin requests
    register = signed(RequestCode.REGISTER_BROKER, {"brokerName": "b"})
    with pytest.raises(AclDenied):
        check_request(CONFIG, register, HOST, admin_codes=NAMESRV_ADMIN_CODES)
    check_request(CONFIG, register, HOST)  # not on a broker
    # hanet's additions: resetting any group's offsets, reading the whole log, route changes
    for code in (RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, HanetRequestCode.HANET_READ_LOG):
        assert refusal(signed(code, {"topic": "t"})).startswith(
            f"Need admin permission for request code={int(code)}"
        )
        check_request(CONFIG, signed(code, {"topic": "t"}, creds=ADMIN), HOST)
    wipe = signed(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "b"})
    with pytest.raises(AclDenied):
        check_request(CONFIG, wipe, HOST, admin_codes=NAMESRV_ADMIN_CODES)


def test_the_account_white_address_skips_the_signature() -> None:
    unsigned = RemotingCommand.request(310, {"b": "orders", "AccessKey": "adminUser"})
    assert check_request(CONFIG, unsigned, "192.168.7.20") is CONFIG.accounts["adminUser"]
    assert refusal(unsigned, "192.168.8.20") == "Check signature failed for accessKey=adminUser"


# -- the guard in a dispatcher ----------------------------------------------------------------


def test_guard_answers_no_permission_before_the_processor() -> None:
    served: list[RemotingCommand] = []

    def processor(ctx: object, request: RemotingCommand) -> RemotingCommand:
        served.append(request)
        return request.response(ResponseCode.SUCCESS)

    guard = AclGuard(lambda: CONFIG)
    dispatcher = RemotingDispatcher({310: processor, 34: processor}, guard=guard)
    channel = EmbeddedChannel(dispatcher)
    channel.write_inbound(signed(310, {"b": "orders"}).with_opaque(7))
    answer: RemotingCommand = channel.read_outbound()
    assert answer.code == ResponseCode.NO_PERMISSION and answer.opaque == 7
    assert answer.remark == (
        "org.apache.rocketmq.acl.common.AclException: No default permission for topic:orders"
    )
    assert not served and guard.refused == 1
    channel.write_inbound(signed(310, {"b": "payments"}))
    assert channel.read_outbound().code == ResponseCode.SUCCESS and len(served) == 1
    # a heartbeat body that does not parse: SYSTEM_ERROR with the reason
    channel.write_inbound(signed(34, {}, b"not json"))
    bad: RemotingCommand = channel.read_outbound()
    assert bad.code == ResponseCode.SYSTEM_ERROR and "body" in (bad.remark or "")
    # a refused oneway request gets no answer
    channel.write_inbound(attrs_oneway(signed(310, {"b": "orders"})))
    assert channel.read_outbound() is None and guard.refused == 2


def attrs_oneway(request: RemotingCommand) -> RemotingCommand:
    return attrs.evolve(request, flag=request.flag | 2)


# -- reloading --------------------------------------------------------------------------------


def test_the_file_is_reloaded_when_it_changes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "plain_acl.yml"
    path.write_text(FIXTURE.read_text())
    acl = PlainAclFile(path)
    assert not acl.poll()
    path.write_text(FIXTURE.read_text().replace("orders=DENY", "orders=PUB"))
    os.utime(path, ns=(1, 1))  # a stamp the first load did not see
    assert acl.poll() and acl.reloads == 1
    check_request(acl.config, signed(310, {"b": "orders"}), HOST)
    # a broken edit keeps the accounts last read
    path.write_text("accounts:\n  - accessKey: x: y\n")
    assert not acl.poll()
    assert "not reloaded" in caplog.text and "plain_acl.yml:2:" in caplog.text
    check_request(acl.config, signed(310, {"b": "orders"}), HOST)
    path.unlink()
    assert not acl.poll() and "is gone" in caplog.text
    with pytest.raises(AclConfigError, match="does not exist"):
        PlainAclFile(path)


def test_a_failing_guard_lets_nothing_through(caplog: pytest.LogCaptureFixture) -> None:
    served: list[RemotingCommand] = []

    def processor(ctx: object, request: RemotingCommand) -> RemotingCommand:
        served.append(request)
        return request.response(ResponseCode.SUCCESS)

    def broken(ctx: object, request: RemotingCommand) -> RemotingCommand | None:
        raise KeyError("a bug")

    channel = EmbeddedChannel(RemotingDispatcher({310: processor}, guard=broken))
    channel.write_inbound(signed(310, {"b": "payments"}))
    answer: RemotingCommand = channel.read_outbound()
    assert answer.code == ResponseCode.SYSTEM_ERROR and not served
    assert channel.is_open and "failed" in caplog.text
