"""What the failover client takes from the network: broker addresses."""

from __future__ import annotations

import pytest

from hanet.client import parse_broker_address


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("10.0.0.1:10911", ("10.0.0.1", 10911)),
        ("broker-a.example:1", ("broker-a.example", 1)),
        ("[::1]:10911", ("::1", 10911)),
        ("h:65535", ("h", 65535)),
    ],
)
def test_broker_addresses_are_split(text: str, parsed: tuple[str, int]) -> None:
    assert parse_broker_address(text) == parsed


@pytest.mark.parametrize(
    "text", ["", "h", "h:", ":10911", "[]:10911", "h:port", "h:\u00b2", "h:99999", "h:-1", "h:0"]
)
def test_anything_else_is_none(text: str) -> None:
    assert parse_broker_address(text) is None
