"""The YAML subset plain_acl.yml is written in: what it reads, and a clear error naming the
line for anything outside it."""

from __future__ import annotations

from pathlib import Path

import pytest

from hanet.protocol import YamlSubsetError, parse_yaml

FIXTURE = Path(__file__).parent / "fixtures" / "acl" / "plain_acl.yml"


def test_the_shipped_shape_reads() -> None:
    document = parse_yaml(FIXTURE.read_text(), str(FIXTURE))
    assert isinstance(document, dict)
    assert document["globalWhiteRemoteAddresses"] == ["10.20.30.*", "172.16.0.*"]
    accounts = document["accounts"]
    assert isinstance(accounts, list)
    ordinary, admin = accounts
    assert ordinary == {
        "accessKey": "ordinaryUser",
        "secretKey": "87654321",
        "whiteRemoteAddress": None,
        "admin": "false",
        "defaultTopicPerm": "DENY",
        "defaultGroupPerm": "SUB",
        "topicPerms": ["orders=DENY", "payments=PUB|SUB", "audit=SUB"],
        "groupPerms": ["billing=DENY", "shipping=PUB|SUB", "reporting=SUB"],
    }
    assert admin == {
        "accessKey": "adminUser",
        "secretKey": "87654321",
        "whiteRemoteAddress": "192.168.7.*",
        "admin": "true",
    }


def test_snakeyaml_dump_shape_quotes_and_flow() -> None:
    text = """---
accounts:
- accessKey: "with \\"quotes\\" \\u00e9"
  secretKey: 'it''s # not a comment'
  topicPerms: [a=PUB, 'b=SUB']
  groupPerms: []
dataVersion:
- {}
empty: ~
nested:
  deeper:
    key: value  # a comment
"""
    assert parse_yaml(text) == {
        "accounts": [
            {
                "accessKey": 'with "quotes" é',
                "secretKey": "it's # not a comment",
                "topicPerms": ["a=PUB", "b=SUB"],
                "groupPerms": [],
            }
        ],
        "dataVersion": [{}],
        "empty": None,
        "nested": {"deeper": {"key": "value"}},
    }


def test_ipv6_addresses_are_plain_scalars() -> None:
    assert parse_yaml("white:\n  - 1050::5:600:300c:*\n  - '::1'\n") == {
        "white": ["1050::5:600:300c:*", "::1"]
    }


def test_empty_documents() -> None:
    assert parse_yaml("") is None
    assert parse_yaml("# only a comment\n\n") is None


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        ("a: 1\n\tb: 2\n", 2, "tab"),
        ("a: &anchor 1\n", 1, "anchor"),
        ("a: *\n", 1, "alias"),
        ("a: !!str 1\n", 1, "tag"),
        ("a: |\n  text\n", 1, "block scalar"),
        ("a: b\n  c\n", 2, "multi-line"),
        ("a: 1\na: 2\n", 2, "duplicate key 'a'"),
        ("a: 1\n  b: 2\n", 2, "unexpected indentation"),
        ("a:\n  - x\n  y: 1\n", 3, "unexpected indentation"),
        ("a: 'open\n", 1, "not closed"),
        ("a: x: y\n", 1, "': ' inside a plain value"),
        ("a: [x, [y]]\n", 1, "flow sequence"),
        ("a: {b: c}\n", 1, "only [] / {}"),
        ("? a\n: b\n", 1, "complex keys"),
        ("a: 1\n---\nb: 2\n", 2, "one document"),
        ("just text\n", 1, "expected 'key: value'"),
        ('a: "\\q"\n', 1, "unsupported escape"),
    ],
)
def test_outside_the_subset_names_the_line(text: str, line: int, reason: str) -> None:
    with pytest.raises(YamlSubsetError) as caught:
        parse_yaml(text, "acl.yml")
    assert str(caught.value).startswith(f"acl.yml:{line}: ")
    assert reason in str(caught.value)


def test_the_shape_rocketmqs_own_updates_write() -> None:
    """RocketMQ rewrites plain_acl.yml with SnakeYAML's dumpAsMap after an mqadmin update:
    keys sorted, sequences at their key's indentation, quoted numbers, explicit nulls."""
    text = """accounts:
- accessKey: RocketMQ
  admin: false
  defaultGroupPerm: SUB
  defaultTopicPerm: DENY
  groupPerms:
  - groupA=DENY
  secretKey: '12345678'
  topicPerms:
  - topicA=DENY
  - topicB=PUB|SUB
  whiteRemoteAddress: null
dataVersion:
- counter: 3
  timestamp: 1631252325024
globalWhiteRemoteAddresses:
- 10.10.103.*
"""
    assert parse_yaml(text) == {
        "accounts": [
            {
                "accessKey": "RocketMQ",
                "admin": "false",
                "defaultGroupPerm": "SUB",
                "defaultTopicPerm": "DENY",
                "groupPerms": ["groupA=DENY"],
                "secretKey": "12345678",
                "topicPerms": ["topicA=DENY", "topicB=PUB|SUB"],
                "whiteRemoteAddress": None,
            }
        ],
        "dataVersion": [{"counter": "3", "timestamp": "1631252325024"}],
        "globalWhiteRemoteAddresses": ["10.10.103.*"],
    }


def test_nesting_too_deep_is_refused_not_a_recursion_error() -> None:
    with pytest.raises(YamlSubsetError, match="nested too deep"):
        parse_yaml("- " * 5000 + "x", "deep.yml")
