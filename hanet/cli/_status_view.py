"""How ``hanet status`` shows a broker's status and a cluster: rich renderables built from
the status documents, without IO (``_client.py`` fetches the documents and prints these)."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table

from hanet.client import BrokerStatus, ClusterInfo
from hanet.ha import BrokerRole
from hanet.protocol import MASTER_ID

__all__ = ["cluster_renderable", "status_renderable"]


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover


def _dledger_table(status: BrokerStatus) -> Any:
    """The DLedger section: group, id, term, leader, commit index, peers' match index and lag."""
    info = status.dledger
    assert info is not None
    head = Table(show_header=False, box=None, pad_edge=False, title="dledger")
    head.add_row("group", info.group)
    head.add_row("id", info.id)
    head.add_row("term", str(info.term))
    leader = info.leader or "(unknown)"
    if info.leader_address:
        leader += f" (broker port {info.leader_address})"
    head.add_row("leader", leader)
    head.add_row("commit index", str(info.commit_index))
    head.add_row("applied / last", f"{info.applied_index} / {info.last_index}")
    table = Table(title="peers", title_justify="left")
    for column in ("id", "address", "connected", "match index", "lag"):
        table.add_column(column, justify="left" if column in ("id", "address") else "right")
    for p in info.peers:
        table.add_row(
            p.id, p.address, "yes" if p.connected else "no", str(p.match_index), str(p.lag)
        )
    return Group(head, table)


def _ago(seconds: float | None) -> str:
    return "never" if seconds is None else f"{seconds:.1f} s ago"


def _count(n: int, what: str) -> str:
    if n == 1:
        return f"{n} {what}"
    return f"{n} {what[:-1]}ies" if what.endswith("y") else f"{n} {what}s"


def _rounds(done: int, failed: int, what: str) -> str:
    return _count(done, what) + (f", {failed} failed" if failed else "")


def _offsets_row(head: Any, status: BrokerStatus) -> None:
    """The consumer offsets: groups, entries, when written, a failing write."""
    info = status.consumer_offsets
    if info is None:
        return
    written = (
        "not written since start"
        if info.last_persisted_ago is None
        else f"written {_ago(info.last_persisted_ago)}"
    )
    unsaved = ", unsaved commits" if info.dirty else ""
    head.add_row(
        "consumer offsets",
        f"{_count(info.groups, 'group')}, {_count(info.entries, 'topic@group entry')}, "
        f"{written}{unsaved}",
    )
    if info.last_error:
        head.add_row("offsets not written", info.last_error)
    for group in status.consumer_groups:
        members = group.members
        head.add_row(
            f"consumer group {group.group}",
            f"{_count(len(members), 'member')}: {', '.join(members)}",
        )


def _cluster_table(status: BrokerStatus) -> Any | None:
    """The cluster section: the registration with the name servers and a slave's metadata
    sync (None when the status has neither)."""
    cluster, sync = status.cluster, status.metadata_sync
    if cluster is None and sync is None:
        return None
    table = Table(
        show_header=False, box=None, pad_edge=False, title="cluster", title_justify="left"
    )
    if cluster is not None:
        table.add_row("name", cluster.name)
        table.add_row("broker", f"{cluster.broker_name} id {cluster.broker_id}")
        table.add_row("name servers", ", ".join(cluster.name_servers))
        rounds = _rounds(cluster.registrations, cluster.failures, "round")
        table.add_row("registered", f"{_ago(cluster.last_registered_ago)} ({rounds})")
        if cluster.last_error:
            table.add_row("registration failing", cluster.last_error)
        if status.role == BrokerRole.SLAVE.value:
            named = cluster.master_address or "(no master registered)"
            if cluster.master_ha_address:
                named += f", HA port {cluster.master_ha_address}"
            table.add_row("master (name server)", named)
    if sync is not None:
        rounds = _rounds(sync.syncs, sync.failures, "sync")
        table.add_row(
            "metadata sync",
            f"from {sync.master_address or '(master unknown)'}: "
            f"{_ago(sync.last_synced_ago)} ({rounds}); "
            f"{_count(sync.topics, 'topic')}, {_count(sync.offset_entries, 'offset entry')}",
        )
        if sync.last_error:
            table.add_row("sync failing", sync.last_error)
    return table


