"""``broker.conf``: RocketMQ's properties file, read onto a :class:`~hanet.ha.BrokerConfig`.

Keys are RocketMQ's names (``brokerRole``, ``haListenPort``, ...); durations are milliseconds
as in RocketMQ and become seconds (``fileReservedTime`` stays hours, ``deleteWhen`` hours of
day, ``diskSpaceCleanForciblyRatio`` a fraction as RocketMQ's system property of that name).
Keys hanet does not use are accepted with one WARNING listing them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from hanet.errors import ConfigError
from hanet.ha import BrokerConfig, BrokerRole
from hanet.store import FlushDiskType

__all__ = ["apply_properties", "load_properties", "parse_properties"]

log = logging.getLogger("hanet.broker")


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
    "diskMaxUsedSpaceRatio": ("disk_max_used_space_ratio", int),
    "tlsCertPath": ("tls_cert", Path),
    "tlsKeyPath": ("tls_key", Path),
    "tlsTrustCertPath": ("tls_ca", Path),
    "tlsReplicaPattern": ("tls_replica_pattern", str),
    "haAllow": ("ha_allow", str),
    "listenAllow": ("listen_allow", str),
    "metricsListen": ("metrics_listen", str),
    "namesrvAddr": ("namesrv_addr", str),
    "brokerClusterName": ("broker_cluster_name", str),
    "brokerName": ("broker_name", str),
    "brokerId": ("broker_id", int),
    "slaveReadEnable": ("slave_read_enable", _bool),
    "whichBrokerWhenConsumeSlowly": ("which_broker_when_consume_slowly", int),
    "accessMessageInMemoryMaxRatio": ("access_message_in_memory_max_ratio", int),
    "registerNameServerPeriod": ("register_broker_interval", _ms),
    "flushConsumerOffsetInterval": ("flush_consumer_offset_interval", _ms),
    "deleteWhen": ("delete_when", str),
    "fileReservedTime": ("file_reserved_time", float),
    "diskSpaceCleanForciblyRatio": ("disk_space_clean_forcibly_ratio", float),
    "cleanFileForciblyEnable": ("clean_file_forcibly_enable", _bool),
    "deleteCommitLogFilesInterval": ("delete_commit_log_files_interval", _ms),
    "deleteConsumeQueueFilesInterval": ("delete_consume_queue_files_interval", _ms),
    "destroyMapedFileIntervalForcibly": ("destroy_mapped_file_interval_forcibly", _ms),
    "cleanResourceInterval": ("clean_resource_interval", _ms),
    "autoCreateTopicEnable": ("auto_create_topic_enable", _bool),
    "aclEnable": ("acl_enable", _bool),
    # hanet's own (RocketMQ has no such setting):
    "slaveSyncInterval": ("slave_sync_interval", _ms),
    "masterBrokerAddress": ("master_broker_address", str),
    "brokerIP2": ("broker_ip2", str),
    "totalMemoryBytes": ("total_memory_bytes", int),
    "maxPartialBytes": ("max_partial_bytes", int),
    "aclFile": ("acl_file", Path),
    "vipChannel": ("vip_channel", _bool),
    # the index files (RocketMQ's names)
    "messageIndexEnable": ("message_index_enable", _bool),
    "maxHashSlotNum": ("max_hash_slot_num", int),
    "maxIndexNum": ("max_index_num", int),
    "haDivergence": ("ha_divergence", str),
}

# Keys hanet does not use are accepted with one warning listing them (RocketMQ has hundreds of
# settings), as the README says: none is ignored quietly.


def parse_properties(lines: Iterable[str], source: str) -> dict[str, str]:
    """``key=value`` (or ``key: value``) lines as a dict; blank lines and ``#``/``!`` comments
    skipped.

    Raises:
        ConfigError: a line that is neither, naming ``source`` and the line number.
    """
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

    Durations are milliseconds as in RocketMQ. Keys hanet does not use (RocketMQ has hundreds:
    ``sendMessageThreadPoolNums``, ...) are accepted with one WARNING listing them. As in
    RocketMQ, ``haListenPort`` defaults to ``listenPort + 1``.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from exc
    return apply_properties(parse_properties(text.splitlines(), str(path)), base, str(path))


def apply_properties(
    values: Mapping[str, str], base: BrokerConfig | None = None, source: str = "config"
) -> BrokerConfig:
    """Apply RocketMQ-named settings to ``base`` (see :func:`load_properties`)."""
    changes: dict[str, Any] = {}
    unused: list[str] = []
    for key, value in values.items():
        entry = _PROPERTIES.get(key)
        if entry is None:
            unused.append(key)
            continue
        name, convert = entry
        try:
            changes[name] = convert(value)
        except ValueError as exc:
            raise ConfigError(f"{source}: bad value for {key}: {value!r} ({exc})") from exc
    if unused:
        log.warning("%s: settings hanet does not use, ignored: %s", source, ", ".join(unused))
    if "listen_port" in changes and "ha_listen_port" not in changes and changes["listen_port"]:
        changes["ha_listen_port"] = changes["listen_port"] + 1
    try:
        return attrs.evolve(base if base is not None else BrokerConfig(), **changes)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{source}: {exc}") from exc
