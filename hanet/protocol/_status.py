"""The STATUS document: one definition, with its JSON form both ways.

The broker builds a :class:`BrokerStatus` from its store and replication services and sends
:meth:`BrokerStatus.encode` as the body of its answer to HANET_STATUS (30001); clients read it
back with :meth:`BrokerStatus.decode`. ``hanet status --json`` prints exactly that JSON object::

    {"role": "SYNC_MASTER", "broker_address": "127.0.0.1:10911", "ha_address": "127.0.0.1:10912",
     "min_offset": 0, "max_offset": 4096, "flushed_offset": 4096, "dispatched_offset": 4096,
     "puts": 12, "mapped_files": 1, "dispatch_error": null, "uptime": 12.5,
     "replicated_offset": 4096,
     "slaves": [{"address": "127.0.0.1:53512", "state": "transferring", "request_offset": 0,
                 "ack_offset": 4096, "next_offset": 4096, "lag_bytes": 0, "bytes_sent": 4096,
                 "bytes_per_second": 1024.0}],
     "closed_slaves": [], "master": null,
     "disk_full": false, "disk_used_ratio": 0.42, "create_error": null}

A slave has ``"master": {"address", "connected", "connects", "attempts",
"last_close_reason"}`` and empty ``slaves``. A DLedger node (``hanet dledger``) has ``role``
LEADER, FOLLOWER or CANDIDATE and ``"dledger": {"group", "id", "role", "term", "leader",
"commit_index", "applied_index", "last_index", "leader_address", "peers": [{"id", "address",
"connected", "match_index", "lag"}]}``; other brokers have ``"dledger": null`` (or no key).

The cluster sections (documents of older brokers lack them: they read as None):

- ``"cluster"``: a broker started with ``--namesrv``: ``{"name", "broker_name", "broker_id",
  "name_servers", "registrations", "failures", "last_registered_ago", "last_error",
  "master_address", "master_ha_address"}`` (null without name servers);
- ``"metadata_sync"``: a slave's copy of its master's topics and offsets: ``{"master_address",
  "syncs", "failures", "last_synced_ago", "last_error", "topics", "offset_entries"}`` (null on a
  master);
- ``"consumer_offsets"``: ``{"groups", "entries", "dirty", "persists", "last_persisted_ago",
  "last_error"}``;
- ``"consumer_groups"``: ``[{"group", "members": [client id, ...]}]``, the groups whose
  consumers heartbeat to this broker (empty when none, or an older broker).
- ``"diverged_slaves"``: a master's slaves whose epochs diverged from its own: ``[{"address",
  "diverged_at", "slave_end", "master_end", "slave_epochs", "checks", "last_seen_ago"}]``
  (empty when none, or an older broker).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from hanet.handlers import CorruptedFrameError
from hanet.status import DLedgerInfo, DLedgerPeer, SlaveInfo

from ._remoting import RemotingHeaderError

__all__ = [
    "BrokerStatus",
    "ClusterLink",
    "ConsumerOffsetsInfo",
    "DLedgerInfo",
    "DLedgerPeer",
    "DamagedRangeInfo",
    "DispatchError",
    "DispatchErrorInfo",
    "DivergedSlaveInfo",
    "MasterLink",
    "MetadataSync",
    "SlaveInfo",
]


@attrs.frozen
class MasterLink:
    """A slave's link to its master.

    Attributes:
        diverged: the master keeps refusing this slave's offset (ahead of the master, behind
            its oldest data, or the wrong master): ``hanet slave --truncate-to`` or
            ``--resync`` is the way out; the master's status says which.
        refused_offset: the offset the master refuses.
        error: why the slave stopped for good (a commit log file size mismatch), or None.
        epoch_diverged_at: the consistent point with the master's epochs this slave's log
            goes past, while it refuses to follow (-1: no common epoch; None: not diverged).
        epoch_check: the last epoch check's outcome in one line (None: none made).
    """

    address: str
    connected: bool
    connects: int
    attempts: int
    last_close_reason: str | None
    diverged: bool = False
    refused_offset: int | None = None
    error: str | None = None
    epoch_diverged_at: int | None = None
    epoch_check: str | None = None


@attrs.frozen
class ClusterLink:
    """A broker's registration with the name servers (a broker started with ``--namesrv``).

    Attributes:
        name: the cluster's name (``brokerClusterName``).
        broker_name, broker_id: this broker's name and id in it (0: the master).
        name_servers: the name servers' ``host:port``, as configured.
        registrations: rounds some name server took since start.
        failures: rounds no name server took since start.
        last_registered_ago: seconds since the last round some name server took (None: none
            yet).
        last_error: why the last round failed (None after a success): the broker is not
            (or soon no longer) routable while this stays set.
        master_address, master_ha_address: a slave's master (broker port and HA port) as the
            last answer named it (None on a master, or while no master is registered).
    """

    name: str
    broker_name: str
    broker_id: int
    name_servers: tuple[str, ...]
    registrations: int
    failures: int
    last_registered_ago: float | None
    last_error: str | None
    master_address: str | None = None
    master_ha_address: str | None = None


@attrs.frozen
class MetadataSync:
    """A slave's copy of its master's topics, consumer offsets, delay offsets and subscription
    groups (GET_ALL_TOPIC_CONFIG, GET_ALL_CONSUMER_OFFSET, GET_ALL_DELAY_OFFSET,
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG).

    Attributes:
        master_address: the master's broker port it syncs from (None: not known yet).
        syncs: syncs that succeeded since start.
        failures: syncs that failed since start.
        last_synced_ago: seconds since the last successful sync (None: none yet).
        last_error: why the last sync failed (None after a success).
        topics: topics held from the master (copied, or loaded from ``topics.json``).
        offset_entries: ``topic@group`` offset entries in the master's last metadata.
    """

    master_address: str | None
    syncs: int
    failures: int
    last_synced_ago: float | None
    last_error: str | None
    topics: int
    offset_entries: int


@attrs.frozen
class ConsumerOffsetsInfo:
    """The broker's consumer offsets (``config/consumerOffset.json``).

    Attributes:
        groups: consumer groups with an offset.
        entries: ``topic@group`` entries.
        dirty: commits not written to the file yet.
        persists: writes of the file since start.
        last_persisted_ago: seconds since the file was last written (None: not since start).
        last_error: why the last write failed (None after a success): commits since then
            would be lost by a crash.
    """

    groups: int
    entries: int
    dirty: bool
    persists: int
    last_persisted_ago: float | None
    last_error: str | None


@attrs.frozen
class ConsumerGroupInfo:
    """A consumer group whose members heartbeat to the broker.

    Attributes:
        group: the group's name.
        members: the live members' client ids, sorted (how they split the queues).
    """

    group: str
    members: tuple[str, ...]


@attrs.frozen
class DispatchErrorInfo:
    """The first record that failed while being dispatched to the consume queues (the
    store's :class:`hanet.store.DispatchError`, as the STATUS document reports it)."""

    offset: int
    reason: str


DispatchError = DispatchErrorInfo
"""Deprecated alias of :class:`DispatchErrorInfo` (``hanet.store.DispatchError`` is the
exception); kept for code that imports it, to be removed later."""


@attrs.frozen
class DamagedRangeInfo:
    """A commit log range that failed its checks, kept with the valid records after it and
    refused until repaired (``hanet master --repair-from``)."""

    start: int
    end: int
    reason: str


@attrs.frozen
class DivergedSlaveInfo:
    """A slave whose epoch check found its log going past the consistent point with this
    master's epochs (it refuses to follow, or truncates with ``haDivergence=truncate``).

    Attributes:
        address: the slave's host and the port it asked from (the host names it: the port
            changes on every check).
        diverged_at: the consistent point (-1: no common epoch).
        slave_end: where the slave's log ended when it asked.
        master_end: where this master's log ended then.
        slave_epochs: the slave's epochs, ``EPOCH@START`` comma-separated.
        checks: the slave's checks that found the divergence since it was first listed.
        last_seen_ago: seconds since its last such check (a refusing slave asks every few
            seconds; one that no longer asks is dropped from the list after a while).
    """

    address: str
    diverged_at: int
    slave_end: int
    master_end: int
    slave_epochs: str
    checks: int
    last_seen_ago: float


@attrs.frozen
class BrokerStatus:
    """A broker's role, offsets and replication state (the STATUS answer).

    Attributes:
        role: ASYNC_MASTER, SYNC_MASTER or SLAVE.
        broker_address, ha_address: where it listens (None when it does not).
        min_offset, max_offset: the commit log's data range.
        flushed_offset: data up to here is on disk.
        dispatched_offset: records before here are in the consume queues.
        puts: messages put since start.
        mapped_files: commit log files.
        dispatch_error: why dispatch stopped, or None.
        uptime: seconds since the broker started.
        replicated_offset: a master's offset acknowledged by enough replicas (None on a slave).
        slaves, closed_slaves: a master's connected and recently closed slaves.
        master: a slave's link to its master (None on a master).
        disk_full: puts are refused because the store's disk is used past
            ``diskMaxUsedSpaceRatio``.
        disk_used_ratio: the store's file system used fraction (0.0..1.0), None when unknown.
        create_error: why the last new commit log or consume queue file could not be created
            (puts needing one answer CREATE_MAPPED_FILE_FAILED), None when files can be made.
        dledger: a DLedger node's Raft state (None on a classic broker); its ``role`` is
            also the document's ``role``.
        cluster: the registration with the name servers (None without ``--namesrv``).
        metadata_sync: a slave's copy of its master's topics and offsets (None on a master).
        consumer_offsets: the consumer offsets held (None: not known, an older broker).
        consumer_groups: the consumer groups with live members here.
        epoch: the newest epoch of the store's history (a master's term; a slave's copy of its
            master's), None without one (a RocketMQ 4.9.8 master's slave, a DLedger node).
        damaged_ranges: the commit log's damaged ranges (refused until repaired).
        diverged_slaves: a master's slaves whose epoch check found their log diverged from
            this master's (the point named); empty otherwise, or from an older broker.
    """

    role: str
    broker_address: str | None
    ha_address: str | None
    min_offset: int
    max_offset: int
    flushed_offset: int
    dispatched_offset: int
    puts: int
    mapped_files: int
    dispatch_error: DispatchErrorInfo | None
    uptime: float
    replicated_offset: int | None = None
    slaves: tuple[SlaveInfo, ...] = ()
    closed_slaves: tuple[SlaveInfo, ...] = ()
    master: MasterLink | None = None
    disk_full: bool = False
    disk_used_ratio: float | None = None
    create_error: str | None = None
    dledger: DLedgerInfo | None = None
    cluster: ClusterLink | None = None
    metadata_sync: MetadataSync | None = None
    consumer_offsets: ConsumerOffsetsInfo | None = None
    consumer_groups: tuple[ConsumerGroupInfo, ...] = ()
    epoch: int | None = None
    damaged_ranges: tuple[DamagedRangeInfo, ...] = ()
    diverged_slaves: tuple[DivergedSlaveInfo, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The JSON object (nested objects as dicts, tuples as lists)."""
        return attrs.asdict(self, value_serializer=_lists)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> BrokerStatus:
        """Read the JSON object back, checking every field's type.

        Raises:
            CorruptedFrameError: a field is missing or of the wrong type (a field this reader
                does not know, a newer broker's, is ignored).
        """
        try:
            status: BrokerStatus = _build(cls, raw)
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptedFrameError(f"malformed status document: {exc}") from exc
        return status

    def encode(self) -> bytes:
        """HANET_STATUS's answer body: the JSON object, UTF-8."""
        return json.dumps(self.to_json(), separators=(",", ":")).encode()

    @classmethod
    def decode(cls, body: bytes | bytearray | memoryview) -> BrokerStatus:
        """The status document from HANET_STATUS's answer body.

        Raises:
            RemotingHeaderError: not JSON, or not the document (the reason says which field).
        """
        try:
            raw = json.loads(bytes(body))
        except (ValueError, RecursionError) as exc:  # RecursionError: nested too deep
            raise RemotingHeaderError(f"status body is not JSON: {exc}") from None
        try:
            return cls.from_json(raw)
        except CorruptedFrameError as exc:
            raise RemotingHeaderError(str(exc)) from None


def _lists(instance: object, field: object, value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


_NESTED: dict[str, type] = {
    "dispatch_error": DispatchErrorInfo,
    "master": MasterLink,
    "slaves": SlaveInfo,
    "closed_slaves": SlaveInfo,
    "dledger": DLedgerInfo,
    "peers": DLedgerPeer,
    "cluster": ClusterLink,
    "metadata_sync": MetadataSync,
    "consumer_offsets": ConsumerOffsetsInfo,
    "consumer_groups": ConsumerGroupInfo,
    "damaged_ranges": DamagedRangeInfo,
    "diverged_slaves": DivergedSlaveInfo,
}
_LISTS = frozenset(
    {"slaves", "closed_slaves", "peers", "consumer_groups", "damaged_ranges", "diverged_slaves"}
)
_SCALARS: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
}


def _build(cls: type[Any], raw: Mapping[str, Any]) -> Any:
    if not isinstance(raw, Mapping):
        raise TypeError(f"{cls.__name__} must be an object, got {type(raw).__name__}")
    # A field this reader does not know is a newer broker's: ignored, as RocketMQ's readers
    # ignore them, so an older `hanet status` can read a newer broker. Known fields are checked.
    fields = attrs.fields_dict(cls)
    values: dict[str, Any] = {}
    for name, field in fields.items():
        if name not in raw:
            if field.default is attrs.NOTHING:
                raise KeyError(f"{cls.__name__}.{name}")
            continue
        value = raw[name]
        nested = _NESTED.get(name)
        if nested is not None and name in _LISTS:
            if not isinstance(value, list):
                raise TypeError(f"{cls.__name__}.{name} must be a list")
            values[name] = tuple(_build(nested, item) for item in value)
            continue
        if nested is not None:
            values[name] = None if value is None else _build(nested, value)
            continue
        if str(field.type) == "tuple[str, ...]":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise TypeError(f"{cls.__name__}.{name} must be a list of strings")
            values[name] = tuple(value)
            continue
        values[name] = _scalar(f"{cls.__name__}.{name}", str(field.type), value)
    return cls(**values)


def _scalar(where: str, annotation: str, value: Any) -> Any:
    optional = annotation.endswith(" | None")
    if value is None:
        if optional:
            return None
        raise TypeError(f"{where} must not be null")
    kind = annotation.removesuffix(" | None")
    accepted = _SCALARS[kind]
    if not isinstance(value, accepted) or (kind != "bool" and isinstance(value, bool)):
        raise TypeError(f"{where} must be {kind}, got {type(value).__name__}")
    return float(value) if isinstance(value, int | float) and kind == "float" else value
