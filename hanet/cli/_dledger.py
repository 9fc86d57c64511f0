"""``hanet dledger``: a DLedger node (Raft-replicated commit log) with a broker port.

``hanet dledger --group G --id n0 --peers n0=127.0.0.1:40911,n1=...,n2=... --store DIR
--listen HOST:PORT [--flush ASYNC_FLUSH|SYNC_FLUSH] [--ready-file FILE]
[--tls-cert FILE --tls-key FILE --tls-ca FILE] [--peer-allow CIDR,...]``

- The peer port: with ``--tls-cert/--tls-key/--tls-ca`` members speak mutual TLS and each
  certificate names its member id (CN or SAN); on plain TCP a connection speaks for the members
  whose ``--peers`` host it comes from. ``--peer-allow`` closes other networks at accept.

- ``--peers`` gives every member's peer address (this node's included: it listens there);
  ``--listen`` is this node's broker port. Nodes tell each other their broker ports when they
  connect, so a follower's refusal of a send names the leader's broker address.
- The broker port speaks RocketMQ's remoting protocol, with the classic broker's dispatch
  table (:class:`hanet.broker.BrokerPort`): a send on the leader waits for the quorum commit
  (one Raft entry per message) and answers SUCCESS with the message's place in the node's
  commit log view; a follower or candidate answers SERVICE_NOT_AVAILABLE, "not master" and the
  leader's address when it knows it; FLUSH_SLAVE_TIMEOUT (WAIT_QUORUM_ACK_TIMEOUT) means the
  outcome is unknown. Pulls, offsets, consumer groups and HANET_STATUS are served by every
  node from its commit log view; the status has ``role`` LEADER / FOLLOWER / CANDIDATE and a
  ``dledger`` section (group, id, term, leader, commit index, peers' match index and lag).
- ``--store DIR`` holds ``dledger/`` (DLedger's data and index files) and the commit log view
  (``commitlog/``, ``consumequeue/``): ``hanet dump --store DIR`` and ``hanet verify`` work on it.
- Consumer offsets committed to a node are kept by that node in
  ``DIR/config/consumerOffset.json``, written every 5 s and at shutdown (they are not
  replicated through Raft).
- ``--namesrv A;B`` registers the node with name servers as RocketMQ's DLedger brokers: the
  leader as broker id 0 of ``--broker-name`` (default: the group), the others as slaves (id:
  the number in ``--id`` plus one), again at once when its role changes, so RocketMQ's clients
  find the leader through the routes.
- ``--acl-enable`` (or ``--acl-file FILE``) checks every broker port request against
  RocketMQ's ``plain_acl.yml`` (default ``DIR/config/plain_acl.yml``), as ``hanet master
  --acl-enable`` does: signed requests, per-topic and per-group permissions, reloaded within a
  second of a change; a file that does not load stops the start.

The broker port itself is :class:`hanet.broker.DLedgerBrokerService`.
"""

from __future__ import annotations

import argparse
import errno
import os
from functools import partial
from pathlib import Path
from typing import Any

import trio

from hanet.boot import AllowList, TlsConfig, run_until_stopped, serve_on
from hanet.broker import (
    ACL_FILE,
    DEFAULT_QUEUES,
    OFFSETS_FILE,
    SERVER_CHANNEL_MAX_IDLE,
    BrokerAcl,
    ConfigFileError,
    ConsumerOffsets,
    DLedgerBrokerService,
)
from hanet.channel import (
    format_address,
)
from hanet.client import NameServerClient
from hanet.dledger import (
    DEFAULT_DATA_FILE_SIZE,
    DEFAULT_INDEX_FILE_SIZE,
    DLedgerError,
    DLedgerNode,
    NodeConfig,
    RaftConfig,
    parse_peers,
)
from hanet.protocol import AclConfigError
from hanet.store import (
    FlushDiskType,
    StoreError,
)

from ._support import (
    EXIT_OK,
    fail,
    first_error,
    first_message,
    interrupted,
    parse_address,
    parse_addresses,
    parse_size,
    stop_status,
    write_ready_file,
)

__all__ = ["register", "run_dledger"]

OFFSETS_FLUSH_INTERVAL = 5.0
"""Seconds between writes of the consumer offsets (RocketMQ's flushConsumerOffsetInterval)."""


