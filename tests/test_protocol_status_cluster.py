"""The status document (HANET_STATUS's body): its JSON both ways, its cluster sections
(``cluster``, ``metadata_sync``, ``consumer_offsets``) and the DLedger section, documents of
older brokers without them, and malformed ones."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest

from hanet.handlers import CorruptedFrameError
from hanet.protocol import (
    BrokerStatus,
    ClusterLink,
    ConsumerOffsetsInfo,
    DLedgerInfo,
    DLedgerPeer,
    MetadataSync,
    RemotingHeaderError,
    SlaveInfo,
)

BASE = BrokerStatus(
    role="SLAVE",
    broker_address="127.0.0.1:10911",
    ha_address=None,
    min_offset=0,
    max_offset=12,
    flushed_offset=12,
    dispatched_offset=12,
    puts=0,
    mapped_files=1,
    dispatch_error=None,
    uptime=1.0,
)
CLUSTER = ClusterLink(
    name="C",
    broker_name="broker-a",
    broker_id=1,
    name_servers=("127.0.0.1:9876", "127.0.0.1:9877"),
    registrations=3,
    failures=1,
    last_registered_ago=2.5,
    last_error=None,
    master_address="127.0.0.1:10911",
    master_ha_address="127.0.0.1:10912",
)
SYNC = MetadataSync("127.0.0.1:10911", 4, 2, 1.25, "BrokerConnectionError: refused", 3, 2)
OFFSETS = ConsumerOffsetsInfo(2, 3, True, 7, None, "OSError: [Errno 28] No space left")
CLUSTER_JSON = {**attrs.asdict(CLUSTER), "name_servers": ["127.0.0.1:9876"]}
FULL = attrs.evolve(BASE, cluster=CLUSTER, metadata_sync=SYNC, consumer_offsets=OFFSETS)


def test_the_cluster_sections_round_trip_through_json_and_the_codec() -> None:
    raw = json.loads(json.dumps(FULL.to_json()))
    assert raw["cluster"]["name"] == "C"
    assert raw["cluster"]["name_servers"] == ["127.0.0.1:9876", "127.0.0.1:9877"]
    assert raw["cluster"]["last_registered_ago"] == 2.5
    assert raw["metadata_sync"]["failures"] == 2 and raw["metadata_sync"]["topics"] == 3
    assert raw["consumer_offsets"] == {
        "groups": 2,
        "entries": 3,
        "dirty": True,
        "persists": 7,
        "last_persisted_ago": None,
        "last_error": "OSError: [Errno 28] No space left",
    }
    assert BrokerStatus.from_json(raw) == FULL
    assert BrokerStatus.decode(FULL.encode()) == FULL


def test_a_whole_number_age_reads_as_a_float() -> None:
    raw = FULL.to_json()
    raw["cluster"] = {**raw["cluster"], "last_registered_ago": 3}
    status = BrokerStatus.from_json(raw)
    assert status.cluster is not None and status.cluster.last_registered_ago == 3.0
    assert isinstance(status.cluster.last_registered_ago, float)


def test_documents_without_the_sections_read_as_none() -> None:
    raw = json.loads(json.dumps(BASE.to_json()))
    assert raw["cluster"] is None and raw["metadata_sync"] is None
    assert BrokerStatus.from_json(raw) == BASE
    old = dict(raw)  # an older broker's document has no such keys
    for key in ("cluster", "metadata_sync", "consumer_offsets"):
        del old[key]
    status = BrokerStatus.from_json(old)
    assert (status.cluster, status.metadata_sync, status.consumer_offsets) == (None, None, None)


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        ({"cluster": []}, "ClusterLink must be an object"),
        ({"cluster": {"name": "C"}}, "ClusterLink.broker_name"),
        ({"cluster": {**CLUSTER_JSON, "name_servers": "a:1"}}, "name_servers must be a list"),
        ({"cluster": {**CLUSTER_JSON, "name_servers": [1]}}, "list of strings"),
        ({"cluster": {**CLUSTER_JSON, "registrations": 1.5}}, "registrations must be int"),
        ({"metadata_sync": {**attrs.asdict(SYNC), "syncs": None}}, "syncs must not be null"),
        ({"consumer_offsets": {**attrs.asdict(OFFSETS), "dirty": 1}}, "dirty must be bool"),
        ({"consumer_offsets": 3}, "ConsumerOffsetsInfo must be an object"),
    ],
)
def test_malformed_cluster_sections_are_corrupted_frames(
    change: dict[str, Any], complaint: str
) -> None:
    raw = {**BASE.to_json(), **change}
    with pytest.raises(CorruptedFrameError, match=complaint):
        BrokerStatus.from_json(raw)


def test_fields_of_a_newer_broker_are_ignored() -> None:
    """An older reader of a newer broker's status: unknown fields, at the top and nested, are
    skipped; the fields it knows are read (and still checked)."""
    raw = {
        **BASE.to_json(),
        "surprise": 1,
        "metadata_sync": {**attrs.asdict(SYNC), "extra": [1]},
    }
    status = BrokerStatus.from_json(raw)
    assert status == attrs.evolve(BASE, metadata_sync=SYNC)
    assert BrokerStatus.decode(json.dumps(raw).encode()) == status


def test_status_document_round_trips_through_json() -> None:
    status = attrs.evolve(BASE, slaves=(SlaveInfo("a:1", "transferring", 0, 5, 6, 7, 6, 2.0),))
    assert BrokerStatus.from_json(json.loads(json.dumps(status.to_json()))) == status
    assert BrokerStatus.decode(status.encode()) == status


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        ({"max_offset": "12"}, "max_offset must be int"),
        ({"max_offset": True}, "max_offset must be int"),
        ({"role": None}, "role must not be null"),
        ({"slaves": [{"address": "a"}]}, "SlaveInfo.state"),
        ({"master": []}, "MasterLink must be an object"),
    ],
)
def test_malformed_status_documents_are_refused(change: dict[str, Any], complaint: str) -> None:
    raw = {**BASE.to_json(), **change}
    with pytest.raises(CorruptedFrameError, match=complaint):
        BrokerStatus.from_json(raw)
    with pytest.raises(RemotingHeaderError, match=complaint):
        BrokerStatus.decode(json.dumps(raw).encode())
    with pytest.raises(RemotingHeaderError, match="not JSON"):
        BrokerStatus.decode(b"{")
    with pytest.raises(RemotingHeaderError, match="not JSON"):  # nested past Python's stack
        BrokerStatus.decode(b"[" * 100_000)


def test_status_document_with_a_dledger_section() -> None:
    info = DLedgerInfo(
        group="g",
        id="n0",
        role="LEADER",
        term=3,
        leader="n0",
        commit_index=12,
        applied_index=12,
        last_index=13,
        leader_address="127.0.0.1:10911",
        peers=(DLedgerPeer("n1", "127.0.0.1:40912", True, 13, 0),),
    )
    status = attrs.evolve(BASE, role="LEADER", dledger=info)
    raw = json.loads(status.encode())
    assert raw["dledger"]["role"] == "LEADER" and raw["dledger"]["peers"][0]["lag"] == 0
    assert BrokerStatus.decode(status.encode()) == status
    # documents of older brokers have no "dledger" key
    old = BASE.to_json()
    del old["dledger"]
    assert BrokerStatus.from_json(old).dledger is None
    with pytest.raises(CorruptedFrameError, match="DLedgerPeer"):
        BrokerStatus.from_json({**raw, "dledger": {**raw["dledger"], "peers": [{"id": "x"}]}})