def status_renderable(status: BrokerStatus) -> Any:
    """A rich renderable of a status (a table per section)."""
    head = Table(show_header=False, box=None, pad_edge=False)
    head.add_row("role", status.role)
    if status.broker_address:
        head.add_row("broker port", status.broker_address)
    if status.ha_address:
        head.add_row("HA port", status.ha_address)
    head.add_row("offsets", f"{status.min_offset} .. {status.max_offset}")
    head.add_row("flushed", str(status.flushed_offset))
    head.add_row("dispatched", str(status.dispatched_offset))
    if status.epoch is not None:
        head.add_row("epoch", str(status.epoch))
    if status.dispatch_error is not None:
        error = status.dispatch_error
        head.add_row("dispatch stopped", f"at {error.offset}: {error.reason}")
    for damaged in status.damaged_ranges:  # refused until repaired (--repair-from)
        head.add_row("damaged", f"[{damaged.start}, {damaged.end}): {damaged.reason}")
    for slave in status.diverged_slaves:  # its epoch check found its log diverged
        head.add_row(
            "slave diverged",
            f"{slave.address}: its log goes on to {slave.slave_end} past the consistent point "
            f"{slave.diverged_at} (this master's log ends at {slave.master_end}; its epochs "
            f"{slave.slave_epochs}); {_count(slave.checks, 'check')}, the last "
            f"{_ago(slave.last_seen_ago)}",
        )
    if status.role != BrokerRole.SLAVE.value:
        head.add_row("puts", str(status.puts))
        if status.replicated_offset is not None and status.replicated_offset >= 0:
            head.add_row("replicated", str(status.replicated_offset))
    if status.master is not None:
        link = status.master
        state = "connected" if link.connected else "disconnected"
        reason = f" (last close: {link.last_close_reason})" if link.last_close_reason else ""
        head.add_row("master", f"{link.address} {state}, {link.connects} connects{reason}")
        if link.diverged:
            head.add_row(
                "diverged",
                f"the master refuses offset {link.refused_offset}: "
                "hanet slave --truncate-to OFFSET or --resync",
            )
        if link.epoch_check:  # a divergence's names the offset
            diverged = link.epoch_diverged_at is not None
            head.add_row("epochs diverged" if diverged else "epochs", link.epoch_check)
        if link.error:
            head.add_row("stopped", link.error)
    _offsets_row(head, status)
    parts: list[Any] = [head]
    cluster = _cluster_table(status)
    if cluster is not None:
        parts.append(cluster)
    if status.dledger is not None:
        return Group(*parts, _dledger_table(status))
    if status.role != BrokerRole.SLAVE.value:
        table = Table(title="slaves", title_justify="left")
        for column in ("address", "state", "ack offset", "lag", "speed"):
            if column == "state":  # a close reason is shown whole, folded over lines
                table.add_column(column, justify="left", overflow="fold", ratio=1)
            else:
                table.add_column(column, justify="right", no_wrap=True)
        for s in status.slaves:
            table.add_row(
                s.address,
                s.state,
                str(s.ack_offset),
                _human_bytes(s.lag_bytes),
                f"{_human_bytes(s.bytes_per_second)}/s",
            )
        for s in status.closed_slaves:
            table.add_row(s.address, f"[dim]{s.state}[/dim]", str(s.ack_offset), "", "")
        if not status.slaves and not status.closed_slaves:
            table.add_row("(none connected)", "", "", "", "")
        parts.append(table)
    return Group(*parts)


def cluster_renderable(cluster: ClusterInfo) -> Any:
    """A table per cluster of its registered brokers (GET_BROKER_CLUSTER_INFO): broker name,
    id, role (id 0: the master) and broker port."""
    by_cluster: dict[str, list[tuple[str, int, str]]] = {}
    for cluster_name, broker_name, broker_id, address in cluster.members():
        by_cluster.setdefault(cluster_name, []).append((broker_name, broker_id, address))
    if not by_cluster:
        return "no broker is registered with the name server"
    tables = []
    for name, members in sorted(by_cluster.items()):
        table = Table(title=f"cluster {name}", title_justify="left")
        for column in ("broker name", "id", "role", "address"):
            table.add_column(column, justify="right" if column == "id" else "left")
        for broker_name, broker_id, address in members:
            role = "master" if broker_id == MASTER_ID else "slave"
            table.add_row(broker_name, str(broker_id), role, address)
        tables.append(table)
    return Group(*tables)
