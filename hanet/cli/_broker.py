"""The broker verbs: ``hanet master`` and ``hanet slave``.

- ``hanet master --store DIR --listen HOST:PORT --ha-listen HOST:PORT [--role ...]`` and
  ``hanet slave --store DIR --master-ha HOST:PORT [--listen HOST:PORT]`` run a broker until
  Ctrl-C (exit 130) or SIGTERM (exit 0), both shutting down cleanly (store closed, ``abort``
  removed). Settings come from the defaults, then ``--config FILE`` (``broker.conf`` keys), then
  the flags. ``--ready-file FILE`` writes the bound addresses as JSON once serving (port 0
  picks free ports).
- With ``--namesrv HOST:PORT[,...]`` both register with the name servers every 30 s
  (``--cluster``, ``--broker-name``, ``--broker-id``) and a slave may leave out
  ``--master-ha``: it learns (and follows) its master from the registration answer. A slave
  copies its master's topics and consumer offsets from the master's broker port (named by
  the name server, or ``--master-broker HOST:PORT``). ``--slave-read-enable`` lets pull
  answers send consumers far behind to a slave.
- ``hanet slave --truncate-to OFFSET`` or ``--resync`` first truncates or empties the slave's
  store (a slave ahead of its master, after the master lost data), prints what it did, then
  replicates; a commit log file size other than the master's stops the slave (exit 2).
- ``hanet put``, ``hanet pull``, ``hanet status`` are clients of the broker port
  (:mod:`hanet.cli._client`); ``hanet demo`` runs everything (:mod:`hanet.cli._demo`).

Errors (bad flags or config, a store locked by another process, a refused connection) print one
line on stderr and exit 2; a put run with statuses other than PUT_OK exits 1.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import trio

from hanet.boot import run_until_stopped
from hanet.broker import (
    Broker,
    BrokerAddresses,
    ConfigFileError,
    MetricsListenError,
    RepairError,
    load_properties,
    parse_properties,
    repair_store,
)
from hanet.channel import format_address
from hanet.errors import ConfigError, HanetError
from hanet.ha import BrokerConfig, BrokerRole, HASlave
from hanet.store import (
    CommitLogStore,
    FlushDiskType,
    StoreConfig,
    StoreError,
    StoreRole,
    recorded_file_size,
)

from ._credentials import add_credentials, signed_verb
from ._heap import freeze_startup_heap
from ._support import (
    EXIT_OK,
    fail,
    first_error,
    first_message,
    interrupted,
    parse_address,
    parse_size,
    stop_status,
    write_ready_file,
)

__all__ = ["build_config", "register"]

log = logging.getLogger("hanet.broker")

# -- broker settings ----------------------------------------------------------------------


@attrs.frozen
class _Flag:
    flags: tuple[str, ...]
    field: str
    type: Callable[[str], Any]
    help: str
    metavar: str | None = None
    choices: tuple[str, ...] | None = None


_COMMON_FLAGS = (
    _Flag(("--store",), "store_path_root_dir", Path, "store directory (./store)", "DIR"),
    _Flag(
        ("--mapped-file-size",), "mapped_file_size_commit_log", parse_size,
        "commit log file size (1G; K/M/G suffixes; default: what the store was created with)",
        "BYTES",
    ),
    _Flag(
        ("--flush",), "flush_disk_type", FlushDiskType, "ASYNC_FLUSH (default) or SYNC_FLUSH",
        choices=tuple(t.value for t in FlushDiskType),
    ),
    _Flag(
        ("--heartbeat-interval", "--ha-send-heartbeat-interval"), "ha_send_heartbeat_interval",
        float, "seconds of silence before an HA heartbeat (5)", "S",
    ),
    _Flag(
        ("--housekeeping-interval", "--ha-housekeeping-interval"), "ha_housekeeping_interval",
        float, "seconds without input before an HA connection is closed (20)", "S",
    ),
    _Flag(
        ("--transfer-batch-size", "--ha-transfer-batch-size"), "ha_transfer_batch_size", parse_size,
        "most bytes per HA transfer frame (32K)", "BYTES",
    ),
    _Flag(
        ("--disk-max-used-space-ratio",), "disk_max_used_space_ratio", int,
        "refuse puts while the store's disk is used past this percentage (75; 1..100)", "PERCENT",
    ),
    _Flag(
        ("--delete-when",), "delete_when", str,
        "hours of day when expired commit log files are deleted, e.g. 04;16 (04)", "HH[;HH...]",
    ),
    _Flag(
        ("--file-reserved-time",), "file_reserved_time", float,
        "hours a commit log file is kept after its last write (72)", "HOURS",
    ),
    _Flag(
        ("--disk-space-clean-forcibly-ratio",), "disk_space_clean_forcibly_ratio", float,
        "past this fraction of the disk used, commit log files of any age are deleted, even "
        "ones a slave has not received (0.85)", "FRACTION",
    ),
    _Flag(
        ("--tls-cert",), "tls_cert", Path,
        "this broker's certificate (PEM): serve TLS, present it to the master (none: plain TCP)",
        "FILE",
    ),
    _Flag(("--tls-key",), "tls_key", Path, "the private key of --tls-cert (PEM)", "FILE"),
    _Flag(
        ("--tls-ca",), "tls_ca", Path,
        "trust this CA; the ports then require client certificates it signed (mutual TLS)",
        "FILE",
    ),
    _Flag(
        ("--listen-allow",), "listen_allow", str,
        "networks the broker port accepts, e.g. 10.0.0.0/8,127.0.0.1 (any)", "CIDR[,CIDR...]",
    ),
    _Flag(
        ("--metrics-listen",), "metrics_listen", str,
        "serve Prometheus metrics on http://HOST:PORT/metrics (none)", "HOST:PORT",
    ),
    _Flag(
        ("--namesrv",), "namesrv_addr", str,
        "register with these name servers every 30 s (none; ';' or ',' between them)",
        "HOST:PORT[;HOST:PORT...]",
    ),
    _Flag(
        ("--cluster",), "broker_cluster_name", str,
        "the cluster name registered (DefaultCluster)", "NAME",
    ),
    _Flag(
        ("--broker-name",), "broker_name", str,
        "the master/slave set's name, shared by a master and its slaves (broker-a)", "NAME",
    ),
    _Flag(
        ("--broker-id",), "broker_id", int,
        "0 for the master, 1 and up for slaves (0 on a master, 1 on a slave)", "N",
    ),
    _Flag(
        ("--broker-ip",), "broker_ip1", str,
        "the host clients reach the broker port at, as registered (brokerIP1; default: the "
        "listen host, 127.0.0.1 for 0.0.0.0)", "HOST",
    ),
    _Flag(
        ("--max-partial-bytes",), "max_partial_bytes", parse_size,
        "bytes all connections of the broker port (and of the HA port) may hold in unfinished "
        "frames; one that needs more stops reading until there is room (64M; 0: no cap)",
        "BYTES",
    ),
    _Flag(
        ("--acl-file",), "acl_file", Path,
        "with --acl-enable: RocketMQ's plain_acl.yml (<store>/config/plain_acl.yml)", "FILE",
    ),
    _Flag(
        ("--broker-ip2",), "broker_ip2", str,
        "the host slaves reach the HA port at, as registered (brokerIP2; default: --broker-ip)",
        "HOST",
    ),
)  # fmt: skip

_MASTER_FLAGS = (
    _Flag(
        ("--role",), "broker_role", BrokerRole, "ASYNC_MASTER (default) or SYNC_MASTER",
        choices=(BrokerRole.ASYNC_MASTER.value, BrokerRole.SYNC_MASTER.value),
    ),
    _Flag(
        ("--slave-timeout",), "slave_timeout", float,
        "seconds a SYNC put waits for slaves before FLUSH_SLAVE_TIMEOUT (3)", "S",
    ),
    _Flag(
        ("--in-sync-replicas",), "in_sync_replicas", int,
        "copies a SYNC put needs, the master included (2)", "N",
    ),
    _Flag(
        ("--fallbehind-max", "--ha-slave-fallbehind-max"), "ha_slave_fallbehind_max", parse_size,
        "a slave further behind is not counted for SYNC puts (256M)", "BYTES",
    ),
    _Flag(
        ("--max-bytes-per-second", "--ha-max-bytes-per-second"), "ha_max_bytes_per_second",
        parse_size, "cap on bytes pushed per second to each slave (none)", "BYTES",
    ),
    _Flag(
        ("--queues", "--default-topic-queue-nums"), "default_topic_queue_nums", int,
        "queues a put without --queue is spread over (4)", "N",
    ),
    _Flag(
        ("--ha-allow",), "ha_allow", str,
        "networks the HA port accepts slaves from (any)", "CIDR[,CIDR...]",
    ),
    _Flag(
        ("--tls-replica-pattern",), "tls_replica_pattern", str,
        "with mutual TLS, only slaves whose certificate name matches this regular expression "
        "count for SYNC puts (any certificate of the CA)", "REGEX",
    ),
)  # fmt: skip

_SLAVE_FLAGS = (
    _Flag(
        ("--reconnect-interval",), "reconnect_interval", float,
        "seconds between connection attempts to the master (5)", "S",
    ),
    _Flag(
        ("--master-broker",), "master_broker_address", str,
        "the master's broker port, to copy its topics and consumer offsets from every 10 s "
        "(default: as the name server says)", "HOST:PORT",
    ),
    _Flag(
        ("--ha-divergence",), "ha_divergence", str,
        "when this slave's log goes past where its master's epochs part from its own: refuse "
        "(default: do not follow, name the offset) or truncate there (the cut bytes kept "
        "under <store>/cut/)", choices=("refuse", "truncate"),
    ),
)  # fmt: skip


def _add_flags(parser: argparse.ArgumentParser, flags: tuple[_Flag, ...]) -> None:
    for flag in flags:
        parser.add_argument(
            *flag.flags,
            dest=flag.field,
            type=str if flag.choices else flag.type,
            choices=flag.choices,
            default=None,
            metavar=flag.metavar,
            help=flag.help,
        )


def _add_service_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--slave-read-enable", action="store_true",
        help="consumers far behind may read from a slave (slaveReadEnable): set on the master "
        "and its slaves",
    )  # fmt: skip
    parser.add_argument(
        "--acl-enable", action="store_true",
        help="check every broker port request against RocketMQ's plain_acl.yml (aclEnable)",
    )  # fmt: skip
    add_credentials(parser, what="this broker's registrations and metadata copies")
    parser.add_argument(
        "--config", type=Path, default=None, metavar="FILE",
        help="broker.conf-style properties (RocketMQ names); flags override it",
    )  # fmt: skip
    parser.add_argument(
        "--ready-file", type=Path, default=None, metavar="FILE",
        help="write the bound addresses here as JSON once serving",
    )  # fmt: skip


def build_config(args: argparse.Namespace, role: BrokerRole | None = None) -> BrokerConfig:
    """Defaults, then ``--config FILE``, then the flags given.

    Raises:
        ConfigError: a bad file, key or value.
    """
    config = BrokerConfig()
    if getattr(args, "config", None) is not None:
        config = load_properties(args.config, config)
    changes: dict[str, Any] = {}
    for flag in (*_COMMON_FLAGS, *_MASTER_FLAGS, *_SLAVE_FLAGS):
        value = getattr(args, flag.field, None)
        if value is not None:
            changes[flag.field] = flag.type(value) if flag.choices else value
    listen = getattr(args, "listen", None)
    if listen is not None:
        changes["listen_host"], changes["listen_port"] = listen
    ha_listen = getattr(args, "ha_listen", None)
    if ha_listen is not None:
        changes["ha_listen_host"], changes["ha_listen_port"] = ha_listen
    master_ha = getattr(args, "master_ha", None)
    if master_ha is not None:
        changes["ha_master_address"] = master_ha
    if getattr(args, "full_sync", False):
        changes["full_sync"] = True
    if getattr(args, "slave_read_enable", False):
        changes["slave_read_enable"] = True
    if getattr(args, "acl_enable", False):
        changes["acl_enable"] = True
    if role is not None:
        changes["broker_role"] = role
    elif config.broker_role is BrokerRole.SLAVE and "broker_role" not in changes:
        changes["broker_role"] = BrokerRole.ASYNC_MASTER  # a master verb with a slave's conf
    try:
        config = attrs.evolve(config, **changes)
    except (TypeError, ValueError) as exc:
        raise ConfigError(str(exc)) from exc
    if "mapped_file_size_commit_log" not in changes and "mappedFileSizeCommitLog" not in (
        _config_keys(getattr(args, "config", None))
    ):  # neither the flag nor the file: the size the store was created with
        try:
            recorded = recorded_file_size(config.store_path_root_dir)
        except StoreError as exc:
            raise ConfigError(str(exc)) from exc
        if recorded is not None:
            config = attrs.evolve(config, mapped_file_size_commit_log=recorded)
    return config


def register(subparsers: Any) -> None:
    """Add the broker verbs (and ``demo``) to the ``hanet`` parser."""
    parser = subparsers.add_parser(
        "master",
        description="Run a master broker until Ctrl-C or SIGTERM.",
    )
    parser.add_argument(
        "--listen", type=parse_address, default=None, metavar="HOST:PORT",
        help="broker port for producers and consumers (127.0.0.1:10911; port 0: any)",
    )  # fmt: skip
    parser.add_argument(
        "--ha-listen", type=parse_address, default=None, metavar="HOST:PORT",
        help="HA port slaves connect to (127.0.0.1:10912; port 0: any)",
    )  # fmt: skip
    parser.add_argument(
        "--full-sync", action="store_true",
        help="a new slave starts from the first file, not the last",
    )  # fmt: skip
    parser.add_argument(
        "--repair-from", default=None, metavar="HOST:PORT",
        help="first repair the commit log's damaged ranges from a replica's broker port "
        "(HANET_READ_LOG): each record checked before it is written",
    )  # fmt: skip
    _add_flags(parser, _COMMON_FLAGS + _MASTER_FLAGS)
    _add_service_flags(parser)
    parser.set_defaults(func=signed_verb(run_master))

    parser = subparsers.add_parser(
        "slave",
        description="Replicate a master into a store (reconnecting forever) until Ctrl-C or "
        "SIGTERM; with --listen, serve pulls, offsets and HANET_STATUS (sends answer "
        "SERVICE_NOT_AVAILABLE).",
    )
    parser.add_argument(
        "--master-ha", type=str, default=None, metavar="HOST:PORT",
        help="the master's HA port (default with --namesrv: as the name server says)",
    )  # fmt: skip
    parser.add_argument(
        "--listen", type=parse_address, default=None, metavar="HOST:PORT",
        help="serve the broker port here (none unless this or listenPort in --config)",
    )  # fmt: skip
    start = parser.add_mutually_exclusive_group()
    start.add_argument(
        "--truncate-to", type=_offset, default=None, metavar="OFFSET",
        help="first truncate the store's commit log to OFFSET (a record boundary), e.g. the "
        "max offset of a master that lost its tail and took no puts since",
    )  # fmt: skip
    start.add_argument(
        "--resync", action="store_true",
        help="first delete the store's commit log and consume queues: start over as a new slave",
    )  # fmt: skip
    parser.add_argument(
        "--repair-from", default=None, metavar="HOST:PORT",
        help="first repair the store's damaged ranges from the master's (or another replica's) "
        "broker port (HANET_READ_LOG): each record checked before it is written",
    )  # fmt: skip
    _add_flags(parser, _COMMON_FLAGS + _SLAVE_FLAGS)
    _add_service_flags(parser)
    parser.set_defaults(func=signed_verb(run_slave))


def _offset(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an offset: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"an offset is >= 0, got {value}")
    return value


# -- master and slave -----------------------------------------------------------------------


def _ready_data(broker: Broker, addresses: BrokerAddresses) -> dict[str, Any]:
    def fmt(address: tuple[str, int] | None) -> str | None:
        return None if address is None else f"{address[0]}:{address[1]}"

    return {
        "role": broker.role.value,
        "broker": fmt(addresses.broker),
        "ha": fmt(addresses.ha),
        "metrics": fmt(addresses.metrics),
        "store": str(broker.config.store_path_root_dir),
        "pid": os.getpid(),
    }


async def _serve(broker: Broker, ready_file: Path | None) -> int:
    """Run the broker until SIGTERM (0) or Ctrl-C (130), both a clean shutdown."""
    config = broker.config
    error: str | None = None
    root = config.store_path_root_dir
    new_store = not root.exists()
    serving = False
    stopped = EXIT_OK

    async def serve() -> None:
        nonlocal serving
        async with trio.open_nursery() as nursery:
            addresses: BrokerAddresses = await nursery.start(broker.run)
            serving = True
            parts = [f"store {config.store_path_root_dir}"]
            if addresses.broker:
                parts.append(f"broker port {addresses.broker[0]}:{addresses.broker[1]}")
            if addresses.ha:
                parts.append(f"HA port {addresses.ha[0]}:{addresses.ha[1]}")
            if broker.slave is not None:
                master = broker.slave.master_address or "(from the name server)"
                parts.append(f"master {master}")
            log.info("%s ready: %s", broker.role.value, ", ".join(parts))
            freeze_startup_heap()
            if ready_file is not None:
                write_ready_file(ready_file, _ready_data(broker, addresses))

    try:
        stopped = stop_status(await run_until_stopped(serve))
    except* (StoreError, ConfigError, ConfigFileError, OSError) as group:
        error = first_message(group)
        first = first_error(group)
        if isinstance(first, MetricsListenError):
            error = f"cannot listen: {error} (metrics port {format_address(first.address)})"
        elif isinstance(first, OSError) and first.errno == errno.EADDRINUSE:
            ports = [f"broker port {config.listen_host}:{config.listen_port}"]
            if broker.role is not BrokerRole.SLAVE:
                ports.append(f"HA port {config.ha_listen_host}:{config.ha_listen_port}")
            error = f"cannot listen: {error} ({', '.join(ports)})"
    if error is not None and new_store and not serving:
        shutil.rmtree(root, ignore_errors=True)  # a failed start leaves no files behind
    return interrupted(stopped) if error is None else fail(error)


def _config_keys(path: Path | None) -> set[str]:
    """The keys a ``--config`` file sets (already validated by :func:`build_config`)."""
    if path is None:
        return set()
    return set(parse_properties(path.read_text(encoding="utf-8").splitlines(), str(path)))


async def run_master(args: argparse.Namespace) -> int:
    """``hanet master``."""
    try:
        config = build_config(args)
        if config.broker_role is BrokerRole.SLAVE:
            raise ConfigError("hanet master cannot run the SLAVE role (use hanet slave)")
        broker = Broker(config, repair_from=args.repair_from)
    except (ConfigError, ValueError) as exc:
        return fail(str(exc))
    if args.repair_from is not None:
        code = await _repair(config, StoreRole.MASTER, args.repair_from)
        if code:
            return code
    return await _serve(broker, args.ready_file)


async def _repair(config: BrokerConfig, role: StoreRole, replicas: str) -> int:
    """``--repair-from``: repair the store before the broker opens it (0, or a failure)."""
    try:
        await repair_store(_store_config(config, role), config.store_path_root_dir, replicas)
    except (RepairError, StoreError, HanetError) as exc:
        return fail(str(exc))
    return EXIT_OK


def _store_config(config: BrokerConfig, role: StoreRole) -> StoreConfig:
    """The store settings of ``config`` for a tool that opens the store before the broker."""
    return StoreConfig(
        mapped_file_size=config.mapped_file_size_commit_log,
        flush_disk_type=config.flush_disk_type,
        role=role,
        message_index_enable=config.message_index_enable,
        max_hash_slot_num=config.max_hash_slot_num,
        max_index_num=config.max_index_num,
    )


def _prepare_slave_store(config: BrokerConfig, truncate_to: int | None, resync: bool) -> None:
    """``--truncate-to`` / ``--resync``: open the store, change it, close it; prints what it
    did.

    Raises:
        StoreError: the store cannot be opened (locked, another file size, ...).
        ValueError: the offset is not a record boundary inside the data.
    """
    store_config = _store_config(config, StoreRole.SLAVE)
    root = config.store_path_root_dir
    with CommitLogStore.open(root, store_config) as store:
        before = f"[{store.min_offset}, {store.max_offset})"
        if resync:
            done = HASlave.empty_store(store)
        else:
            assert truncate_to is not None
            done = HASlave.truncate_store(store, truncate_to)
    flag = "--resync" if resync else f"--truncate-to {truncate_to}"
    log.warning("%s: store %s, commit log %s: %s", flag, root, before, done)


async def run_slave(args: argparse.Namespace) -> int:
    """``hanet slave``."""
    try:
        config = build_config(args, BrokerRole.SLAVE)
        if not config.namesrv_addr:
            config.ha_master_host_port  # noqa: B018 - validates the address
        listen = args.listen is not None or "listenPort" in _config_keys(args.config)
        broker = Broker(config, serve_broker_port=listen)
    except (ConfigError, ValueError) as exc:
        return fail(str(exc))
    if args.truncate_to is not None or args.resync:
        try:
            _prepare_slave_store(config, args.truncate_to, args.resync)
        except (StoreError, ValueError) as exc:
            return fail(str(exc))
    if args.repair_from is not None:
        code = await _repair(config, StoreRole.SLAVE, args.repair_from)
        if code:
            return code
    return await _serve(broker, args.ready_file)
