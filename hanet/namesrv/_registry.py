"""The name server's table of live brokers, sans-IO (RocketMQ's ``RouteInfoManager``).

Brokers are keyed by ``(cluster, broker_name, broker_id)``: a registration renews its key's
entry, or replaces it when it comes from another address (a master restarted on a new port).
A broker name's members share one replica set: id 0 is its master, 1 and up its slaves. A
slave registering learns its master's broker and HA addresses, when that master is registered
and live (how a slave without ``--master-ha`` finds its master, and follows it when it moves).

Time is the caller's: every method that needs it takes ``now`` (seconds since the epoch, a
float; tests pass a virtual one). An entry not renewed for ``expire_after`` seconds (120) is
dropped by :meth:`Registry.expire`; the server calls it every 10 s, as RocketMQ's name server
scans.
"""

from __future__ import annotations

import logging

import attrs

from hanet.channel import parse_address
from hanet.errors import ConfigError
from hanet.protocol import (
    MASTER_ID,
    BrokerLiveInfo,
    BrokerRegistration,
    ClusterInfo,
    RouteBroker,
    TopicRoute,
)

__all__ = [
    "DEFAULT_EXPIRE_AFTER",
    "MASTER_ROLES",
    "MAX_BROKERS",
    "MAX_QUEUES",
    "MAX_TOPICS",
    "ROLES",
    "RegisterAnswer",
    "RegistrationError",
    "Registry",
    "registration_problem",
]

log = logging.getLogger("hanet.namesrv")

DEFAULT_EXPIRE_AFTER = 120.0
"""Seconds a registration lives without renewal (RocketMQ's ``BROKER_CHANNEL_EXPIRED_TIME``)."""

MASTER_ROLES = ("ASYNC_MASTER", "SYNC_MASTER")
"""The roles of a broker id 0."""

ROLES = (*MASTER_ROLES, "SLAVE")
"""Every role a broker registers with."""

MAX_BROKERS = 10_000
"""Most brokers one name server holds: a registration that would add one more is refused
(anyone who may connect can register; this bounds what they can make it keep)."""

MAX_QUEUES = 1024
"""Most queues a registration may give a topic. RocketMQ's defaults are 4 to 16 queues per
topic and broker; a consumer keeps state for (and pulls, round after round) every queue of the
route, so a bound well above real use but far below the protocol's 2**31-1 keeps a hostile or
broken registration from making each consumer of the topic hold millions of queues (65,535
would still be 64 times more pulls per round than anyone configures)."""

MAX_TOPICS = 10_000
"""Most topics one registration may list (otherwise bounded only by the frame size)."""

BrokerKey = tuple[str, str, int]
"""``(cluster, broker_name, broker_id)``."""


class RegistrationError(ValueError):
    """A registration the name server refuses; the message says what is wrong with it."""


@attrs.frozen
class RegisterAnswer:
    """What a registration returns: for a slave, its master's addresses when the master of its
    broker name is registered and live; None otherwise (and always for a master).

    Attributes:
        master_address: the master's broker port (``host:port``).
        master_ha_address: the master's HA port (``host:port``; None when it registered none).
    """

    master_address: str | None = None
    master_ha_address: str | None = None


@attrs.frozen
class _Entry:
    registration: BrokerRegistration
    last_update: float  # seconds since the epoch


def _address_problem(text: str, what: str) -> str | None:
    try:
        host, port = parse_address(text, default_host="")
    except ConfigError:
        return f"{what} {text!r} is not HOST:PORT"
    if not host or port == 0 or text != text.strip():
        return f"{what} {text!r} is not HOST:PORT"
    return None


def registration_problem(registration: BrokerRegistration) -> str | None:
    """Why ``registration`` is refused, or None when it is well-formed.

    Checked: the names are not empty; the broker id is not negative; the role is one of
    :data:`ROLES`, a master's for id 0 and ``SLAVE`` for the others; the broker address (and
    the HA address, when given) is ``host:port`` with a host and a port; at most
    :data:`MAX_TOPICS` topics, each with a name and 1 to :data:`MAX_QUEUES` queues.
    """
    r = registration
    if not r.cluster:
        return "the cluster name is empty"
    if not r.broker_name:
        return "the broker name is empty"
    if r.broker_id < 0:
        return f"broker id {r.broker_id} is negative (0: the master, 1 and up: slaves)"
    if r.role not in ROLES:
        return f"role {r.role!r} is not one of {', '.join(ROLES)}"
    if r.broker_id == MASTER_ID and r.role not in MASTER_ROLES:
        return f"broker id 0 is a master's, but the role is {r.role}"
    if r.broker_id != MASTER_ID and r.role in MASTER_ROLES:
        return f"broker id {r.broker_id} is a slave's, but the role is {r.role}"
    problem = _address_problem(r.broker_address, "broker address")
    if problem is None and r.ha_address:
        problem = _address_problem(r.ha_address, "HA address")
    if problem is not None:
        return problem
    if len(r.topics) > MAX_TOPICS:
        return f"{len(r.topics)} topics (at most {MAX_TOPICS})"
    for topic, queues in r.topics:
        if not topic:
            return "a topic name is empty"
        if not 1 <= queues <= MAX_QUEUES:
            return f"topic {topic!r} has {queues} queues (1 to {MAX_QUEUES})"
    return None


def _name(registration: BrokerRegistration) -> str:
    r = registration
    return f"{r.cluster}/{r.broker_name}/{r.broker_id}"


