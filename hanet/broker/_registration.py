"""A broker's registration with the name servers (RocketMQ's ``registerBrokerAll``).

As RocketMQ 4.9.8's broker:

- REGISTER_BROKER to every name server at start and every ``interval`` (30 s) after, each
  name server on its own schedule;
- a oneway REGISTER_BROKER to every name server at once when a topic is created on the broker
  (:meth:`NameServerRegistrar.wake`), not at the next round;
- the answer's master addresses go to ``on_answer`` (a slave without a configured master finds
  it there, RocketMQ's ``updateMasterHAServerAddrPeriodically``);
- UNREGISTER_BROKER to every name server on a clean stop.

Unlike RocketMQ, a name server that cannot be reached (not started yet, restarting) is tried
again after a short back-off (0.5 s doubling up to 5 s), not at the next 30 s round, and a
held connection that closes (the name server restarted) is registered over again at once: a
broker started before its name server is registered within seconds of the name server
coming up. A refused registration (hanet's name server does not let a live registration be
taken over from another address) is retried after the same back-off.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

import trio

from hanet.client import (
    NameServerClient,
    NameServerConnection,
    RemotingError,
    RemotingResponseError,
)
from hanet.errors import HanetError
from hanet.protocol import BrokerRegistration, DataVersion, RegisterBrokerResponse

__all__ = ["NameServerRegistrar"]

log = logging.getLogger("hanet.broker")

_UNREGISTER_TIMEOUT = 5.0  # seconds a clean shutdown spends leaving the name servers

RETRY_FIRST = 0.5
"""Seconds before a name server that could not be reached is tried again (doubling)."""

RETRY_MAX = 5.0
"""The longest wait before trying an unreachable name server again."""

Address = tuple[str, int]


class NameServerRegistrar:
    """Keep a broker registered with every name server (see the module docstring) while
    :meth:`run` runs; unregister when it is cancelled (a clean shutdown leaves the cluster at
    once, within a few seconds at most).

    Each name server gets REGISTER_BROKER (the topic config table and its data version,
    ``bodyCrc32``) over a connection held open while :meth:`run` runs, as RocketMQ's broker
    does: the name server drops the broker when that connection closes, so a broker that dies
    leaves the routes at once (a registration not renewed for 120 s expires there too).

    Each answer goes to ``on_answer``: a slave learns its master's addresses from it. A name
    server that cannot be reached is logged at WARNING once (and at INFO when it takes the
    registration again) and retried after ``retry_first`` seconds, doubling up to
    ``retry_max``; a refusal (another live broker holds this broker's name and id) is logged
    at WARNING (once) with the name server's reason and tried again after the same back-off.

    Args:
        client: the name servers.
        registration: makes the current registration (addresses, topics) each time.
        interval: seconds between registrations with each name server (30).
        on_answer: called with each round's answer (:meth:`register`).
        retry_first, retry_max: the back-off for an unreachable name server (seconds).
    """

    def __init__(
        self,
        client: NameServerClient,
        registration: Callable[[], BrokerRegistration],
        *,
        interval: float = 30.0,
        on_answer: Callable[[RegisterBrokerResponse], None] | None = None,
        retry_first: float = RETRY_FIRST,
        retry_max: float = RETRY_MAX,
    ) -> None:
        self.client = client
        self.registration = registration
        self.interval = interval
        self.on_answer = on_answer
        self.retry_first = retry_first
        self.retry_max = retry_max
        self.registrations = 0
        """How many rounds some name server took."""
        self.failures = 0
        """How many rounds no name server took while none held the registration."""
        self.announcements = 0
        """How many oneway registrations were sent (one per name server, topic creations)."""
        self.last_registered: float | None = None
        """When (trio time) some name server last took a round (None: none yet)."""
        self.last_error: str | None = None
        """Why the last round failed while no name server held the registration (None
        after a success): the broker is not routable while it is set."""
        self.registered: BrokerRegistration | None = None
        """What the last round some name server took registered."""
        self.last_answer: RegisterBrokerResponse | None = None
        """The last successful round's answer (a slave's master addresses)."""
        self.data_version: DataVersion | None = None
        """The version of the topics last registered (a new one each time they change)."""
        self._topics: tuple[tuple[str, int], ...] | None = None
        self._wakeup = trio.Event()
        self._announce = False
        self._nursery: trio.Nursery | None = None
        self._connections: dict[Address, NameServerConnection] = {}
        self._hold_scopes: set[trio.CancelScope] = set()
        self._due: dict[Address, float] = {}  # when each name server is registered next
        self._backoff: dict[Address, float] = {}  # the next retry delay of a failing one
        self._unreachable: set[Address] = set()  # logged as such (once)
        self._holding: set[Address] = set()  # the name servers whose last attempt succeeded
        self._generation = 0  # bumped by renew()

    def wake(self) -> None:
        """Announce the registration now, oneway, to every name server (a topic was created:
        RocketMQ's ``registerBrokerAll(..., oneway=true, ...)``)."""
        self._announce = True
        self._wakeup.set()

    def renew(self) -> None:
        """Register with every name server now, awaiting the answers (what changed is who
        this broker is: a DLedger node's role and broker id)."""
        now = trio.current_time()
        self._generation += 1  # a round in flight no longer counts as this one
        for address in self._due:
            self._due[address] = now
        self._backoff.clear()
        self._wakeup.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Register now and every interval until cancelled; then unregister."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            now = trio.current_time()
            self._due = {address: now for address in self.client.addresses}
            task_status.started()
            try:
                while True:
                    self._wakeup = trio.Event()  # what sets it from now on wakes the loop
                    if self._announce:
                        self._announce = False
                        await self.announce()
                    now = trio.current_time()
                    due = [a for a in self.client.addresses if self._due[a] <= now]
                    if due:
                        await self.register(due)
                    with trio.move_on_at(min(self._due.values())):
                        await self._wakeup.wait()
            finally:
                self._nursery = None
                self._due = {}
                with trio.CancelScope(shield=True), trio.move_on_after(_UNREGISTER_TIMEOUT):
                    await self.unregister()
                for scope in list(self._hold_scopes):
                    scope.cancel()  # then the held connections close
                nursery.cancel_scope.cancel()

    def _version(self, registration: BrokerRegistration) -> DataVersion:
        if registration.data_version is not None:
            return registration.data_version
        if self.data_version is None or self._topics != registration.topics:
            now_ms = int(time.time() * 1000)
            if self.data_version is None:
                self.data_version = DataVersion(now_ms, 0)
            else:
                self.data_version = self.data_version.next(now_ms)
            self._topics = registration.topics
        return self.data_version

    async def _hold(
        self, address: Address, *, task_status: trio.TaskStatus[NameServerConnection]
    ) -> None:
        """Hold a connection to ``address`` open until it closes (or :meth:`run` ends); a
        connection the name server closed is registered over again at once.

        Raises (to :meth:`trio.Nursery.start`'s caller): the connection could not be made.
        """
        started = False
        # Shielded (cancelled by run() itself): a clean stop unregisters over the connection
        # before closing it.
        with trio.CancelScope(shield=True) as scope:
            self._hold_scopes.add(scope)
            try:
                async with self.client.connection(address) as connection:
                    self._connections[address] = connection
                    task_status.started(connection)
                    started = True
                    try:
                        await connection.channel.wait_closed()
                    finally:
                        if self._connections.get(address) is connection:
                            del self._connections[address]
                    reason = connection.channel.close_reason or "closed"
                    log.info("connection to name server %s:%d closed: %s", *address, reason)
            except HanetError as exc:
                if not started:
                    raise
                log.debug("connection to name server %s:%d: %s", *address, exc)
            finally:
                self._hold_scopes.discard(scope)
        if self._nursery is not None and address in self._due:
            self._due[address] = trio.current_time()  # the name server restarted? again now
            self._wakeup.set()

    async def _connection(self, address: Address) -> NameServerConnection:
        """The held connection to ``address``, made when there is none.

        Raises:
            RemotingConnectionError: it could not be made.
        """
        held = self._connections.get(address)
        if held is not None and held.is_connected:
            return held
        nursery = self._nursery
        assert nursery is not None
        connection: NameServerConnection = await nursery.start(self._hold, address)
        return connection

    async def _register_at(
        self, address: Address, registration: BrokerRegistration, version: DataVersion
    ) -> RegisterBrokerResponse:
        if self._nursery is None:  # not running: a connection for this call only
            async with self.client.connection(address) as connection:
                return await connection.register_broker(registration, version)
        return await (await self._connection(address)).register_broker(registration, version)

    def _took(self, address: Address, generation: int) -> None:
        """``address`` took the registration: next at the interval (unless :meth:`renew`
        was called since it was made: then again now)."""
        self._holding.add(address)
        if address in self._due and generation == self._generation:
            self._due[address] = trio.current_time() + self.interval
        self._backoff.pop(address, None)
        if address in self._unreachable:
            self._unreachable.discard(address)
            log.info("name server %s:%d took the registration again", *address)

    def _missed(self, address: Address, name: str, exc: RemotingError, generation: int) -> None:
        """``address`` did not take the registration (unreachable, or a refusal: another
        live broker holds this name and id, e.g. a DLedger leader not yet re-registered as a
        follower): again after the back-off; logged at WARNING once until it takes one."""
        self._holding.discard(address)
        delay = min(self._backoff.get(address, self.retry_first), self.interval)
        self._backoff[address] = min(delay * 2, self.retry_max)
        if address in self._due and generation == self._generation:
            self._due[address] = trio.current_time() + delay
        if address in self._unreachable:
            log.debug("name server %s:%d: %s (again in %.1f s)", *address, exc, delay)
            return
        self._unreachable.add(address)
        every = min(self.retry_max, self.interval)
        if isinstance(exc, RemotingResponseError):
            log.warning(
                "name server %s:%d refused %s (retrying every %g s at most): %s",
                *address,
                name,
                every,
                exc,
            )
        else:
            log.warning(
                "cannot register %s with name server %s:%d (retrying every %g s at most): %s",
                name,
                *address,
                every,
                exc,
            )

    async def register(self, addresses: Sequence[Address] | None = None) -> bool:
        """One round: register with every name server (or those of ``addresses``); returns
        whether one took it. The answer that tells the most (a master with its HA address,
        else a master) goes to ``on_answer``."""
        targets = list(self.client.addresses if addresses is None else addresses)
        registration = self.registration()
        version = self._version(registration)
        name = f"{registration.cluster}/{registration.broker_name} id {registration.broker_id}"
        generation = self._generation
        answers: list[RegisterBrokerResponse] = []
        errors: list[tuple[Address, RemotingError]] = []

        async def one(address: Address) -> None:
            try:
                answer = await self._register_at(address, registration, version)
            except RemotingError as exc:
                errors.append((address, exc))
                self._missed(address, name, exc, generation)
            else:
                answers.append(answer)
                self._took(address, generation)

        async with trio.open_nursery() as nursery:
            for address in targets:
                nursery.start_soon(one, address)
        if not answers:
            if not self._holding:  # registered nowhere (else: still routable elsewhere)
                exc = errors[-1][1]
                self.last_error = f"{type(exc).__name__}: {exc}"
                self.failures += 1
            return False
        if self.registrations == 0 or self.last_error is not None:
            log.info(
                "registered %s (%s) with the name servers",
                name,
                registration.broker_address or "no broker port",
            )
        answer = max(
            answers, key=lambda a: (a.master_ha_address is not None, a.master_address is not None)
        )  # the answer that tells the most: a master with its HA address, else a master
        self.registrations += 1
        self.registered = registration
        self.last_registered = trio.current_time()
        self.last_error = None
        self.last_answer = answer
        if self.on_answer is not None:
            self.on_answer(answer)
        return True

    async def announce(self) -> None:
        """A oneway REGISTER_BROKER to every name server (no answer awaited; a name server
        that cannot be reached is retried after the back-off with a full registration)."""
        registration = self.registration()
        version = self._version(registration)
        name = f"{registration.cluster}/{registration.broker_name} id {registration.broker_id}"
        generation = self._generation

        async def one(address: Address) -> None:
            try:
                await (await self._connection(address)).register_broker_oneway(
                    registration, version
                )
            except RemotingError as exc:
                self._missed(address, name, exc, generation)
            else:
                self.announcements += 1

        async with trio.open_nursery() as nursery:
            for address in self.client.addresses:
                nursery.start_soon(one, address)

    async def unregister(self) -> None:
        """UNREGISTER_BROKER to every name server that can be reached (best effort), over the
        held connection when there is one, as RocketMQ's broker at a clean stop."""
        registration = self.registration()
        left: list[Address] = []

        async def one(address: Address) -> None:
            try:
                held = self._connections.get(address)
                if held is not None and held.is_connected:
                    await held.unregister_broker(registration)
                else:
                    async with self.client.connection(address) as connection:
                        await connection.unregister_broker(registration)
            except RemotingError as exc:
                log.debug("unregister at %s:%d: %s", *address, exc)
            else:
                left.append(address)

        async with trio.open_nursery() as nursery:
            for address in self.client.addresses:
                nursery.start_soon(one, address)
        if left:
            log.info(
                "unregistered from the name servers (%d of %d)",
                len(left),
                len(self.client.addresses),
            )