def register(subparsers: Any) -> None:
    """Add ``dledger`` to the ``hanet`` parser."""
    parser = subparsers.add_parser(
        "dledger",
        description="Run one node of a DLedger group (Raft): the leader answers puts once a "
        "majority stored them, followers answer SERVICE_NOT_AVAILABLE naming the leader's "
        "broker port, and a new leader is elected when the leader dies.",
    )
    parser.add_argument("--group", required=True, help="the DLedger group's name")
    parser.add_argument("--id", required=True, dest="node_id", help="this node's id")
    parser.add_argument(
        "--peers", required=True, metavar="ID=HOST:PORT,...",
        help="every member's peer address, this node's included",
    )  # fmt: skip
    parser.add_argument("--store", type=Path, required=True, metavar="DIR", help="store dir")
    parser.add_argument(
        "--listen", type=parse_address, required=True, metavar="HOST:PORT",
        help="this node's broker port",
    )  # fmt: skip
    parser.add_argument(
        "--flush", choices=[t.value for t in FlushDiskType], default="ASYNC_FLUSH",
        help="SYNC_FLUSH: fsync entries before they count toward a quorum (ASYNC_FLUSH)",
    )  # fmt: skip
    parser.add_argument(
        "--ready-file", type=Path, default=None, metavar="FILE",
        help="write the addresses as JSON once serving",
    )  # fmt: skip
    parser.add_argument(
        "--election-timeout", type=float, default=1.0, metavar="S",
        help="minimum election timeout, seconds (1.0; heartbeats every tenth of it)",
    )  # fmt: skip
    parser.add_argument(
        "--append-timeout", type=float, default=3.0, metavar="S",
        help="a put not committed within this answers WAIT_QUORUM_ACK_TIMEOUT (3.0)",
    )  # fmt: skip
    parser.add_argument(
        "--data-file-size", type=parse_size, default=DEFAULT_DATA_FILE_SIZE, metavar="BYTES",
        help="DLedger data file size (1G)",
    )  # fmt: skip
    parser.add_argument(
        "--index-file-size", type=parse_size, default=DEFAULT_INDEX_FILE_SIZE,
        metavar="BYTES", help="DLedger index file size, a multiple of 32 (160M)",
    )  # fmt: skip
    parser.add_argument(
        "--mapped-file-size", type=parse_size, default=1 << 30, metavar="BYTES",
        help="commit log view file size (1G)",
    )  # fmt: skip
    parser.add_argument(
        "--queues", type=int, default=DEFAULT_QUEUES, metavar="N",
        help=f"queues per topic for puts without a queue id ({DEFAULT_QUEUES})",
    )  # fmt: skip
    parser.add_argument(
        "--tls-cert", type=Path, default=None, metavar="FILE",
        help="this node's certificate (PEM) on the peer port; it must name the node's --id "
        "(CN or SAN); with --tls-key and --tls-ca: mutual TLS between members",
    )  # fmt: skip
    parser.add_argument(
        "--tls-key", type=Path, default=None, metavar="FILE", help="the key of --tls-cert (PEM)"
    )
    parser.add_argument(
        "--tls-ca", type=Path, default=None, metavar="FILE",
        help="the CA of the members' certificates (peer port)",
    )  # fmt: skip
    parser.add_argument(
        "--peer-allow", default=None, metavar="CIDR[,CIDR...]",
        help="networks the peer port accepts (any)",
    )  # fmt: skip
    parser.add_argument(
        "--acl-enable", action="store_true",
        help="check every broker port request against RocketMQ's plain_acl.yml (aclEnable)",
    )  # fmt: skip
    parser.add_argument(
        "--acl-file", type=Path, default=None, metavar="FILE",
        help="RocketMQ's plain_acl.yml (turns the ACL on; default with --acl-enable: "
        "<store>/config/plain_acl.yml)",
    )  # fmt: skip
    parser.add_argument(
        "--max-partial-bytes", type=parse_size, default=None, metavar="BYTES",
        help="bytes all connections of a port (the peer port, the broker port) may hold in "
        "unfinished frames; one that needs more stops reading until there is room; appends "
        "are cut at half of it (64M; 0: no cap)",
    )  # fmt: skip
    parser.add_argument(
        "--namesrv", type=parse_addresses, default=None, metavar="HOST:PORT[;HOST:PORT...]",
        help="register with these name servers as RocketMQ's DLedger brokers do: the leader "
        "as broker id 0, the others as slaves, again at each role change (none)",
    )  # fmt: skip
    parser.add_argument(
        "--cluster", default="DefaultCluster", metavar="NAME",
        help="the cluster name registered (DefaultCluster)",
    )  # fmt: skip
    parser.add_argument(
        "--broker-name", default=None, metavar="NAME",
        help="the broker name registered, shared by the group's nodes (default: --group)",
    )  # fmt: skip
    parser.set_defaults(func=run_dledger)