class Registry:
    """The live brokers, their topics and their masters (see the module docstring).

    Args:
        expire_after: seconds a registration lives without renewal.
        max_brokers: most entries held; a registration of a new key beyond it is refused
            (renewals always go through).
    """

    def __init__(
        self, *, expire_after: float = DEFAULT_EXPIRE_AFTER, max_brokers: int = MAX_BROKERS
    ) -> None:
        if expire_after <= 0:
            raise ValueError(f"expire_after must be > 0, got {expire_after}")
        if max_brokers < 1:
            raise ValueError(f"max_brokers must be >= 1, got {max_brokers}")
        self.expire_after = expire_after
        self.max_brokers = max_brokers
        self._entries: dict[BrokerKey, _Entry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def _live(self, entry: _Entry, now: float) -> bool:
        return now - entry.last_update < self.expire_after

    def register(self, registration: BrokerRegistration, now: float) -> RegisterAnswer:
        """Add or renew a broker at time ``now``; a slave's answer names its master.

        A registration from another address than its key's entry replaces that entry (logged
        as an address change); another member of the same broker name registered from the
        same broker address (a slave restarted as the master, say) is dropped.

        Raises:
            RegistrationError: the registration is malformed (see
                :func:`registration_problem`); nothing changes.
        """
        problem = registration_problem(registration)
        if problem is not None:
            raise RegistrationError(problem)
        r = registration
        key = (r.cluster, r.broker_name, r.broker_id)
        old = self._entries.get(key)
        if old is None and len(self._entries) >= self.max_brokers:
            self.expire(now)
            if len(self._entries) >= self.max_brokers:
                raise RegistrationError(
                    f"the name server holds {self.max_brokers} brokers, its most: "
                    f"{_name(r)} is not added"
                )
        for other_key, other in list(self._entries.items()):
            o = other.registration
            if (
                other_key != key
                and other_key[:2] == key[:2]
                and o.broker_address == r.broker_address
            ):
                del self._entries[other_key]
                log.info(
                    "broker %s at %s is now %s (role %s)",
                    _name(o),
                    o.broker_address,
                    _name(r),
                    r.role,
                )
        if old is None:
            log.info(
                "new broker %s: %s at %s%s, %d topic%s",
                _name(r),
                r.role,
                r.broker_address,
                f" (HA {r.ha_address})" if r.ha_address else "",
                len(r.topics),
                "" if len(r.topics) == 1 else "s",
            )
        else:
            o = old.registration
            if (o.broker_address, o.ha_address, o.role) != (r.broker_address, r.ha_address, r.role):
                log.info(
                    "broker %s changed: %s at %s (HA %s) -> %s at %s (HA %s)",
                    _name(r),
                    o.role,
                    o.broker_address,
                    o.ha_address or "none",
                    r.role,
                    r.broker_address,
                    r.ha_address or "none",
                )
        self._entries[key] = _Entry(r, now)
        if r.broker_id == MASTER_ID:
            return RegisterAnswer()
        master = self._entries.get((r.cluster, r.broker_name, MASTER_ID))
        if master is None or not self._live(master, now):
            return RegisterAnswer()
        m = master.registration
        return RegisterAnswer(m.broker_address, m.ha_address or None)

    def unregister(
        self, cluster: str, broker_name: str, broker_id: int, broker_address: str
    ) -> bool:
        """Remove a broker at once (a clean shutdown). Only the entry registered from
        ``broker_address`` is removed: a late unregistration of a broker that has since
        restarted elsewhere leaves the new one. Returns whether an entry was removed."""
        key = (cluster, broker_name, broker_id)
        entry = self._entries.get(key)
        if entry is None or entry.registration.broker_address != broker_address:
            return False
        del self._entries[key]
        log.info("broker %s at %s unregistered", _name(entry.registration), broker_address)
        return True

    def expire(self, now: float) -> list[BrokerRegistration]:
        """Drop the brokers not renewed for ``expire_after`` seconds at ``now`` (one log line
        each); returns their last registrations."""
        expired = []
        for key, entry in list(self._entries.items()):
            if not self._live(entry, now):
                del self._entries[key]
                r = entry.registration
                log.warning(
                    "broker %s at %s expired: no registration for %.0f s",
                    _name(r),
                    r.broker_address,
                    now - entry.last_update,
                )
                expired.append(r)
        return expired

    def route(self, topic: str) -> TopicRoute | None:
        """The brokers holding ``topic``, or None when no registered broker holds it.

        One :class:`RouteBroker` per ``(cluster, broker name)`` with a member holding the
        topic, in name order. Its queues are the master's, or with no master holding the
        topic, the first slave's that does; its addresses are every member's, master (id 0)
        first, then the slaves by id.
        """
        groups: dict[tuple[str, str], list[BrokerRegistration]] = {}
        for (cluster, name, _), entry in sorted(self._entries.items()):
            groups.setdefault((cluster, name), []).append(entry.registration)
        brokers = []
        for (_, name), members in sorted(groups.items(), key=lambda g: (g[0][1], g[0][0])):
            queues = next(
                (q for m in members for t, q in m.topics if t == topic),
                None,
            )
            if queues is None:
                continue
            addresses = tuple((m.broker_id, m.broker_address) for m in members)
            brokers.append(RouteBroker(name, queues, addresses))
        if not brokers:
            return None
        return TopicRoute(topic, tuple(brokers))

    def cluster(self) -> ClusterInfo:
        """Every registered broker, by cluster, broker name and id, with its last registration
        time in milliseconds since the epoch."""
        return ClusterInfo(
            tuple(
                BrokerLiveInfo(entry.registration, int(entry.last_update * 1000))
                for _, entry in sorted(self._entries.items())
            )
        )
