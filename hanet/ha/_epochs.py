"""Epochs in replication: a master starts a term, a slave compares histories before it follows.

A master (or a slave promoted to master) starts a term when it starts:
:func:`start_master_term` appends epoch ``last + 1`` at its commit log's max offset to
``<store>/epoch`` (:class:`hanet.store.EpochFile`).

Before each HA connection a slave's :class:`EpochGate` asks its master for its history (the
broker layer's HANET_EPOCHS request on the master's broker port; the HA stream itself is
RocketMQ 4.9.8's, unchanged) and computes the consistent point
(:func:`hanet.store.lowlevel.find_consistent_point`, as RocketMQ 5's ``AutoSwitchHAClient``):

- the slave's log ends at or before it: the slave follows; it keeps the master's entries up to
  its own max offset and adds each later one as replication reaches its start;
- the slave's log goes past it: the slave holds bytes no master term it shares wrote. With
  :attr:`DivergencePolicy.REFUSE` (the default) it does not connect, and says so with the
  point (log, status, metrics); with :attr:`DivergencePolicy.TRUNCATE` it truncates to the
  point as ``hanet slave --truncate-to`` does (the cut bytes kept under ``<store>/cut/``) and
  follows. With no common epoch at all it refuses either way (``--resync`` is the way out);
- no history to compare (a RocketMQ 4.9.8 master answers "request code not supported", the
  master's broker port is not known, or this slave's store has none yet): the slave follows as
  a 4.9.8 slave does, the reason shown in its status.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable, Sequence

import trio

from hanet.errors import HanetError
from hanet.store import CommitLogStore, EpochEntry, EpochFile, EpochFileError, EpochHistory
from hanet.store.lowlevel import find_consistent_point

__all__ = [
    "TERM_RETRY_INTERVAL",
    "DivergencePolicy",
    "EpochGate",
    "EpochSource",
    "SlaveDivergedError",
    "format_epochs",
    "record_master_term_later",
    "start_master_term",
]

log = logging.getLogger("hanet.ha.epochs")

EpochSource = Callable[[EpochHistory], Awaitable[EpochHistory | str]]
"""Asks the master for its epoch history, telling it the slave's (the master logs a divergence
too); a string says why there is none to compare (a
RocketMQ 4.9.8 master, an unknown broker port). Raises OSError when the master cannot be
asked now (the slave tries again at its next connection attempt)."""

# A refused slave tries every few seconds: its ERROR is repeated at most this often.
_LOG_INTERVAL = 60.0


class DivergencePolicy(enum.Enum):
    """What a slave whose log goes past the consistent point does (``haDivergence``)."""

    REFUSE = "refuse"
    TRUNCATE = "truncate"


class SlaveDivergedError(HanetError, ConnectionRefusedError):
    """The slave does not follow: its log goes past the consistent point (an OSError, so the
    reconnecting client tries again later).

    Attributes:
        point: the consistent point (-1: no common epoch).
    """

    def __init__(self, message: str, point: int) -> None:
        super().__init__(message)
        self.point = point


def start_master_term(store: CommitLogStore, at: int | None = None) -> EpochEntry:
    """Start this master's term: epoch ``last + 1`` at ``at`` (default: the store's max
    offset; entries at or past it dropped). Returns the new entry.

    Raises:
        EpochFileError: the epoch file is damaged.
        OSError: it cannot be written.
    """
    epochs = EpochFile.load(store.root)
    entry = epochs.begin_term(store.max_offset if at is None else at)
    log.info(
        "%s: master term: epoch %d starts at offset %d", store.root, entry.epoch, entry.start_offset
    )
    return entry


TERM_RETRY_INTERVAL = 1.0
"""Seconds between two tries of :func:`record_master_term_later`."""


async def record_master_term_later(
    store: CommitLogStore, *, interval: float = TERM_RETRY_INTERVAL
) -> EpochEntry | None:
    """Start the master term that could not be recorded when the master started (a full
    disk): try every ``interval`` seconds until the epoch file is written, each time at the
    store's max offset then. Returns the new entry.

    The term starts where it is recorded, not where the master started: slaves that
    connected meanwhile took this master's records as the previous term's (they compared
    epochs against the history without this term), so the records up to the recorded start
    stay the previous epoch's, and those slaves still agree with the history after it.

    A damaged epoch file is logged at ERROR and not retried (None): the master goes on serving,
    as it does while the disk is full.
    """
    while True:
        await trio.sleep(interval)
        at = store.max_offset
        try:
            entry = await trio.to_thread.run_sync(start_master_term, store, at)
        except OSError as exc:
            log.debug("%s: the master term is still not recorded: %s", store.root, exc)
            continue
        except EpochFileError as exc:  # damaged meanwhile: a person must look at it
            log.error("%s: the master term cannot be recorded: %s", store.root, exc)
            return None
        log.warning(
            "%s: the master term is recorded late: epoch %d from offset %d (the records "
            "before it count as the previous term's)",
            store.root,
            entry.epoch,
            at,
        )
        return entry


_SHOWN = 8  # a history in a log line or a status: its newest entries


def format_epochs(entries: Sequence[EpochEntry]) -> str:
    """``EPOCH@START, ...`` for a log line or a status: the newest :data:`_SHOWN` entries, the
    count of earlier ones before them (a long history stays one short line)."""
    shown = ", ".join(f"{e.epoch}@{e.start_offset}" for e in entries[-_SHOWN:]) or "none"
    earlier = len(entries) - _SHOWN
    return f"({earlier} earlier), {shown}" if earlier > 0 else shown


class EpochGate:
    """A slave's epoch check before each HA connection (see the module).

    Args:
        store: the slave's store.
        source: asks the master for its history.
        policy: refuse (default) or truncate a log that goes past the consistent point.
        truncate: cuts the store to an offset, keeping the bytes aside; returns what it did
            (``HASlave.truncate_store``); raises ValueError when it cannot.
    """

    def __init__(
        self,
        store: CommitLogStore,
        source: EpochSource,
        policy: DivergencePolicy,
        truncate: Callable[[CommitLogStore, int], str],
    ) -> None:
        self.store = store
        self.source = source
        self.policy = policy
        self._truncate = truncate
        self._epochs: EpochFile | None = None
        self._pending: list[EpochEntry] = []
        self.diverged_at: int | None = None
        """The consistent point this slave's log goes past, while it refuses (-1: no common
        epoch); None otherwise."""
        self.note: str | None = None
        """The last check's outcome in one line."""
        self.truncations = 0
        self._logged: float | None = None

    def _file(self) -> EpochFile:
        if self._epochs is None:
            self._epochs = EpochFile.load(self.store.root)
        return self._epochs

    async def check(self) -> None:
        """Compare with the master's history; truncate or refuse as the policy says.

        Raises:
            SlaveDivergedError: the slave refuses to follow (the point named).
            OSError: the master could not be asked.
            EpochFileError: this slave's epoch file is damaged.
        """
        epochs = self._file()  # a damaged file: stop before asking anything
        store = self.store
        answer = await self.source(epochs.history(store.max_offset))
        if isinstance(answer, str):
            self._pending = []
            self._settle(f"epochs not compared: {answer}")
            return
        end = store.max_offset
        local = epochs.history(end).entries
        if not store.commit_log.files or end == 0:
            note = "a new slave: took the master's epochs"
        elif not local:
            note = (
                f"no epoch history of this slave's log [{store.min_offset}, {end}): not compared,"
                " took the master's epochs"
            )
        else:
            point = find_consistent_point(local, end, answer.entries, answer.end_offset)
            if point >= end:
                note = f"consistent with the master up to this slave's end {end}"
            else:
                note = self._diverged(point, end, local, answer)
                end = store.max_offset
        self._adopt(answer, end)
        self._settle(note)

    def _diverged(
        self, point: int, end: int, local: tuple[EpochEntry, ...], master: EpochHistory
    ) -> str:
        """The slave's log goes past ``point``: truncate (returns the note) or raise."""
        store = self.store
        detail = (
            f"this slave's epochs [{format_epochs(local)}] (log ends at {end}), the master's "
            f"[{format_epochs(master.entries)}] (log ends at {master.end_offset})"
        )
        if point < 0:
            message = (
                f"no epoch in common with the master: {detail}. This slave's data was written "
                "by other masters; it follows only after `hanet slave --resync` (which keeps "
                "the old data under <store>/cut/)"
            )
        elif self.policy is DivergencePolicy.TRUNCATE and point == 0:
            message = (
                f"diverged from the master at offset 0 ({detail}): the master holds none of "
                "this slave's data; not truncating it all: `hanet slave --resync` does that"
            )
        elif self.policy is DivergencePolicy.TRUNCATE:
            try:
                done = self._truncate(store, point)
            except ValueError as exc:
                message = f"diverged from the master at offset {point} ({detail}): {exc}"
            else:
                self._epochs = None
                self._file().truncate_from(point)
                self.truncations += 1
                log.warning(
                    "slave diverged from the master at offset %d (%s): haDivergence=truncate: %s",
                    point,
                    detail,
                    done,
                )
                return f"diverged at {point}: truncated ({done})"
        else:
            message = (
                f"diverged from the master at offset {point}: this slave's log goes on to {end} "
                f"with bytes no shared master term wrote ({detail}). Not following. If those "
                "bytes were never acknowledged, run `hanet slave --truncate-to "
                f"{point}` or set haDivergence=truncate (--ha-divergence truncate): the cut "
                "bytes are kept under <store>/cut/; otherwise make this slave the master"
            )
        self.diverged_at = point
        self.note = message
        now = trio.current_time()
        if self._logged is None or now - self._logged >= _LOG_INTERVAL:
            self._logged = now
            log.error("epoch check: %s", message)
        raise SlaveDivergedError(  # short: the reconnecting client logs it at each attempt
            f"epoch check: not following, diverged from the master at offset {point} "
            "(the ERROR above and the status say more)",
            point,
        )

    def _adopt(self, master: EpochHistory, end: int) -> None:
        """Keep the master's entries up to ``end``; the later ones as replication reaches
        them."""
        self._file().replace(tuple(e for e in master.entries if e.start_offset <= end))
        self._pending = [e for e in master.entries if e.start_offset > end]

    def _settle(self, note: str) -> None:
        if self.diverged_at is not None:
            log.info("slave: the divergence is resolved: %s", note)
        self.diverged_at = None
        self._logged = None
        if note != self.note:
            level = logging.WARNING if note.startswith("epochs not compared") else logging.INFO
            log.log(level, "slave epoch check: %s", note)
        self.note = note

    def advance(self) -> None:
        """Replication moved on: keep the master's entries whose start it reached."""
        if not self._pending:
            return
        end = self.store.max_offset
        reached = [e for e in self._pending if e.start_offset <= end]
        if reached:
            self._pending = self._pending[len(reached) :]
            epochs = self._file()
            epochs.replace((*epochs.entries, *reached))
