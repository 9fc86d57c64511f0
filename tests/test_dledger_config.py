"""A DLedger node's settings and the records a leader puts in its entries, without a node
running: peers parsed, a config that cannot work refused when made, an append's byte budget
within a peer frame, each record's PHYSICALOFFSET where its entry's body lands."""

from __future__ import annotations

from pathlib import Path

import pytest

from hanet.dledger import ENTRY_HEADER_SIZE, NodeConfig, RaftConfig, parse_peers, put_records
from hanet.store import Message, decode_record

PEERS = {"a": "127.0.0.1:1", "b": "127.0.0.1:2"}


def test_parse_peers() -> None:
    assert parse_peers("n0=127.0.0.1:1, n1=h:2") == {"n0": "127.0.0.1:1", "n1": "h:2"}
    for bad in ("", "n0", "n0=a:1,n0=b:2", "=a:1"):
        with pytest.raises(ValueError):
            parse_peers(bad)


def test_a_config_that_cannot_work_is_refused_when_made(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not one of the peers"):
        NodeConfig("g", "z", PEERS, tmp_path)
    with pytest.raises(ValueError, match="keepalive_interval"):
        NodeConfig("g", "a", PEERS, tmp_path, keepalive_interval=0)
    with pytest.raises(ValueError, match="idle_timeout"):
        NodeConfig("g", "a", PEERS, tmp_path, idle_timeout=10, keepalive_interval=10)


def test_an_append_fits_in_half_a_frame_and_half_the_partial_budget(tmp_path: Path) -> None:
    raft = RaftConfig(max_batch_bytes=4 * 1024 * 1024)
    assert NodeConfig("g", "a", PEERS, tmp_path, raft=raft).append_budget == 4 * 1024 * 1024
    small_frames = NodeConfig("g", "a", PEERS, tmp_path, raft=raft, max_frame_length=1000)
    assert small_frames.append_budget == 500
    tight = NodeConfig("g", "a", PEERS, tmp_path, raft=raft, max_partial_bytes=300)
    assert tight.append_budget == 150
    uncapped = NodeConfig("g", "a", PEERS, tmp_path, raft=raft, max_partial_bytes=0)
    assert uncapped.append_budget == 4 * 1024 * 1024


def test_each_record_names_where_its_entrys_body_lands() -> None:
    file_size = 700  # two of these entries fit after position 100, not three

    def place(body_length: int, end: int) -> int:  # a file's tail too short is skipped
        length = ENTRY_HEADER_SIZE + body_length
        return end - end % file_size + file_size if end % file_size + length > file_size else end

    messages = [Message(topic="T", body=b"x" * 60, properties={"KEYS": "k"}) for _ in range(3)]
    host = (bytes([10, 0, 0, 1]), 10911)  # 10.0.0.1:10911, packed
    clock = iter(range(1_700_000_000_000, 1_700_000_000_003))
    bodies = put_records(messages, 100, place, host, lambda: next(clock))
    records = [decode_record(body) for body in bodies]
    size = records[0].size
    first = 100 + ENTRY_HEADER_SIZE
    second = first + size + ENTRY_HEADER_SIZE
    # the third entry does not fit in the first file's tail: it starts the next file
    assert [r.physical_offset for r in records] == [first, second, file_size + ENTRY_HEADER_SIZE]
    stamps = [1_700_000_000_000, 1_700_000_000_001, 1_700_000_000_002]
    assert [r.store_timestamp for r in records] == [r.born_timestamp for r in records] == stamps
    assert (records[0].store_host, records[0].store_port) == host
    assert records[0].properties == {"KEYS": "k"} and records[0].queue_offset == 0
