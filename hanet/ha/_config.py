"""Broker and replication settings, with RocketMQ's defaults and ``broker.conf`` names.

Every field is a config attribute, a CLI flag (``--ha-transfer-batch-size``) and, under its
RocketMQ name, a key of a ``broker.conf``-style properties file (``haTransferBatchSize``).
Durations are seconds here; RocketMQ writes them in milliseconds, and :func:`load_properties`
converts.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

__all__ = [
    "BrokerConfig",
    "BrokerRole",
    "ConfigError",
    "FlushDiskType",
    "load_properties",
    "parse_host_port",
]


class ConfigError(ValueError):
    """A setting is missing, unknown or out of range."""


class BrokerRole(enum.Enum):
    """RocketMQ's broker roles."""

    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"

    @property
    def is_master(self) -> bool:
        return self is not BrokerRole.SLAVE


class FlushDiskType(enum.Enum):
    """When a put counts as durable on the broker's own disk."""

    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


def _positive(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and value <= 0:
        raise ConfigError(f"{attribute.name} must be > 0, got {value}")


def _non_negative(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value < 0:
        raise ConfigError(f"{attribute.name} must be >= 0, got {value}")


def _at_least_one(instance: object, attribute: attrs.Attribute[Any], value: int) -> None:
    if value < 1:
        raise ConfigError(f"{attribute.name} must be >= 1 (the master itself), got {value}")


@attrs.frozen
class BrokerConfig:
    """One broker's settings (defaults as RocketMQ's, see PROTOCOL.md).

    Attributes:
        broker_role: ASYNC_MASTER, SYNC_MASTER or SLAVE.
        store_path_root_dir: the store directory (``commitlog/``, ``consumequeue/``, ...).
        listen_host, listen_port: the broker port for producers and consumers (10911).
        ha_listen_host, ha_listen_port: the HA port a master accepts slaves on (10912).
        ha_master_address: ``host:port`` of the master's HA port (a slave's setting).
        ha_send_heartbeat_interval: seconds of silence before a heartbeat (5).
        ha_housekeeping_interval: seconds without input before a connection is closed (20).
        ha_transfer_batch_size: most body bytes per transfer frame (32 KiB).
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
            per topic (4).
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
    ha_slave_fallbehind_max: int = attrs.field(default=256 * 1024 * 1024, validator=_positive)
    slave_timeout: float = attrs.field(default=3.0, validator=_positive)
    in_sync_replicas: int = attrs.field(default=2, validator=_at_least_one)
    reconnect_interval: float = attrs.field(default=5.0, validator=_non_negative)
    full_sync: bool = False
    ha_max_bytes_per_second: int | None = attrs.field(default=None, validator=_positive)
    mapped_file_size_commit_log: int = attrs.field(default=1024 * 1024 * 1024, validator=_positive)
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    default_topic_queue_nums: int = attrs.field(default=4, validator=_positive)

    @property
    def ha_master_host_port(self) -> tuple[str, int]:
        """The master's HA address split, or ConfigError if unset."""
        if not self.ha_master_address:
            raise ConfigError("a slave needs haMasterAddress (--master-ha HOST:PORT)")
        return parse_host_port(self.ha_master_address)


# RocketMQ property name -> (field name, converter).
def _ms(value: str) -> float:
    return int(value) / 1000.0


def _bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ValueError(f"not a boolean: {value!r}")


_PROPERTIES: dict[str, tuple[str, Any]] = {
    "brokerRole": ("broker_role", BrokerRole),
    "storePathRootDir": ("store_path_root_dir", Path),
    "listenPort": ("listen_port", int),
    "haListenPort": ("ha_listen_port", int),
    "haMasterAddress": ("ha_master_address", str),
    "haSendHeartbeatInterval": ("ha_send_heartbeat_interval", _ms),
    "haHousekeepingInterval": ("ha_housekeeping_interval", _ms),
    "haTransferBatchSize": ("ha_transfer_batch_size", int),
    "haSlaveFallbehindMax": ("ha_slave_fallbehind_max", int),
    "slaveTimeout": ("slave_timeout", _ms),
    "inSyncReplicas": ("in_sync_replicas", int),
    "haFullSync": ("full_sync", _bool),
    "haMaxBytesPerSecond": ("ha_max_bytes_per_second", int),
    "mappedFileSizeCommitLog": ("mapped_file_size_commit_log", int),
    "flushDiskType": ("flush_disk_type", FlushDiskType),
    "brokerIP1": ("listen_host", str),
    "defaultTopicQueueNums": ("default_topic_queue_nums", int),
}

# Keys of a real broker.conf that mean nothing to hanet; accepted and ignored.
_IGNORED = frozenset(
    {
        "brokerClusterName",
        "brokerName",
        "brokerId",
        "namesrvAddr",
        "deleteWhen",
        "fileReservedTime",
        "autoCreateTopicEnable",
        "autoCreateSubscriptionGroup",
        "storePathCommitLog",
        "storePathConsumeQueue",
        "mappedFileSizeConsumeQueue",
        "brokerIP2",
    }
)


def _parse_lines(lines: Iterable[str], source: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        for sep in ("=", ":"):
            if sep in line:
                key, _, value = line.partition(sep)
                break
        else:
            raise ConfigError(f"{source}:{number}: expected key=value, got {line!r}")
        values[key.strip()] = value.strip()
    return values


def load_properties(path: Path, base: BrokerConfig | None = None) -> BrokerConfig:
    """Read a ``broker.conf``-style file on top of ``base`` (defaults when None).

    Durations are milliseconds as in RocketMQ. Unknown keys are a :class:`ConfigError`, except
    RocketMQ keys that do not apply to hanet (``brokerName``, ``namesrvAddr``, ...).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from exc
    return apply_properties(_parse_lines(text.splitlines(), str(path)), base, str(path))


def apply_properties(
    values: Mapping[str, str], base: BrokerConfig | None = None, source: str = "config"
) -> BrokerConfig:
    """Apply RocketMQ-named settings to ``base``."""
    changes: dict[str, Any] = {}
    for key, value in values.items():
        if key in _IGNORED:
            continue
        entry = _PROPERTIES.get(key)
        if entry is None:
            raise ConfigError(f"{source}: unknown setting {key!r}")
        name, convert = entry
        try:
            changes[name] = convert(value)
        except ValueError as exc:
            raise ConfigError(f"{source}: bad value for {key}: {value!r} ({exc})") from exc
    try:
        return attrs.evolve(base if base is not None else BrokerConfig(), **changes)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{source}: {exc}") from exc


def parse_host_port(text: str, default_host: str = "127.0.0.1") -> tuple[str, int]:
    """Split ``HOST:PORT`` (``[v6]:PORT`` and ``:PORT`` too) with a clear error."""
    host, sep, port_text = text.rpartition(":")
    if not sep:
        raise ConfigError(f"expected HOST:PORT, got {text!r}")
    host = host.strip("[]") or default_host
    try:
        port = int(port_text)
    except ValueError:
        raise ConfigError(f"bad port in {text!r}") from None
    if not 0 <= port <= 65535:
        raise ConfigError(f"port out of range in {text!r}")
    return host, port
