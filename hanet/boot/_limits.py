"""How many connections a server holds, and what it does when the process runs out of
descriptors.

- :func:`default_max_connections`: the per-server connection cap when none is given, derived
  from the process's descriptor limit (``RLIMIT_NOFILE``) with headroom for everything else
  (store files, a second port, logs, TLS, the name server client...).
- :data:`CAPACITY_ERRNOS`: the accept errors that mean "out of a resource, try again later"
  (EMFILE, ENFILE, ENOBUFS, ENOMEM): the accept loop backs off and resumes on them, and lets
  any other error surface (as ``trio.serve_listeners`` does).
- :func:`partial_budget`: the :class:`~hanet.channel.MemoryBudget` a server shares among its
  connections for the bytes they hold in unfinished frames (64 MiB unless configured).
- :class:`BurstLog`: one log line when a burst of refusals or accept failures starts, one
  when it ends, whatever happens in between.
"""

from __future__ import annotations

import errno
import logging
import resource

import attrs

from hanet.channel import DEFAULT_HOLD_TIMEOUT, DEFAULT_MAX_PARTIAL_BYTES, MemoryBudget

__all__ = [
    "ACCEPT_BACKOFF",
    "CAPACITY_ERRNOS",
    "FD_HEADROOM_MAX",
    "FD_HEADROOM_MIN",
    "BurstLog",
    "default_max_connections",
    "partial_budget",
]

CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
"""Accept errors the loop retries after :data:`ACCEPT_BACKOFF` (every other one surfaces)."""

ACCEPT_BACKOFF = 0.1
"""Seconds an accept loop waits after a capacity error before it accepts again."""

FD_HEADROOM_MIN = 64
FD_HEADROOM_MAX = 256
"""Descriptors kept out of the connection caps: a quarter of the limit, within these bounds."""

_SERVERS_PER_PROCESS = 2
"""A hanet process serves up to two connection ports (broker + HA, or broker + DLedger peers);
each server's default cap is its share of what the headroom leaves."""


def default_max_connections(limit: int | None = None) -> int:
    """The default cap of one server: ``(limit - headroom) // 2``, at least 8.

    ``limit`` is the soft ``RLIMIT_NOFILE`` (read when None; an unlimited one counts as
    65,536). The headroom is a quarter of the limit, at least 64 and at most 256 descriptors,
    for what is not a connection (store files, logs, outgoing connections). With the common
    1,024: 384 connections per server; with 256: 96; with 65,536: 32,640.
    """
    if limit is None:
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        limit = soft
    if limit < 0 or limit == resource.RLIM_INFINITY:
        limit = 65_536
    headroom = min(max(limit // 4, FD_HEADROOM_MIN), FD_HEADROOM_MAX)
    return max(8, (limit - headroom) // _SERVERS_PER_PROCESS)


def partial_budget(
    max_partial_bytes: int | None, hold_timeout: float = DEFAULT_HOLD_TIMEOUT, name: str = "server"
) -> MemoryBudget | None:
    """The :class:`~hanet.channel.MemoryBudget` a server makes of its ``max_partial_bytes``
    (None: the default 64 MiB; 0: none)."""
    if max_partial_bytes is None:
        max_partial_bytes = DEFAULT_MAX_PARTIAL_BYTES
    if max_partial_bytes < 0:
        raise ValueError(f"max_partial_bytes must be >= 0 (0: no cap): {max_partial_bytes}")
    if max_partial_bytes == 0:
        return None
    return MemoryBudget(max_partial_bytes, hold_timeout, name=name)


@attrs.define(eq=False)
class BurstLog:
    """Logs the first event of a burst and, when it ends, how many there were.

    Call :meth:`event` for each refusal or failure (it logs only the first of a burst) and
    :meth:`end` when things are back to normal (it logs the count once, if a burst was on).
    """

    logger: logging.Logger
    level: int = logging.WARNING
    _count: int = 0
    _started: float = 0.0

    @property
    def active(self) -> bool:
        """Whether a burst is going on."""
        return self._count > 0

    def event(self, now: float, message: str, *args: object) -> None:
        """Count one event; log ``message % args`` when it starts a burst."""
        if self._count == 0:
            self._started = now
            self.logger.log(self.level, message, *args)
        self._count += 1

    def end(self, now: float, message: str, *args: object) -> None:
        """End the burst (if one is on): log ``message % args`` followed by the count."""
        if self._count == 0:
            return
        self.logger.log(
            self.level,
            message + " (%d in %.1f s)",
            *args,
            self._count,
            now - self._started,
        )
        self._count = 0
