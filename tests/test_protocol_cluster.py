"""The consumer offset table in RocketMQ's ``consumerOffset.json`` / GET_ALL_CONSUMER_OFFSET
shape (``{"topic@group": {"0": 12}}``). The name server's messages are tested in
``test_protocol_route.py``, the other bodies in ``test_protocol_headers.py``."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hanet.protocol import (
    RemotingHeaderError,
    fastjson_loads,
    offset_table_from_json,
    offset_table_to_json,
)


def test_the_table_uses_rocketmq_json_shapes() -> None:
    document = offset_table_to_json({("T", "G"): {3: 9, 0: 5}})
    assert document == {"T@G": {"0": 5, "3": 9}}
    # fastjson writes the queue ids bare; both forms read the same.
    bare = fastjson_loads(b'{"T@G":{0:5,3:9}}')
    assert offset_table_from_json(bare) == offset_table_from_json(document)


@pytest.mark.parametrize(
    "table",
    [
        {"no-at-sign": {"0": 1}},
        {"T@G": {"zero": 1}},
        {"T@G": {"0": "one"}},
        {"T@G": [1]},
    ],
)
def test_malformed_tables_are_refused(table: dict[str, object]) -> None:
    with pytest.raises(RemotingHeaderError):
        offset_table_from_json(table)


group_names = st.text("abcXYZ019_-%|", min_size=1, max_size=8)


@given(
    st.dictionaries(
        st.tuples(group_names, group_names),
        st.dictionaries(st.integers(0, 1023), st.integers(0, 2**62), max_size=4),
        max_size=5,
    )
)
def test_offset_tables_round_trip(table: dict[tuple[str, str], dict[int, int]]) -> None:
    assert offset_table_from_json(offset_table_to_json(table)) == table
