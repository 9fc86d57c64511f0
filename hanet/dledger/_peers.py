"""Who a DLedger peer connection speaks for, and the handler that holds it to that.

:class:`Members` knows the group's members and how a connection proves it is one: with TLS,
the member ids its client certificate names (subject CN or SAN); on plain TCP, the members
whose ``--peers`` host resolves to the connection's source address (a member listed at a
wildcard address may connect from anywhere). Outgoing connections leave from this node's own
``--peers`` address when it is an IP address, so that check holds on multi-homed hosts and on
loopback (127.0.0.1, 127.0.0.2, ...).

:class:`PeerHandler` sits at the end of a peer connection's pipeline: a connection that
speaks for no member is closed when it becomes active (WARNING); the first member id it uses
among those it may speak for binds it; a frame claiming another sender, or addressed to
another node, closes it (ERROR), and nothing after that frame is delivered. Messages and HELLO
frames are handed to the node, in order, with the channel they came on (the node closes it
when the Raft core refuses a message), and the node is told when a read's frames were all
handed over.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Mapping
from typing import Any

import trio

from hanet.boot import certificate_names
from hanet.channel import (
    Channel,
    ChannelInboundHandler,
    HandlerContext,
    StreamChannel,
    format_address,
)

from ._codec import Hello
from ._messages import Envelope

__all__ = ["Members", "PeerHandler", "split_address"]

log = logging.getLogger("hanet.dledger")


def split_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT``) -> ``(host, port)``.

    Raises:
        ValueError: not ``HOST:PORT``.
    """
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"bad address {address!r}: expected HOST:PORT")
    return host.strip("[]"), int(port)


def _normal_ip(text: str) -> str:
    """An address as text, an IPv4-mapped IPv6 one as IPv4, without a zone."""
    text = text.split("%", maxsplit=1)[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return text
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def _unspecified(text: str) -> bool:
    try:
        return ipaddress.ip_address(text).is_unspecified
    except ValueError:
        return False


def _shown(address: object) -> str:
    return format_address(address) if isinstance(address, tuple) else "a peer"


class Members:
    """The members of a group other than this node, and how a connection proves it is one.

    Args:
        node_id: this node.
        peers: every member's id -> its ``--peers`` address (``host:port``).
    """

    def __init__(self, node_id: str, peers: Mapping[str, str]) -> None:
        self.node_id = node_id
        self.peers = dict(peers)
        self.others = frozenset(p for p in peers if p != node_id)
        # member id -> the addresses its --peers host resolves to (plain TCP's identity)
        self._hosts: dict[str, set[str]] = {}

    @property
    def local_address(self) -> str | None:
        """The address outgoing connections leave from: this node's own ``--peers`` host when
        it is an IP address other than a wildcard (None: the routing table decides)."""
        mine = split_address(self.peers[self.node_id])[0]
        try:
            if ipaddress.ip_address(mine).is_unspecified:
                return None
        except ValueError:
            return None
        return mine

    async def resolve(self) -> None:
        """Resolve each member's ``--peers`` host (plain TCP's identity); a host that does not
        resolve is logged, and connections cannot speak for that member."""
        for member in sorted(self.others):
            host, port = split_address(self.peers[member])
            try:
                infos = await trio.socket.getaddrinfo(host, port, type=trio.socket.SOCK_STREAM)
            except OSError as exc:
                log.warning("%s: cannot resolve %s (%s)", self.node_id, host, exc)
                continue
            self._hosts[member] = {_normal_ip(str(info[4][0])) for info in infos}

    def of_accepted(self, channel: StreamChannel, *, tls: bool) -> tuple[frozenset[str], str]:
        """The members an accepted connection may speak for, and why none when it is empty."""
        if tls:
            names = set(certificate_names(channel.stream))
            members = self.others & names
            return (
                members,
                f"its certificate names no member ({', '.join(sorted(names)) or 'none'})",
            )
        address = channel.remote_address
        host = _normal_ip(str(address[0])) if isinstance(address, tuple) else ""
        members = frozenset(
            m
            for m, ips in self._hosts.items()
            if host in ips or any(_unspecified(ip) for ip in ips)  # 0.0.0.0: anywhere
        )
        return members, f"no member's --peers address is on {host or 'its address'}"


class PeerHandler(ChannelInboundHandler):
    """The Raft end of a peer connection (see the module docstring).

    Args:
        node_id: this node.
        members: the ids this connection may speak for (empty: none, closed when active); the
            first one it uses binds it.
        why: why it may speak for none (logged when ``members`` is empty).
        deliver: hands a message and its channel to the node.
        deliver_hello: hands a HELLO and its channel to the node.
        read_done: called once the frames of a read were all delivered (the node releases
            what it handled in the reading task: one write per peer for the whole read).
    """

    def __init__(
        self,
        node_id: str,
        members: frozenset[str],
        why: str,
        deliver: Callable[[Envelope, Channel], None],
        deliver_hello: Callable[[Hello, Channel], None],
        read_done: Callable[[], None] | None = None,
    ) -> None:
        self.node_id = node_id
        self.members = members
        self.bound: str | None = next(iter(members)) if len(members) == 1 else None
        self.why = why
        self._deliver = deliver
        self._deliver_hello = deliver_hello
        self._read_done = read_done
        self.closed = False  # by this handler: the rest of the read is dropped

    def channel_active(self, ctx: HandlerContext) -> None:
        if not self.members:
            log.warning(
                "%s: refused a peer connection from %s: %s",
                self.node_id,
                _shown(ctx.channel.remote_address),
                self.why,
            )
            self.closed = True
            ctx.close(f"not a member: {self.why}")
            return
        ctx.fire_channel_active()

    def _speaks_as(self, ctx: HandlerContext, source: str, target: str, what: str) -> bool:
        if self.bound is None and source in self.members:
            self.bound = source
        problem = None
        if source != self.bound:
            problem = f"claims to be {source!r} on a connection of {self.bound or self.members}"
        elif target != self.node_id:
            problem = f"is addressed to {target!r}"
        if problem is None:
            return True
        log.error(
            "%s: a %s from %s %s: closing the connection",
            self.node_id,
            what,
            _shown(ctx.channel.remote_address),
            problem,
        )
        self.closed = True
        ctx.close(f"forged {what}: {problem}")
        return False

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        if self.closed:
            return
        if isinstance(msg, Envelope):
            if self._speaks_as(ctx, msg.source, msg.target, type(msg.message).__name__):
                self._deliver(msg, ctx.channel)
        elif isinstance(msg, Hello):
            # only the member this connection speaks for names its broker port: anyone else
            # could redirect NOT_LEADER answers (and producers) to a port of its own. Taken in
            # order with the connection's messages: after one the core refused, none is.
            if self._speaks_as(ctx, msg.source, msg.target, "HELLO") and msg.broker_address:
                self._deliver_hello(msg, ctx.channel)
        else:
            ctx.fire_channel_read(msg)

    def channel_read_complete(self, ctx: HandlerContext) -> None:
        if self._read_done is not None:
            self._read_done()
        ctx.fire_channel_read_complete()

    def exception_caught(self, ctx: HandlerContext, exc: BaseException) -> None:
        if self._read_done is not None:
            self._read_done()  # what the read handled before it failed still goes
        log.warning("%s: peer connection closed: %s", self.node_id, exc)
        ctx.close(f"{type(exc).__name__}: {exc}")
