"""A broker's registration with the name servers (RocketMQ's ``registerBrokerAll``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

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

Address = tuple[str, int]


class NameServerRegistrar:
    """Register with every name server at start and every ``interval`` seconds (a
    registration not renewed for 120 s expires there), and at once after :meth:`wake` (a new
    topic); unregister when cancelled (a clean shutdown leaves the cluster at once, within a
    few seconds at most).

    Each name server gets REGISTER_BROKER (the topic config table and its data version,
    ``bodyCrc32``) over a connection held open while :meth:`run` runs, as RocketMQ's broker
    does: the name server drops the broker when that connection closes, so a broker that dies
    leaves the routes at once. A lost connection is made again at the next round.

    Each answer goes to ``on_answer``: a slave learns its master's addresses from it. A
    registration no name server took is logged at WARNING and tried again next round; a
    refusal (another live broker holds this broker's name and id) is logged at WARNING with
    the name server's reason.

    Args:
        client: the name servers.
        registration: makes the current registration (addresses, topics) each round.
        interval: seconds between registrations (30).
        on_answer: called with each answer.
    """

    def __init__(
        self,
        client: NameServerClient,
        registration: Callable[[], BrokerRegistration],
        *,
        interval: float = 30.0,
        on_answer: Callable[[RegisterBrokerResponse], None] | None = None,
    ) -> None:
        self.client = client
        self.registration = registration
        self.interval = interval
        self.on_answer = on_answer
        self.registrations = 0
        """How many rounds some name server took."""
        self.failures = 0
        """How many rounds no name server took."""
        self.last_registered: float | None = None
        """When (trio time) some name server last took a round (None: none yet)."""
        self.last_error: str | None = None
        """Why the last round failed (None after a success)."""
        self.last_answer: RegisterBrokerResponse | None = None
        """The last successful round's answer (a slave's master addresses)."""
        self.data_version: DataVersion | None = None
        """The version of the topics last registered (a new one each time they change)."""
        self._topics: tuple[tuple[str, int], ...] | None = None
        self._woken = trio.Event()
        self._nursery: trio.Nursery | None = None
        self._connections: dict[Address, NameServerConnection] = {}

    def wake(self) -> None:
        """Register now rather than at the next interval (something to announce changed)."""
        self._woken.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Register now and every interval until cancelled; then unregister."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            try:
                while True:
                    self._woken = trio.Event()  # a wake from now on asks for another round
                    await self.register()
                    with trio.move_on_after(self.interval):
                        await self._woken.wait()
            finally:
                self._nursery = None
                nursery.cancel_scope.cancel()  # the held connections
                with trio.CancelScope(shield=True), trio.move_on_after(_UNREGISTER_TIMEOUT):
                    await self.unregister()

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
        """Hold a connection to ``address`` open until it closes (or :meth:`run` ends).

        Raises (to :meth:`trio.Nursery.start`'s caller): the connection could not be made.
        """
        started = False
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

    async def _register_at(
        self, address: Address, registration: BrokerRegistration, version: DataVersion
    ) -> RegisterBrokerResponse:
        nursery = self._nursery
        if nursery is None:  # not running: a connection for this round only
            async with self.client.connection(address) as connection:
                return await connection.register_broker(registration, version)
        held = self._connections.get(address)
        if held is None or not held.is_connected:
            held = await nursery.start(self._hold, address)
        return await held.register_broker(registration, version)

    async def register(self) -> bool:
        """One round: register with every name server; returns whether one took it."""
        registration = self.registration()
        version = self._version(registration)
        answers: list[RegisterBrokerResponse] = []
        errors: list[tuple[Address, RemotingError]] = []

        async def one(address: Address) -> None:
            try:
                answers.append(await self._register_at(address, registration, version))
            except RemotingError as exc:
                errors.append((address, exc))

        async with trio.open_nursery() as nursery:
            for address in self.client.addresses:
                nursery.start_soon(one, address)
        name = f"{registration.cluster}/{registration.broker_name} id {registration.broker_id}"
        for address, exc in errors:
            if isinstance(exc, RemotingResponseError):
                log.warning("name server %s:%d refused %s: %s", *address, name, exc)
        if not answers:
            exc = errors[-1][1]
            if self.last_error is None and not isinstance(exc, RemotingResponseError):
                log.warning(
                    "cannot register %s with the name servers (retrying every %.0f s): %s",
                    name,
                    self.interval,
                    exc,
                )
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
        self.last_registered = trio.current_time()
        self.last_error = None
        self.last_answer = answer
        if self.on_answer is not None:
            self.on_answer(answer)
        return True

    async def unregister(self) -> None:
        """Leave every name server that can be reached (best effort)."""
        try:
            await self.client.unregister_broker(self.registration())
        except RemotingError as exc:  # pragma: no cover - the client logs and goes on
            log.debug("unregister: %s", exc)
        else:
            log.info("unregistered from the name servers")
