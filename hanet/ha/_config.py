"""A replicating broker's settings, with RocketMQ's defaults.

Every field is a config attribute, a CLI flag (``--ha-transfer-batch-size``) and, under its
RocketMQ name, a key of a ``broker.conf``-style properties file (``haTransferBatchSize``; read
by :mod:`hanet.broker`). Durations are seconds here; RocketMQ writes them in milliseconds.
"""

from __future__ import annotations

import enum
import os
import re
import ssl
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from hanet.boot import AllowList, TlsConfig
from hanet.channel import parse_address
from hanet.errors import ConfigError
from hanet.store import FlushDiskType, RetentionConfig

__all__ = ["BrokerConfig", "BrokerRole"]


class BrokerRole(enum.Enum):
    """RocketMQ's broker roles."""

    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


def _positive(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and value <= 0:
        raise ConfigError(f"{attribute.name} must be > 0, got {value}")


def _non_negative(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value < 0:
        raise ConfigError(f"{attribute.name} must be >= 0, got {value}")


def _percent(instance: object, attribute: attrs.Attribute[Any], value: int) -> None:
    if not 1 <= value <= 100:
        raise ConfigError(f"{attribute.name} must be a percentage in 1..100, got {value}")


def _optional_path(value: str | Path | None) -> Path | None:
    return None if value is None or value == "" else Path(value)


def _regex(instance: object, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None:
        try:
            re.compile(value)
        except re.error as exc:
            raise ConfigError(f"{attribute.name}: not a regular expression: {exc}") from None


def _networks(instance: object, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None:
        AllowList.parse(value)  # raises ConfigError naming the bad part


def _address(instance: object, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None:
        parse_address(value)


def _address_list(value: str) -> list[str]:
    """``A;B`` (RocketMQ's ``namesrvAddr``) or ``A,B`` split into its parts (one trailing
    separator allowed, as RocketMQ's split drops it)."""
    parts = [part.strip() for part in re.split(r"[;,]", value)]
    if len(parts) > 1 and not parts[-1]:
        parts.pop()
    return parts


def _addresses(instance: object, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None:
        parts = _address_list(value)
        if not all(parts):
            raise ConfigError(f"{attribute.name}: an empty address in {value!r}")
        for part in parts:
            parse_address(part)


def _name(instance: object, attribute: attrs.Attribute[Any], value: str) -> None:
    if not value or value != value.strip():
        raise ConfigError(f"{attribute.name} must be a non-empty name, got {value!r}")


def _optional_non_negative(
    instance: object, attribute: attrs.Attribute[Any], value: int | None
) -> None:
    if value is not None and value < 0:
        raise ConfigError(f"{attribute.name} must be >= 0, got {value}")


def _host(instance: object, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None and (
        not value or any(c in value for c in " ,/[]") or value.count(":") == 1
    ):
        raise ConfigError(f"{attribute.name} must be a host name or IP address, got {value!r}")


MAX_TOPIC_QUEUES = 1024
"""Most queues per topic on a broker: what a name server accepts in a registration and a
consumer follows in a route (RocketMQ's brokers use 4 to 16)."""


def _queue_count(instance: object, attribute: attrs.Attribute[Any], value: int) -> None:
    if not 1 <= value <= MAX_TOPIC_QUEUES:
        raise ConfigError(f"{attribute.name} must be in 1..{MAX_TOPIC_QUEUES}, got {value}")


def _at_least_one(instance: object, attribute: attrs.Attribute[Any], value: int) -> None:
    if value < 1:
        raise ConfigError(f"{attribute.name} must be >= 1 (the master itself), got {value}")


def _index_entries(instance: object, attribute: attrs.Attribute[Any], value: int) -> None:
    if value < 2:
        raise ConfigError(f"{attribute.name} must be >= 2 (entry 0 is never used), got {value}")


def _divergence(instance: object, attribute: attrs.Attribute[Any], value: str) -> None:
    if value not in ("refuse", "truncate"):
        raise ConfigError(f"{attribute.name} must be refuse or truncate, got {value!r}")


@attrs.frozen
class BrokerConfig:
    """One broker's settings (defaults as RocketMQ's, see docs/protocol.md).

    Attributes:
        broker_role: ASYNC_MASTER, SYNC_MASTER or SLAVE.
        store_path_root_dir: the store directory (``commitlog/``, ``consumequeue/``, ...).
        listen_host, listen_port: the broker port for producers and consumers (10911).
        ha_listen_host, ha_listen_port: the HA port a master accepts slaves on (10912).
        ha_master_address: ``host:port`` of the master's HA port (a slave's setting).
        ha_send_heartbeat_interval: seconds of silence before a heartbeat (5).
        ha_housekeeping_interval: seconds without input before a connection is closed (20).
        ha_transfer_batch_size: most body bytes per transfer frame (32 KiB).
        ha_sendfile: send transfer bodies with ``sendfile`` from the commit log's files on
            plain TCP (Netty's ``FileRegion``); False (the default): the mapped bytes are sent
            with gathering writes, as always over TLS. Measured (``bench/replication.py``):
            sendfile costs the master more CPU per GB (1.9-2.0 s against 1.3), each 32 KiB
            frame then taking a descriptor duplicate, a close and two system calls where the
            mapping's frames share one ``sendmsg``.
        ha_slave_fallbehind_max: a slave further behind than this is not counted healthy for
            SYNC puts (256 MiB).
        slave_timeout: how long a SYNC put waits for slaves (3 s) before FLUSH_SLAVE_TIMEOUT.
        in_sync_replicas: copies a SYNC put needs, the master included (2).
        reconnect_interval: a slave's wait between connection attempts (5 s).
        full_sync: a new slave (report 0) starts from the master's first file, not its last.
        ha_max_bytes_per_second: optional cap on bytes pushed per second to each slave.
        mapped_file_size_commit_log: commit log file size (1 GiB).
        flush_disk_type: ASYNC_FLUSH or SYNC_FLUSH.
        default_topic_queue_nums: queues a put with no queue id is spread over, round robin
            per topic (4; at most :data:`MAX_TOPIC_QUEUES`, what a name server accepts).
        disk_max_used_space_ratio: puts are refused (SERVICE_NOT_AVAILABLE, disk full) while
            the store's file system is used past this percentage (75; 1..100).
        tls_cert, tls_key: this broker's certificate and key (PEM): with them the HA port and
            the broker port speak TLS, and a slave presents them to its master.
        tls_ca: the CA to trust. A server then requires client certificates signed by it
            (mutual TLS); a slave checks its master's certificate against it.
        tls_replica_pattern: with mutual TLS, only slaves whose certificate has a name (subject
            CN or a SAN) matching this regular expression count as replicas for SYNC puts
            (default: any certificate of the CA).
        ha_allow, listen_allow: comma-separated networks (CIDR) the HA port and the broker
            port accept connections from (default: any).
        metrics_listen: ``HOST:PORT`` of the Prometheus endpoint (none by default).
        namesrv_addr: the name servers, ``HOST:PORT[;HOST:PORT...]`` (``namesrvAddr``; ``,``
            separates them too; none: no registration).
        broker_cluster_name: the cluster registered under (``brokerClusterName``).
        broker_name: the master/slave set (``brokerName``): a master and its slaves share it.
        broker_id: 0 for a master, 1 and up for a slave (``brokerId``; None: 0 for a master,
            1 for a slave).
        slave_read_enable: consumers may be sent to a slave (``slaveReadEnable``): set it on
            the master (whose pull answers suggest the slave) and on the slave (which otherwise
            sends them back to the master).
        which_broker_when_consume_slowly: the slave a pull answer suggests when the consumer is
            far behind (``whichBrokerWhenConsumeSlowly``, 1).
        access_message_in_memory_max_ratio: a consumer is far behind when the commit log bytes
            after its pull exceed this percentage of the physical memory
            (``accessMessageInMemoryMaxRatio``, 40).
        total_memory_bytes: the physical memory that ratio is of (None: the machine's).
        register_broker_interval: seconds between registrations with the name servers
            (``registerNameServerPeriod``, 30).
        slave_sync_interval: seconds between a slave's copies of its master's topic config,
            consumer offsets, delay offsets and subscription groups (10, the first 3 s after
            the master is known, as RocketMQ 4.9.8).
        flush_consumer_offset_interval: seconds between writes of the consumer offsets
            (``flushConsumerOffsetInterval``, 5).
        master_broker_address: ``HOST:PORT`` of the master's broker port, where a slave copies
            its metadata from when no name server tells it (None).
        broker_ip1: the host others reach this broker's port at, as registered with the name
            servers and written into records' store host (RocketMQ's ``brokerIP1``; default:
            the listen host, or 127.0.0.1 for a wildcard one).
        broker_ip2: the host others reach a master's HA port at, as registered (RocketMQ's
            ``brokerIP2``; default: ``broker_ip1``, else the HA listen host as above).
        delete_when, file_reserved_time, disk_space_clean_forcibly_ratio,
        clean_file_forcibly_enable, delete_commit_log_files_interval,
        delete_consume_queue_files_interval, destroy_mapped_file_interval_forcibly,
        clean_resource_interval: retention, RocketMQ's settings of the same names
            (``deleteWhen`` "04", ``fileReservedTime`` 72 h, ...; see
            :class:`~hanet.store.RetentionConfig` and :attr:`retention`).
        auto_create_topic_enable: a send to an unknown topic creates it (RocketMQ's
            ``autoCreateTopicEnable``, true); false: it answers TOPIC_NOT_EXIST.
        max_partial_bytes: bytes all connections of a port (the broker port, the HA port)
            may hold in unfinished frames together (None: the framework's 64 MiB; 0: no cap);
            a connection that needs more waits, see ``hanet.boot.serve``.
        acl_enable: check every broker port request against RocketMQ's ``plain_acl.yml``
            (``aclEnable``; off).
        acl_file: that file (``aclFile``, hanet's own key; default
            ``<store>/config/plain_acl.yml``).
        vip_channel: serve the broker port on ``listen_port - 2`` too (RocketMQ's VIP channel,
            where a RocketMQ slave copies its master's topics from; True; only for a fixed
            ``listen_port``).
        message_index_enable: build the index files (``messageIndexEnable``, True): messages
            found by key and unique id (QUERY_MESSAGE).
        ha_divergence: what a slave whose log goes past the consistent point with its
            master's epochs does (``haDivergence``, hanet's own key): ``refuse`` (the default:
            it does not follow, the point named in its log and status) or ``truncate`` (it
            truncates to the point, the cut bytes kept under ``<store>/cut/``, and follows).
        max_hash_slot_num, max_index_num: hash slots and entries per index file
            (``maxHashSlotNum`` 5,000,000, ``maxIndexNum`` 20,000,000); must match the files
            on disk.
    """

    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    store_path_root_dir: Path = Path("store")
    listen_host: str = "127.0.0.1"
    listen_port: int = attrs.field(default=10911, validator=_non_negative)
    ha_listen_host: str = "127.0.0.1"
    ha_listen_port: int = attrs.field(default=10912, validator=_non_negative)
    ha_master_address: str | None = None
    ha_send_heartbeat_interval: float = attrs.field(default=5.0, validator=_positive)
    ha_housekeeping_interval: float = attrs.field(default=20.0, validator=_positive)
    ha_transfer_batch_size: int = attrs.field(default=32 * 1024, validator=_positive)
    ha_sendfile: bool = False
    ha_slave_fallbehind_max: int = attrs.field(default=256 * 1024 * 1024, validator=_positive)
    slave_timeout: float = attrs.field(default=3.0, validator=_positive)
    in_sync_replicas: int = attrs.field(default=2, validator=_at_least_one)
    reconnect_interval: float = attrs.field(default=5.0, validator=_non_negative)
    full_sync: bool = False
    ha_max_bytes_per_second: int | None = attrs.field(default=None, validator=_positive)
    mapped_file_size_commit_log: int = attrs.field(default=1024 * 1024 * 1024, validator=_positive)
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    default_topic_queue_nums: int = attrs.field(default=4, validator=_queue_count)
    disk_max_used_space_ratio: int = attrs.field(default=75, validator=_percent)
    tls_cert: Path | None = attrs.field(default=None, converter=_optional_path)
    tls_key: Path | None = attrs.field(default=None, converter=_optional_path)
    tls_ca: Path | None = attrs.field(default=None, converter=_optional_path)
    tls_replica_pattern: str | None = attrs.field(default=None, validator=_regex)
    ha_allow: str | None = attrs.field(default=None, validator=_networks)
    listen_allow: str | None = attrs.field(default=None, validator=_networks)
    metrics_listen: str | None = attrs.field(default=None, validator=_address)
    namesrv_addr: str | None = attrs.field(default=None, validator=_addresses)
    broker_cluster_name: str = attrs.field(default="DefaultCluster", validator=_name)
    broker_name: str = attrs.field(default="broker-a", validator=_name)
    broker_id: int | None = attrs.field(default=None, validator=_optional_non_negative)
    slave_read_enable: bool = False
    which_broker_when_consume_slowly: int = attrs.field(default=1, validator=_non_negative)
    access_message_in_memory_max_ratio: int = attrs.field(default=40, validator=_percent)
    total_memory_bytes: int | None = attrs.field(default=None, validator=_positive)
    register_broker_interval: float = attrs.field(default=30.0, validator=_positive)
    slave_sync_interval: float = attrs.field(default=10.0, validator=_positive)
    flush_consumer_offset_interval: float = attrs.field(default=5.0, validator=_positive)
    master_broker_address: str | None = attrs.field(default=None, validator=_address)
    broker_ip1: str | None = attrs.field(default=None, validator=_host)
    broker_ip2: str | None = attrs.field(default=None, validator=_host)
    delete_when: str = "04"
    file_reserved_time: float = 72.0
    disk_space_clean_forcibly_ratio: float = 0.85
    clean_file_forcibly_enable: bool = True
    delete_commit_log_files_interval: float = 0.1
    delete_consume_queue_files_interval: float = 0.1
    destroy_mapped_file_interval_forcibly: float = 120.0
    clean_resource_interval: float = 10.0
    auto_create_topic_enable: bool = True
    max_partial_bytes: int | None = attrs.field(default=None, validator=_optional_non_negative)

    acl_enable: bool = False
    acl_file: Path | None = attrs.field(default=None, converter=_optional_path)
    vip_channel: bool = True
    message_index_enable: bool = True
    max_hash_slot_num: int = attrs.field(default=5_000_000, validator=_positive)
    max_index_num: int = attrs.field(default=20_000_000, validator=_index_entries)
    ha_divergence: str = attrs.field(default="refuse", validator=_divergence)

    @property
    def retention(self) -> RetentionConfig:
        """The retention settings (validated when the config is made)."""
        return RetentionConfig(
            delete_when=self.delete_when,
            file_reserved_time=self.file_reserved_time,
            disk_max_used_space_ratio=self.disk_max_used_space_ratio,
            disk_space_clean_forcibly_ratio=self.disk_space_clean_forcibly_ratio,
            clean_file_forcibly_enable=self.clean_file_forcibly_enable,
            delete_commit_log_files_interval=self.delete_commit_log_files_interval,
            delete_consume_queue_files_interval=self.delete_consume_queue_files_interval,
            destroy_mapped_file_interval_forcibly=self.destroy_mapped_file_interval_forcibly,
            clean_resource_interval=self.clean_resource_interval,
        )

    def __attrs_post_init__(self) -> None:
        try:
            self.retention  # noqa: B018 - validates the retention settings
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        broker_id = self.broker_id
        if broker_id is None:
            return
        if self.broker_role is BrokerRole.SLAVE and broker_id == 0:
            raise ConfigError("a slave's brokerId is 1 or more (0 is the master's)")
        if self.broker_role is not BrokerRole.SLAVE and broker_id != 0:
            raise ConfigError(f"a master's brokerId is 0, got {broker_id}")

    @property
    def effective_broker_id(self) -> int:
        """:attr:`broker_id`, or its default: 0 for a master, 1 for a slave."""
        if self.broker_id is not None:
            return self.broker_id
        return 1 if self.broker_role is BrokerRole.SLAVE else 0

    @property
    def namesrv_addresses(self) -> list[tuple[str, int]]:
        """:attr:`namesrv_addr` split into ``(host, port)`` pairs (empty when unset)."""
        if not self.namesrv_addr:
            return []
        return [parse_address(part) for part in _address_list(self.namesrv_addr)]

    @property
    def memory_bytes(self) -> int:
        """:attr:`total_memory_bytes`, or the machine's physical memory."""
        if self.total_memory_bytes is not None:
            return self.total_memory_bytes
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")

    @property
    def tls(self) -> TlsConfig | None:
        """The TLS settings, or None for plain TCP (RocketMQ's wire, unauthenticated).

        Raises:
            ConfigError: a key without a certificate or the reverse, or a missing file.
        """
        if self.tls_cert is None and self.tls_key is None and self.tls_ca is None:
            return None
        return TlsConfig(cert=self.tls_cert, key=self.tls_key, ca=self.tls_ca)

    def server_tls(self) -> ssl.SSLContext | None:
        """The context of this broker's ports: TLS when it has a certificate (mutual TLS when
        it also has a CA), None for plain TCP."""
        tls = self.tls
        return tls.server_context() if tls is not None and tls.cert is not None else None

    def client_tls(self) -> ssl.SSLContext | None:
        """The context a slave connects to its master with (None: plain TCP)."""
        tls = self.tls
        return tls.client_context() if tls is not None else None

    def is_replica(self, names: Sequence[str]) -> bool:
        """Whether a slave whose certificate carries ``names`` counts toward
        ``in_sync_replicas``: any slave without mutual TLS, otherwise one with a certificate
        (whose name matches :attr:`tls_replica_pattern` when it is set)."""
        if self.tls_ca is None:
            return True
        if not names:
            return False
        pattern = self.tls_replica_pattern
        return pattern is None or any(re.fullmatch(pattern, name) for name in names)

    @property
    def ha_master_host_port(self) -> tuple[str, int]:
        """The master's HA address split, or ConfigError if unset."""
        if not self.ha_master_address:
            raise ConfigError("a slave needs haMasterAddress (--master-ha HOST:PORT)")
        return parse_address(self.ha_master_address)