async def run_dledger(args: argparse.Namespace) -> int:
    """``hanet dledger``: run until SIGTERM (0) or Ctrl-C."""
    try:
        peers = parse_peers(args.peers)
    except ValueError as exc:
        return fail(f"--peers: {exc}")
    if args.node_id not in peers:
        return fail(f"--id {args.node_id} is not one of --peers ({', '.join(peers)})")
    if args.election_timeout <= 0:
        return fail("--election-timeout must be > 0")
    if args.max_partial_bytes is not None and args.max_partial_bytes < 0:
        return fail(f"--max-partial-bytes must be >= 0 (0: no cap): {args.max_partial_bytes}")
    host, port = args.listen
    error: str | None = None
    try:
        listeners = await trio.open_tcp_listeners(port, host=host)
    except OSError as exc:
        return fail(f"cannot listen on the broker port {host}:{port}: {exc.strerror or exc}")
    bound = listeners[0].socket.getsockname()
    broker_address = format_address((bound[0], bound[1]))
    if bound[0] in ("0.0.0.0", "::"):
        broker_address = f"127.0.0.1:{bound[1]}"
    timeout = args.election_timeout
    try:
        tls = None
        if args.tls_cert or args.tls_key or args.tls_ca:
            tls = TlsConfig(cert=args.tls_cert, key=args.tls_key, ca=args.tls_ca)
        peer_allow = AllowList.parse(args.peer_allow) if args.peer_allow else None
        config = NodeConfig(
            group=args.group,
            node_id=args.node_id,
            peers=peers,
            store_dir=args.store,
            broker_addresses={args.node_id: broker_address},
            flush=FlushDiskType(args.flush),
            raft=RaftConfig(
                election_timeout=timeout,
                heartbeat_interval=timeout / 10,
                retransmit_timeout=timeout * 0.3,
                append_timeout=args.append_timeout,
            ),
            data_file_size=args.data_file_size,
            index_file_size=args.index_file_size,
            mapped_file_size=args.mapped_file_size,
            tls=tls,
            peer_allow=peer_allow,
            max_partial_bytes=args.max_partial_bytes,
        )
    except ValueError as exc:
        for listener in listeners:
            await listener.aclose()
        return fail(str(exc))
    acl = None
    if args.acl_enable or args.acl_file is not None:
        try:
            acl = BrokerAcl(args.acl_file or args.store / ACL_FILE)
        except AclConfigError as exc:
            for listener in listeners:
                await listener.aclose()
            return fail(str(exc))
    node = DLedgerNode(config)
    stopped = EXIT_OK

    async def serve() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(node.run)
            # Each node keeps the offsets committed to it (consumers commit to any node).
            offsets = ConsumerOffsets.load(args.store / OFFSETS_FILE)
            await nursery.start(offsets.run, OFFSETS_FLUSH_INTERVAL)
            service = DLedgerBrokerService(
                node,
                queues=args.queues,
                offsets=offsets,
                cluster_name=args.cluster,
                broker_name=args.broker_name,
            )
            service.broker_address = broker_address
            if acl is not None:
                service.port.set_guard(acl.guard)
                nursery.start_soon(acl.watch)
            nursery.start_soon(service.housekeeping)
            await nursery.start(service.run_holds)
            await nursery.start(
                partial(
                    serve_on,
                    service.initialize,
                    listeners,
                    name="broker port",
                    idle_timeout=SERVER_CHANNEL_MAX_IDLE,
                    max_partial_bytes=args.max_partial_bytes,
                )
            )
            if args.namesrv:
                await nursery.start(service.run_registration, NameServerClient(args.namesrv))
            peer = node.peer_address
            peer_text = format_address(peer) if peer else peers[args.node_id]
            print(
                f"dledger {args.group}/{args.node_id} ready: store {args.store}, "
                f"broker port {broker_address}, peer port {peer_text}",
                flush=True,
            )
            if args.ready_file is not None:
                write_ready_file(
                    args.ready_file,
                    {
                        "role": "DLEDGER",
                        "group": args.group,
                        "id": args.node_id,
                        "broker": broker_address,
                        "peer": peer_text,
                        "store": str(args.store),
                        "pid": os.getpid(),
                    },
                )

    try:
        stopped = stop_status(await run_until_stopped(serve))
    except* (StoreError, DLedgerError, ConfigFileError, OSError, ValueError) as group:
        error = first_message(group)
        first = first_error(group)
        if isinstance(first, OSError) and first.errno == errno.EADDRINUSE:
            error = f"cannot listen on the peer port {peers[args.node_id]}: {error}"
    return interrupted(stopped) if error is None else fail(error)
