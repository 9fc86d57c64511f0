"""The name server's table of live brokers, sans-IO (RocketMQ's ``RouteInfoManager``).

Brokers are keyed by ``(cluster, broker_name, broker_id)``. A broker name's members share one
replica set: id 0 is its master, 1 and up its slaves. A slave registering learns its master's
broker and HA addresses, when that master is registered and live (how a slave without
``--master-ha`` finds its master, and follows it when it moves).

A live registration is held by its address and by the identity that registered it (the
connection's certificate name under mutual TLS, its remote IP on plain TCP; the server works it
out, see ``hanet.namesrv.BrokerTrust``): another address, or the same address from another
identity, registering the same key is refused (:class:`RegistrationRefused`, logged at
WARNING) until the holder unregisters, its connection closes
(:meth:`Registry.connection_closed`, RocketMQ's ``onChannelDestroy``) or it expires; only its
identity may unregister it or renew it by QUERY_DATA_VERSION. A member of a broker name
registering from the address another member of that name held (a slave restarted as the
master) replaces that member, when both are of one identity. An identity holds at most
``max_per_identity`` registrations (64), the registry ``max_brokers`` (10,000) in all. An
identity of None (a registration made in-process) is checked by its address only.

Time is the caller's: every method that needs it takes ``now`` (seconds since the epoch, a
float; tests pass a virtual one). An entry not renewed for ``expire_after`` seconds (120) is
dropped by :meth:`Registry.expire`; the server calls it every 10 s, as RocketMQ's name server
scans.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Iterable

import attrs

from hanet.channel import parse_address
from hanet.errors import ConfigError, HanetError
from hanet.protocol import (
    MASTER_ID,
    PERM_WRITE,
    BrokerData,
    ClusterInfo,
    DataVersion,
    QueueData,
    RegisterBrokerBody,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponse,
    TopicConfig,
    TopicList,
    TopicRouteData,
)

__all__ = [
    "DEFAULT_EXPIRE_AFTER",
    "MAX_BROKERS",
    "MAX_PER_IDENTITY",
    "MAX_QUEUES",
    "MAX_TOPICS",
    "BrokerKey",
    "LiveBroker",
    "RegistrationError",
    "RegistrationQuotaError",
    "RegistrationRefused",
    "Registry",
    "registration_problem",
]

log = logging.getLogger("hanet.namesrv")

DEFAULT_EXPIRE_AFTER = 120.0
"""Seconds a registration lives without renewal (RocketMQ's ``BROKER_CHANNEL_EXPIRED_TIME``)."""

MAX_BROKERS = 10_000
"""Most brokers one name server holds: a registration that would add one more is refused
(anyone who may connect can register; this bounds what they can make it keep)."""

MAX_QUEUES = 1024
"""Most read or write queues a registration may give a topic. RocketMQ's defaults are 4 to 16
queues per topic and broker; a consumer keeps state for (and pulls, round after round) every
queue of the route, so a bound well above real use but far below the protocol's 2**31-1 keeps
a hostile or broken registration from making each consumer of the topic hold millions of
queues."""

MAX_PER_IDENTITY = 64
"""Most registrations one identity (a certificate name, or a remote IP on plain TCP) holds: a
host rarely runs more than a few brokers; one peer cannot fill the registry."""

MAX_TOPICS = 10_000
"""Most topics one registration may list (otherwise bounded only by the frame size)."""

BrokerKey = tuple[str, str, int]
"""``(cluster, broker_name, broker_id)``."""


class RegistrationError(HanetError, ValueError):
    """A registration the name server refuses because it is malformed or over a bound; the
    message says what is wrong with it."""


class RegistrationRefused(RegistrationError):
    """A registration of a key another live broker holds from another address or identity,
    or one the registering connection may not make."""


class RegistrationQuotaError(RegistrationError):
    """A registration over the registry's bounds: the identity's, or the total."""


@attrs.frozen
class LiveBroker:
    """A registered broker as the name server holds it.

    Attributes:
        cluster, broker_name, broker_id: its key.
        broker_address: its broker port (``host:port``).
        ha_address: its HA port (``host:port``; "" when none).
        topics: its topic config table.
        data_version: the version of that table.
        filter_servers: the filter servers it runs.
        last_update: when it last registered (seconds since the epoch).
        connection: the connection it last registered over (None: in-process).
        identity: who registered it (``cert:NAME`` or ``ip:HOST``; None: in-process).
    """

    cluster: str
    broker_name: str
    broker_id: int
    broker_address: str
    ha_address: str
    topics: dict[str, TopicConfig]
    data_version: DataVersion
    filter_servers: tuple[str, ...]
    last_update: float
    connection: Hashable | None = attrs.field(default=None, eq=False)
    identity: str | None = attrs.field(default=None, eq=False)

    @property
    def key(self) -> BrokerKey:
        """``(cluster, broker_name, broker_id)``."""
        return (self.cluster, self.broker_name, self.broker_id)

    @property
    def name(self) -> str:
        """``cluster/broker_name/broker_id`` for log lines."""
        return f"{self.cluster}/{self.broker_name}/{self.broker_id}"


def _other(holder: str | None, identity: str | None) -> bool:
    """Whether ``identity`` is not the ``holder``'s (an unknown one, None, is anyone's)."""
    return holder is not None and identity is not None and holder != identity


def _address_problem(text: str, what: str) -> str | None:
    try:
        host, port = parse_address(text, default_host="")
    except ConfigError:
        return f"{what} {text!r} is not HOST:PORT"
    if not host or port == 0 or text != text.strip():
        return f"{what} {text!r} is not HOST:PORT"
    return None


def registration_problem(
    header: RegisterBrokerRequestHeader, body: RegisterBrokerBody
) -> str | None:
    """Why a registration is refused, or None when it is well-formed.

    Checked: the names are not empty; the broker id is not negative; the broker address (and
    the HA address, when given) is ``host:port`` with a host and a port; at most
    :data:`MAX_TOPICS` topics, each with a name and 0 to :data:`MAX_QUEUES` read and write
    queues.
    """
    h = header
    if not h.cluster_name:
        return "the cluster name is empty"
    if not h.broker_name:
        return "the broker name is empty"
    if h.broker_id < 0:
        return f"broker id {h.broker_id} is negative (0: the master, 1 and up: slaves)"
    problem = _address_problem(h.broker_addr, "broker address")
    if problem is None and h.ha_server_addr:
        problem = _address_problem(h.ha_server_addr, "HA address")
    if problem is not None:
        return problem
    table = body.topic_config_serialize_wrapper.topic_config_table
    if len(table) > MAX_TOPICS:
        return f"{len(table)} topics (at most {MAX_TOPICS})"
    for name, config in table.items():
        if not name or config.topic_name != name:
            return f"topic {name!r} is listed as {config.topic_name!r}"
        for what, queues in (("read", config.read_queue_nums), ("write", config.write_queue_nums)):
            if not 0 <= queues <= MAX_QUEUES:
                return f"topic {name!r} has {queues} {what} queues (0 to {MAX_QUEUES})"
    return None


class Registry:
    """The live brokers, their topics and their masters (see the module docstring).

    Args:
        expire_after: seconds a registration lives without renewal.
        max_brokers: most entries held; a registration of a new key beyond it is refused
            (renewals always go through).
        max_per_identity: most entries one identity holds (the same).
    """

    def __init__(
        self,
        *,
        expire_after: float = DEFAULT_EXPIRE_AFTER,
        max_brokers: int = MAX_BROKERS,
        max_per_identity: int = MAX_PER_IDENTITY,
    ) -> None:
        if expire_after <= 0:
            raise ValueError(f"expire_after must be > 0, got {expire_after}")
        if max_brokers < 1:
            raise ValueError(f"max_brokers must be >= 1, got {max_brokers}")
        if max_per_identity < 1:
            raise ValueError(f"max_per_identity must be >= 1, got {max_per_identity}")
        self.expire_after = expire_after
        self.max_brokers = max_brokers
        self.max_per_identity = max_per_identity
        self._entries: dict[BrokerKey, LiveBroker] = {}
        # Write permission taken away (WIPE_WRITE_PERM_OF_BROKER): each member's topic data
        # version then; a registration with another version (its topics changed) ends it, as
        # RocketMQ rewrites a broker's queue data only when its data version changes.
        self._wiped: dict[BrokerKey, DataVersion] = {}
        self._held: dict[str, int] = {}  # identity -> entries it holds

    def __len__(self) -> int:
        return len(self._entries)

    def brokers(self) -> list[LiveBroker]:
        """Every entry, by key."""
        return [entry for _, entry in sorted(self._entries.items())]

    def get(self, key: BrokerKey) -> LiveBroker | None:
        """The entry of ``key``, or None."""
        return self._entries.get(key)

    def _live(self, entry: LiveBroker, now: float) -> bool:
        return now - entry.last_update < self.expire_after

    def register(
        self,
        header: RegisterBrokerRequestHeader,
        body: RegisterBrokerBody,
        now: float,
        connection: Hashable | None = None,
        identity: str | None = None,
    ) -> RegisterBrokerResponse:
        """Add or renew a broker at time ``now`` over ``connection`` by ``identity``; a
        slave's answer names its master (without a KV table: the server adds it).

        Raises:
            RegistrationRefused: a live broker of another address or identity holds the key
                (or the address, under another key of the broker name); nothing changes.
            RegistrationQuotaError: a new key over :attr:`max_per_identity` or
                :attr:`max_brokers`; nothing changes.
            RegistrationError: the registration is malformed (see
                :func:`registration_problem`); nothing changes.
        """
        problem = registration_problem(header, body)
        if problem is not None:
            raise RegistrationError(problem)
        h = header
        key = (h.cluster_name, h.broker_name, h.broker_id)
        old = self._entries.get(key)
        if old is not None and self._live(old, now):
            if old.broker_address != h.broker_addr:
                raise RegistrationRefused(
                    f"{old.name} is held by {old.broker_address} (registered "
                    f"{now - old.last_update:.0f} s ago); {h.broker_addr} may take it once that "
                    "broker unregisters, its connection closes or it expires"
                )
            if _other(old.identity, identity):
                raise RegistrationRefused(
                    f"{old.name} at {old.broker_address} is held by {old.identity} (registered "
                    f"{now - old.last_update:.0f} s ago), not {identity}: another identity may "
                    "take it once that broker unregisters, its connection closes or it expires"
                )
        replaced = []
        for other_key, other in self._entries.items():
            if (
                other_key != key
                and other_key[:2] == key[:2]
                and other.broker_address == h.broker_addr
            ):
                if _other(other.identity, identity) and self._live(other, now):
                    raise RegistrationRefused(
                        f"{h.broker_addr} is held by {other.identity} as {other.name}, "
                        f"not {identity}"
                    )
                replaced.append(other)
        if old is not None and old.broker_address != h.broker_addr:
            self._drop(key)
            log.info("broker %s moves from %s to %s", old.name, old.broker_address, h.broker_addr)
            old = None
        if old is None or _other(old.identity, identity):
            self._check_quota(key, identity, now)
        for other in replaced:
            self._drop(other.key)
            log.info("broker %s at %s is now %s/%s/%d", other.name, other.broker_address, *key)
        wrapper = body.topic_config_serialize_wrapper
        wiped = self._wiped.get(key)
        if wiped is not None and wiped != wrapper.data_version:
            del self._wiped[key]
            log.info("broker %s: topics changed, write permission as it registers", h.broker_name)
        entry = LiveBroker(
            cluster=h.cluster_name,
            broker_name=h.broker_name,
            broker_id=h.broker_id,
            broker_address=h.broker_addr,
            ha_address=h.ha_server_addr,
            topics=dict(wrapper.topic_config_table),
            data_version=wrapper.data_version,
            filter_servers=body.filter_server_list,
            last_update=now,
            connection=connection,
            identity=identity,
        )
        if old is None:
            log.info(
                "new broker %s at %s%s, %d topic%s%s",
                entry.name,
                entry.broker_address,
                f" (HA {entry.ha_address})" if entry.ha_address else "",
                len(entry.topics),
                "" if len(entry.topics) == 1 else "s",
                f", registered by {identity}" if identity else "",
            )
        elif old.ha_address != entry.ha_address:
            log.info(
                "broker %s at %s: HA %s -> %s",
                entry.name,
                entry.broker_address,
                old.ha_address or "none",
                entry.ha_address or "none",
            )
        self._put(entry)
        if h.broker_id == MASTER_ID:
            return RegisterBrokerResponse()
        master = self._entries.get((h.cluster_name, h.broker_name, MASTER_ID))
        if master is None or not self._live(master, now):
            return RegisterBrokerResponse()
        return RegisterBrokerResponse(master.broker_address, master.ha_address or None)

    def held_by(self, identity: str) -> int:
        """How many registrations ``identity`` holds."""
        return self._held.get(identity, 0)

    def _check_quota(self, key: BrokerKey, identity: str | None, now: float) -> None:
        """Refuse a new entry for ``key`` over the identity's or the registry's bound (the
        expired entries dropped first)."""
        over_identity = identity is not None and self.held_by(identity) >= self.max_per_identity
        if over_identity or len(self._entries) >= self.max_brokers:
            self.expire(now)
        name = "/".join(map(str, key))
        if identity is not None and self.held_by(identity) >= self.max_per_identity:
            raise RegistrationQuotaError(
                f"{identity} holds {self.max_per_identity} registrations, its most: "
                f"{name} is not added"
            )
        if len(self._entries) >= self.max_brokers:
            raise RegistrationQuotaError(
                f"the name server holds {self.max_brokers} brokers, its most: {name} is not added"
            )

    def _put(self, entry: LiveBroker) -> None:
        old = self._entries.get(entry.key)
        if old is not None:
            self._release(old)
        self._entries[entry.key] = entry
        if entry.identity is not None:
            self._held[entry.identity] = self._held.get(entry.identity, 0) + 1

    def _drop(self, key: BrokerKey) -> LiveBroker:
        entry = self._entries.pop(key)
        self._wiped.pop(key, None)
        self._release(entry)
        return entry

    def _release(self, entry: LiveBroker) -> None:
        identity = entry.identity
        if identity is not None:
            left = self._held[identity] - 1
            if left:
                self._held[identity] = left
            else:
                del self._held[identity]

    def unregister(
        self,
        cluster: str,
        broker_name: str,
        broker_id: int,
        broker_address: str,
        identity: str | None = None,
    ) -> bool:
        """Remove a broker at once (a clean shutdown). Only the entry registered from
        ``broker_address`` by ``identity`` is removed: a late unregistration of a broker that
        has since restarted elsewhere leaves the new one, and another identity removes nothing
        (logged at WARNING). Returns whether an entry was removed."""
        key = (cluster, broker_name, broker_id)
        entry = self._entries.get(key)
        if entry is None or entry.broker_address != broker_address:
            return False
        if _other(entry.identity, identity):
            log.warning(
                "unregistration of %s at %s by %s refused: it is held by %s",
                entry.name,
                broker_address,
                identity,
                entry.identity,
            )
            return False
        self._drop(key)
        log.info("broker %s at %s unregistered", entry.name, broker_address)
        return True

    def connection_closed(self, connection: Hashable) -> list[LiveBroker]:
        """Drop every broker last registered over ``connection`` (RocketMQ's
        ``onChannelDestroy``); returns them."""
        gone = [e for e in self._entries.values() if e.connection is connection]
        for entry in gone:
            self._drop(entry.key)
            log.info(  # RocketMQ logs this at INFO too (a clean stop closes it as well)
                "broker %s at %s left: its connection closed", entry.name, entry.broker_address
            )
        return gone

    def expire(self, now: float) -> list[LiveBroker]:
        """Drop the brokers not renewed for ``expire_after`` seconds at ``now`` (one log line
        each); returns them."""
        expired = []
        for key, entry in list(self._entries.items()):
            if not self._live(entry, now):
                self._drop(key)
                log.warning(
                    "broker %s at %s expired: no registration for %.0f s",
                    entry.name,
                    entry.broker_address,
                    now - entry.last_update,
                )
                expired.append(entry)
        return expired

    def query_data_version(
        self,
        key: BrokerKey,
        broker_address: str,
        version: DataVersion,
        now: float,
        identity: str | None = None,
    ) -> tuple[bool, DataVersion | None]:
        """QUERY_DATA_VERSION: whether ``version`` differs from the one the broker last
        registered, and that one (None when it is not registered, or by another identity).
        An unchanged version renews the registration, as RocketMQ's name server does."""
        entry = self._entries.get(key)
        if (
            entry is None
            or entry.broker_address != broker_address
            or _other(entry.identity, identity)
        ):
            return True, None
        changed = entry.data_version != version
        if not changed:
            self._entries[key] = attrs.evolve(entry, last_update=now)
        return changed, entry.data_version

    def delete_topic(self, topic: str, cluster: str | None = None) -> int:
        """DELETE_TOPIC_IN_NAMESRV: drop ``topic`` from the registered brokers (of ``cluster``
        only, when given) until one registers it again; returns how many held it."""
        count = 0
        for key, entry in list(self._entries.items()):
            if topic in entry.topics and (cluster is None or entry.cluster == cluster):
                topics = {name: c for name, c in entry.topics.items() if name != topic}
                self._entries[key] = attrs.evolve(entry, topics=topics)
                count += 1
        return count

    def set_write_perm(self, broker_name: str, writable: bool) -> int:
        """WIPE_WRITE_PERM_OF_BROKER (``writable`` False) / ADD_WRITE_PERM_OF_BROKER: take
        the write permission from (give it back to) every topic of ``broker_name`` in the
        routes; returns how many topics it holds (RocketMQ's count). A wipe lasts until the
        broker registers topics of another data version, leaves, or has its write permission
        added back."""
        members = [e for e in self._entries.values() if e.broker_name == broker_name]
        if not members:
            return 0
        count = len({topic for m in members for topic in m.topics})
        for m in members:
            if writable:
                self._wiped.pop(m.key, None)
            else:
                self._wiped[m.key] = m.data_version
        log.info(
            "broker %s: write permission %s on %d topics",
            broker_name,
            "added" if writable else "wiped",
            count,
        )
        return count

    def _perm(self, member: LiveBroker, perm: int) -> int:
        return perm & ~PERM_WRITE if member.key in self._wiped else perm

    def _by_name(self) -> dict[str, list[LiveBroker]]:
        """Members of each broker name, by id (RocketMQ keys broker names globally)."""
        groups: dict[str, list[LiveBroker]] = {}
        for _, entry in sorted(self._entries.items(), key=lambda e: (e[0][1], e[0][2], e[0][0])):
            groups.setdefault(entry.broker_name, []).append(entry)
        return groups

    @staticmethod
    def _broker_data(members: Iterable[LiveBroker]) -> BrokerData:
        members = list(members)
        return BrokerData(
            members[0].cluster,
            members[0].broker_name,
            {m.broker_id: m.broker_address for m in members},
        )

    def route(self, topic: str) -> TopicRouteData | None:
        """The brokers holding ``topic``, or None when no registered broker holds it.

        One queue data and one broker data per broker name with a member holding the topic,
        in name order. The queues are the master's, or with no master holding the topic, the
        first slave's that does (so a topic stays routable while its master is away); the
        members are every registered member of the broker name.
        """
        queues: list[QueueData] = []
        brokers: list[BrokerData] = []
        filters: dict[str, tuple[str, ...]] = {}
        for name, members in sorted(self._by_name().items()):
            holder = next((m for m in members if topic in m.topics), None)
            if holder is None:
                continue
            config = holder.topics[topic]
            queues.append(
                QueueData(
                    name,
                    config.read_queue_nums,
                    config.write_queue_nums,
                    self._perm(holder, config.perm),
                    config.topic_sys_flag,
                )
            )
            brokers.append(self._broker_data(members))
            for m in members:
                if m.filter_servers:
                    filters[m.broker_address] = m.filter_servers
        if not queues:
            return None
        return TopicRouteData(tuple(queues), tuple(brokers), filters)

    def cluster_info(self) -> ClusterInfo:
        """Every broker name's members, and each cluster's broker names."""
        groups = self._by_name()
        clusters: dict[str, list[str]] = {}
        for name, members in groups.items():
            clusters.setdefault(members[0].cluster, []).append(name)
        return ClusterInfo(
            {name: self._broker_data(members) for name, members in sorted(groups.items())},
            {cluster: tuple(sorted(names)) for cluster, names in sorted(clusters.items())},
        )

    def topics(self, cluster: str | None = None) -> TopicList:
        """Every topic a registered broker holds (of ``cluster`` only, when given), sorted."""
        names = {
            topic
            for entry in self._entries.values()
            if cluster is None or entry.cluster == cluster
            for topic in entry.topics
        }
        return TopicList(tuple(sorted(names)))
