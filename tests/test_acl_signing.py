"""Request signing as RocketMQ's AclClientRPCHook (HMAC-SHA1 over the sorted ext field values
and the body, Base64), checked against hand-computed vectors and a frame ali-ons signed."""

from __future__ import annotations

from pathlib import Path

import pytest

from hanet.protocol import (
    Credentials,
    PlainAclConfig,
    RemotingCommand,
    RequestCode,
    check_request,
    decode_command,
    sign_request,
    signature,
    signing_content,
)

FIXTURES = Path(__file__).parent / "fixtures" / "acl"


def test_signing_content_sorts_keys_as_java_and_appends_the_body() -> None:
    fields = {"topic": "TopicA", "AccessKey": "RocketMQ", "queueId": "1", "Signature": "x"}
    # Java's TreeMap: upper case before lower case; Signature left out
    assert signing_content(fields, b"hello") == b"RocketMQ1TopicAhello"
    assert signing_content(fields, None) == b"RocketMQ1TopicA"


def test_signature_matches_a_hand_computed_vector() -> None:
    # printf 'RocketMQ1TopicAhello' | openssl dgst -sha1 -hmac 12345678 -binary | base64
    assert signature(b"RocketMQ1TopicAhello", "12345678") == "EbxjUkzbK7gH7PSb/cxeebtNW1E="


def test_sign_request_adds_access_key_and_signature() -> None:
    request = RemotingCommand.request(
        RequestCode.SEND_MESSAGE_V2, {"b": "TopicA", "e": "1"}, b"hello"
    )
    signed = sign_request(request, Credentials("RocketMQ", "12345678"))
    assert signed.fields["AccessKey"] == "RocketMQ"
    content = b"RocketMQ" + b"TopicA" + b"1" + b"hello"  # AccessKey, b, e
    assert signed.fields["Signature"] == signature(content, "12345678")
    assert signed.body == b"hello" and signed.code == request.code
    # signing twice replaces the signature instead of signing the old one
    assert sign_request(signed, Credentials("RocketMQ", "12345678")).fields == signed.fields


def test_security_token_is_sent_and_signed() -> None:
    signed = sign_request(
        RemotingCommand.request(RequestCode.HEART_BEAT, {}), Credentials("RocketMQ", "1234567", "T")
    )
    assert signed.fields["SecurityToken"] == "T"
    assert signed.fields["Signature"] == signature(b"RocketMQT", "1234567")


def test_credentials_hide_the_secret() -> None:
    assert "secret" not in repr(Credentials("RocketMQ", "secret-key")).replace("secret_key", "")
    with pytest.raises(ValueError):
        Credentials("", "x")


def test_a_frame_signed_by_ali_ons_verifies() -> None:
    frame = bytes.fromhex(
        (FIXTURES / "alions-3.12.0-signed-update-consumer-offset.hex").read_text()
    )
    request = decode_command(frame[4:])
    assert request.code == RequestCode.UPDATE_CONSUMER_OFFSET
    # ali-ons sent queueId and commitOffset as JSON numbers and signed their text
    assert request.fields["queueId"] == "1" and request.fields["OnsChannel"] == "ALIYUN"
    config = PlainAclConfig.from_yaml(
        "accounts:\n  - accessKey: RocketMQ\n    secretKey: '12345678'\n"
        "    defaultTopicPerm: SUB\n    defaultGroupPerm: SUB\n"
    )
    account = check_request(config, request, "10.0.0.1")
    assert account is not None and account.access_key == "RocketMQ"
    # and a hand computation agrees: AccessKey, OnsChannel, commitOffset, consumerGroup,
    # queueId, topic
    content = b"RocketMQ" + b"ALIYUN" + b"100" + b"groupB" + b"1" + b"TopicA"
    assert request.fields["Signature"] == signature(content, "12345678")
