"""A broker's registration with the name servers (RocketMQ's ``registerBrokerAll``)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio

from hanet.client import BrokerError, NameServerClient
from hanet.protocol import BrokerRegistration, RegisterBrokerResponse

__all__ = ["NameServerRegistrar"]

log = logging.getLogger("hanet.broker")

_UNREGISTER_TIMEOUT = 5.0  # seconds a clean shutdown spends leaving the name servers


class NameServerRegistrar:
    """Register with every name server at start and every ``interval`` seconds (a
    registration not renewed for 120 s expires there), and at once after :meth:`wake` (a new
    topic); unregister when cancelled (a clean shutdown leaves the cluster at once, within a
    few seconds at most).

    Each answer goes to ``on_answer``: a slave learns its master's addresses from it. A
    registration no name server took is logged at WARNING and tried again next round.

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
        self._woken = trio.Event()

    def wake(self) -> None:
        """Register now rather than at the next interval (something to announce changed)."""
        self._woken.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Register now and every interval until cancelled; then unregister."""
        task_status.started()
        try:
            while True:
                self._woken = trio.Event()  # a wake from now on asks for another round
                await self.register()
                with trio.move_on_after(self.interval):
                    await self._woken.wait()
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(_UNREGISTER_TIMEOUT):
                await self.unregister()

    async def register(self) -> bool:
        """One round: register with every name server; returns whether one took it."""
        registration = self.registration()
        try:
            answer = await self.client.register_broker(registration)
        except BrokerError as exc:
            if self.last_error is None:
                log.warning(
                    "cannot register %s/%s id %d with the name servers (retrying every %.0f s): %s",
                    registration.cluster,
                    registration.broker_name,
                    registration.broker_id,
                    self.interval,
                    exc,
                )
            self.last_error = f"{type(exc).__name__}: {exc}"
            self.failures += 1
            return False
        if self.registrations == 0 or self.last_error is not None:
            log.info(
                "registered %s/%s id %d (%s) with the name servers",
                registration.cluster,
                registration.broker_name,
                registration.broker_id,
                registration.broker_address or "no broker port",
            )
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
        except BrokerError as exc:  # pragma: no cover - the client logs and goes on
            log.debug("unregister: %s", exc)
        else:
            log.info("unregistered from the name servers")
