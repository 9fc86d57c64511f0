"""The broker's offset and metadata JSON helpers (RocketMQ's ``consumerOffset.json`` and
``topics.json`` shapes). The old protocol's cluster frames are gone; the name server's
messages are tested in ``test_protocol_route.py``."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hanet.protocol import BrokerMetadata, MetadataError, offsets_from_json, offsets_to_json


def test_metadata_uses_rocketmq_json_shapes() -> None:
    metadata = BrokerMetadata({"T": 4}, {("T", "G"): {0: 5, 3: 9}})
    document = metadata.to_json()
    assert document["offsetTable"] == {"T@G": {"0": 5, "3": 9}}
    assert document["topicConfigTable"]["T"]["writeQueueNums"] == 4
    assert BrokerMetadata.from_json(document) == metadata


@pytest.mark.parametrize(
    "document",
    [
        {"offsetTable": {"no-at-sign": {"0": 1}}},
        {"offsetTable": {"T@G": {"zero": 1}}},
        {"offsetTable": {"T@G": {"0": "1"}}},
        {"topicConfigTable": {"T": {"readQueueNums": True}}},
    ],
)
def test_malformed_metadata_is_refused(document: dict[str, object]) -> None:
    with pytest.raises(MetadataError):
        BrokerMetadata.from_json(document)


group_names = st.text("abcXYZ019_-%|", min_size=1, max_size=8)


@given(
    st.dictionaries(
        st.tuples(group_names, group_names),
        st.dictionaries(st.integers(0, 1023), st.integers(0, 2**62), max_size=4),
        max_size=5,
    )
)
def test_offset_tables_round_trip(table: dict[tuple[str, str], dict[int, int]]) -> None:
    assert offsets_from_json(offsets_to_json(table)) == table
