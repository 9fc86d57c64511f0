"""Retention: old commit log and consume queue files are deleted, as RocketMQ 4.9.8's
``CleanCommitLogService`` and ``CleanConsumeQueueService`` delete them.

Every ``clean_resource_interval`` (10 s) the service asks whether it is time to delete:

- **time up**: the local hour of day is one of ``delete_when`` (``"04"``, or ``"04;16"``);
- **space full**: the store's file system is used past ``disk_max_used_space_ratio`` (75 %)
  (or its usage cannot be read);
- and then, in either case, it deletes the commit log files, oldest first, whose last
  modification is older than ``file_reserved_time`` hours (72), or every file whatever its age
  when the disk is used past ``disk_space_clean_forcibly_ratio`` (0.85; RocketMQ's
  ``cleanImmediately``, with ``clean_file_forcibly_enable``).

As RocketMQ: never the last file; only a prefix of the files (the first file too young stops
the round, no hole is made); at most ``delete_files_batch_max`` (10) files a round,
``delete_commit_log_files_interval`` (0.1 s) apart. After commit log files were deleted, the
consume queues are cleaned to the new min offset: every consume queue file whose entries all
point below it is deleted (never a queue's last file), ``delete_consume_queue_files_interval``
apart, and the queue's min offset moves to its first entry still in the log (RocketMQ's
``correctMinOffset``; the store does this at once when the commit log file goes, so no pull
ever reaches a deleted record).

Where hanet does more than RocketMQ:

- **Slaves.** RocketMQ deletes a master's files whether or not its slaves have received them
  (a slave that falls behind the master's first file then waits forever). Here a file is kept
  while a connected slave has not acknowledged all of it (:class:`Holder`: each connected
  slave's ack offset), logged once per file held. The bound, so that a dead or stuck slave
  cannot fill the disk: past ``disk_space_clean_forcibly_ratio`` the holders are overridden
  (a WARNING names each slave and the offset it still needed); a slave that disconnected
  holds nothing.
- **Readers.** RocketMQ counts references to a mapped file (``hold``/``release``) and waits up
  to ``destroyMapedFileIntervalForcibly`` (120 s) for them before it unmaps the file anyway. A
  hanet pull copies the records it answers while it reads them (synchronously, on the one
  event loop: no deletion can run in between); what holds a mapping longer is a
  ``memoryview`` of it, e.g. an HA transfer's bytes waiting to be sent. A file whose mapping
  is held is kept for up to ``destroy_mapped_file_interval_forcibly``, then unlinked anyway:
  the holder's view stays valid (the pages go with the last view), so nothing is ever read
  from unmapped memory.

:func:`plan_retention` is the decision, sans-IO and deterministic (files, times, disk usage
and holders given); :class:`RetentionService` runs it in a trio task against a
:class:`~hanet.store.CommitLogStore`.
"""

from __future__ import annotations

import gc
import logging
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import trio

from ._store import CommitLogStore

__all__ = [
    "CommitLogFile",
    "Holder",
    "RetentionConfig",
    "RetentionPlan",
    "RetentionService",
    "RetentionStatistics",
    "disk_used_ratio",
    "parse_delete_when",
    "plan_retention",
]

logger = logging.getLogger("hanet.store.retention")

DELETE_FILES_BATCH_MAX = 10
"""RocketMQ's ``DELETE_FILES_BATCH_MAX``: the most commit log files deleted in one round."""


def parse_delete_when(text: str) -> frozenset[int]:
    """The hours of ``deleteWhen``: ``"04"`` or ``"04;16"`` (RocketMQ's ``isItTimeToDo``).

    Raises:
        ValueError: not hours 0..23 separated by ``;``.
    """
    hours = set()
    for raw in text.split(";"):
        part = raw.strip()
        if not part.isdigit() or not 0 <= int(part) <= 23:
            raise ValueError(f"deleteWhen must be hours 0..23 separated by ';', got {text!r}")
        hours.add(int(part))
    return frozenset(hours)


def _delete_when(instance: object, attribute: attrs.Attribute[Any], value: str) -> None:
    parse_delete_when(value)


def _non_negative(instance: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if value < 0:
        raise ValueError(f"{attribute.name} must be >= 0, got {value}")


def _positive(instance: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if value <= 0:
        raise ValueError(f"{attribute.name} must be > 0, got {value}")


def _percent(instance: object, attribute: attrs.Attribute[Any], value: int) -> None:
    if not 1 <= value <= 100:
        raise ValueError(f"{attribute.name} must be a percentage in 1..100, got {value}")


def _fraction(instance: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if not 0 < value <= 1:
        raise ValueError(f"{attribute.name} must be a fraction in (0, 1], got {value}")


@attrs.frozen
class RetentionConfig:
    """RocketMQ's retention settings (4.9.8 defaults).

    Attributes:
        delete_when: the hours of day (local time) when expired files are deleted, ``"04"``
            or ``"04;16"`` (``deleteWhen``).
        file_reserved_time: hours a commit log file is kept after its last write
            (``fileReservedTime``, 72).
        disk_max_used_space_ratio: past this percentage of the disk used, expired files are
            deleted at any hour (``diskMaxUsedSpaceRatio``, 75).
        disk_space_clean_forcibly_ratio: past this fraction of the disk used, files are
            deleted whatever their age, and slaves no longer hold them
            (``rocketmq.broker.diskSpaceCleanForciblyRatio``, 0.85).
        clean_file_forcibly_enable: whether that forced cleaning happens
            (``cleanFileForciblyEnable``, true).
        delete_commit_log_files_interval: seconds between two commit log file deletions
            (``deleteCommitLogFilesInterval``, 0.1).
        delete_consume_queue_files_interval: seconds between the consume queues that deleted
            files (``deleteConsumeQueueFilesInterval``, 0.1).
        destroy_mapped_file_interval_forcibly: seconds a file whose mapping a reader holds is
            kept before it is unlinked anyway (``destroyMapedFileIntervalForcibly``, 120).
        clean_resource_interval: seconds between two rounds (``cleanResourceInterval``, 10).
        delete_files_batch_max: the most commit log files deleted in one round (10).
    """

    delete_when: str = attrs.field(default="04", validator=_delete_when)
    file_reserved_time: float = attrs.field(default=72.0, validator=_non_negative)
    disk_max_used_space_ratio: int = attrs.field(default=75, validator=_percent)
    disk_space_clean_forcibly_ratio: float = attrs.field(default=0.85, validator=_fraction)
    clean_file_forcibly_enable: bool = True
    delete_commit_log_files_interval: float = attrs.field(default=0.1, validator=_non_negative)
    delete_consume_queue_files_interval: float = attrs.field(default=0.1, validator=_non_negative)
    destroy_mapped_file_interval_forcibly: float = attrs.field(
        default=120.0, validator=_non_negative
    )
    clean_resource_interval: float = attrs.field(default=10.0, validator=_positive)
    delete_files_batch_max: int = attrs.field(default=DELETE_FILES_BATCH_MAX, validator=_positive)

    @property
    def hours(self) -> frozenset[int]:
        """The hours of :attr:`delete_when`."""
        return parse_delete_when(self.delete_when)


@attrs.frozen
class CommitLogFile:
    """A commit log file as retention sees it: ``[start, end)`` and its last modification
    (seconds since the epoch)."""

    start: int
    end: int
    modified: float


@attrs.frozen
class Holder:
    """Something that still needs the commit log from ``offset`` on: a connected slave and
    the offset it acknowledged (files ending after it are kept)."""

    name: str
    offset: int


@attrs.frozen
class RetentionPlan:
    """What a round decided.

    Attributes:
        delete: the files to delete, oldest first (a prefix of the files, never the last).
        time_up: the hour is one of ``delete_when``.
        space_full: the disk is used past ``disk_max_used_space_ratio`` (or unreadable).
        forced: the disk is used past ``disk_space_clean_forcibly_ratio`` (files go whatever
            their age, holders are overridden).
        held_by: the holder that kept the next file (None: nothing held one back).
        held_file: that file.
        overridden: the holders whose files are deleted anyway (``forced``).
    """

    delete: tuple[CommitLogFile, ...]
    time_up: bool
    space_full: bool
    forced: bool
    held_by: Holder | None = None
    overridden: tuple[Holder, ...] = ()
    held_file: CommitLogFile | None = None

    @property
    def triggered(self) -> bool:
        """Whether the round looked for files to delete at all."""
        return self.time_up or self.space_full


def plan_retention(
    files: Sequence[CommitLogFile],
    *,
    now: float,
    hour: int,
    disk_ratio: float | None,
    config: RetentionConfig,
    holders: Sequence[Holder] = (),
) -> RetentionPlan:
    """Which commit log files to delete now (sans-IO; see the module docstring).

    ``files``: the commit log files in order; ``now``: seconds since the epoch; ``hour``: the
    local hour of day; ``disk_ratio``: the used fraction of the store's disk (None:
    unreadable, which counts as full, as RocketMQ's negative ratio); ``holders``: what still
    needs the log from an offset on (connected slaves).
    """
    time_up = hour in config.hours
    space_full = disk_ratio is None or disk_ratio * 100 > config.disk_max_used_space_ratio
    forced = (
        config.clean_file_forcibly_enable
        and disk_ratio is not None
        and disk_ratio > config.disk_space_clean_forcibly_ratio
    )
    if not (time_up or space_full):
        return RetentionPlan((), time_up, space_full, forced)
    reserved = config.file_reserved_time * 3600
    delete: list[CommitLogFile] = []
    overridden: dict[str, Holder] = {}
    held_by: Holder | None = None
    held_file: CommitLogFile | None = None
    for mapped in files[:-1]:  # never the last file
        if len(delete) >= config.delete_files_batch_max:
            break
        if not forced and now < mapped.modified + reserved:
            break  # too young: and so are the later files (no hole in the log)
        short = [h for h in holders if h.offset < mapped.end]
        if short:
            slowest = min(short, key=lambda h: (h.offset, h.name))
            if not forced:
                held_by, held_file = slowest, mapped
                break
            for holder in short:
                overridden.setdefault(holder.name, holder)
        delete.append(mapped)
    return RetentionPlan(
        tuple(delete),
        time_up,
        space_full,
        forced,
        held_by,
        tuple(overridden.values()),
        held_file,
    )


@attrs.define
class RetentionStatistics:
    """What the service did since it started.

    Attributes:
        rounds: rounds run.
        deleted_files: commit log files deleted.
        deleted_queue_files: consume queue files deleted.
        last_deleted: when the last commit log file was deleted (seconds since the epoch), or
            None.
        held_by: the holder (e.g. ``slave 10.0.0.2:41234``) and offset that kept a file at
            the last round, or None.
    """

    rounds: int = 0
    deleted_files: int = 0
    deleted_queue_files: int = 0
    last_deleted: float | None = None
    held_by: tuple[str, int] | None = None


def disk_used_ratio(path: Path) -> float | None:
    """The used fraction of the file system holding ``path`` (used / (used + available),
    RocketMQ's and ``df``'s), or None when it cannot be read."""
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return None
    entire = usage.used + usage.free
    return usage.used / entire if entire > 0 else 0.0


def _local_hour(now: float) -> int:
    return time.localtime(now).tm_hour


def _modified(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0  # gone or unreadable: as old as can be (the store decides if it may go)


class RetentionService:
    """Deletes expired commit log and consume queue files of ``store`` (see the module
    docstring); :meth:`run` in a nursery for the store's life.

    Args:
        store: the open store.
        config: the settings.
        holders: who still needs the log from an offset on (a master's connected slaves).
        clock: seconds since the epoch (file ages; tests give a fake one).
        hour_of: the local hour of day of a :func:`clock` reading.
        disk_ratio: the used fraction of the store's disk, or None when unreadable.
        file_time: a file's last modification (seconds since the epoch).
    """

    def __init__(
        self,
        store: CommitLogStore,
        config: RetentionConfig | None = None,
        *,
        holders: Callable[[], Sequence[Holder]] = tuple,
        clock: Callable[[], float] = time.time,
        hour_of: Callable[[float], int] = _local_hour,
        disk_ratio: Callable[[], float | None] | None = None,
        file_time: Callable[[Path], float] = _modified,
    ) -> None:
        self.store = store
        self.config = config or RetentionConfig()
        self._holders = holders
        self._clock = clock
        self._hour_of = hour_of
        self._disk_ratio = disk_ratio or (lambda: disk_used_ratio(store.root))
        self._file_time = file_time
        self.statistics = RetentionStatistics()
        self._held_since: dict[int, float] = {}  # file start -> when a reader first held it
        self._logged_hold: tuple[str, int] | None = None
        self._warned_stuck = False
        self._last_min = 0  # as RocketMQ: a store opened trimmed has its queues cleaned once
        self.min_offset_listeners: list[Callable[[int], None]] = []
        """Called with the commit log's new min offset after the consume queues were cleaned
        to it: where other indexes of the log (RocketMQ's index files) clean theirs."""

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run a round every ``clean_resource_interval`` until cancelled or the store closes."""
        task_status.started()
        while not self._closed():
            await trio.sleep(self.config.clean_resource_interval)
            if self._closed():
                return
            await self.clean_once()

    def _closed(self) -> bool:
        return self.store.closed

    def plan(self) -> RetentionPlan:
        """The decision for the store as it is now."""
        now = self._clock()
        files = [
            CommitLogFile(m.start_offset, m.end_offset, self._file_time(m.path))
            for m in self.store.commit_log.files
        ]
        return plan_retention(
            files,
            now=now,
            hour=self._hour_of(now),
            disk_ratio=self._disk_ratio(),
            config=self.config,
            holders=tuple(self._holders()),
        )

    async def clean_once(self) -> int:
        """One round: delete the commit log files the plan names, then clean the consume
        queues if the min offset moved. Returns how many commit log files were deleted."""
        self.statistics.rounds += 1
        plan = self.plan()
        self._note_hold(plan)
        deleted = 0
        if plan.triggered and plan.delete:
            deleted = await self._delete(plan)
        full_and_stuck = plan.space_full and not deleted
        if full_and_stuck and not self._warned_stuck:
            logger.warning(
                "%s: the disk is used past diskMaxUsedSpaceRatio %d %% but no commit log file "
                "could be deleted (%s)",
                self.store.root,
                self.config.disk_max_used_space_ratio,
                self._why_none(plan),
            )
        self._warned_stuck = full_and_stuck
        await self._clean_consume_queues()
        return deleted

    def _why_none(self, plan: RetentionPlan) -> str:
        if plan.held_by is not None:
            return f"{plan.held_by.name} has not received past offset {plan.held_by.offset}"
        if len(self.store.commit_log.files) < 2:
            return "only the last file is left"
        if not plan.forced:
            return (
                f"none is older than fileReservedTime {self.config.file_reserved_time:g} h; "
                f"files of any age go past diskSpaceCleanForciblyRatio "
                f"{self.config.disk_space_clean_forcibly_ratio:g}"
            )
        return "the first file is not flushed, dispatched or released yet"

    def _note_hold(self, plan: RetentionPlan) -> None:
        held_by, held_file = plan.held_by, plan.held_file
        if held_by is None or held_file is None:
            self.statistics.held_by = self._logged_hold = None
            return
        self.statistics.held_by = (held_by.name, held_by.offset)
        key = (held_by.name, held_file.start)
        if key != self._logged_hold:
            logger.info(
                "%s: keeping commit log file %d and later: %s has acknowledged only up to "
                "offset %d (files it has not received are kept until the disk is used past "
                "diskSpaceCleanForciblyRatio %g)",
                self.store.root,
                held_file.start,
                held_by.name,
                held_by.offset,
                self.config.disk_space_clean_forcibly_ratio,
            )
        self._logged_hold = key

    async def _delete(self, plan: RetentionPlan) -> int:
        store = self.store
        config = self.config
        why = []
        if plan.time_up:
            why.append(f"deleteWhen {config.delete_when}")
        if plan.space_full:
            why.append(f"disk used past diskMaxUsedSpaceRatio {config.disk_max_used_space_ratio} %")
        if plan.forced:
            why.append(
                f"past diskSpaceCleanForciblyRatio {config.disk_space_clean_forcibly_ratio:g}: "
                "files of any age"
            )
        for holder in plan.overridden:
            logger.warning(
                "%s: the disk is used past diskSpaceCleanForciblyRatio %g: deleting commit log "
                "files %s has not received (it acknowledged up to offset %d; it will need "
                "--resync if it cannot catch up)",
                store.root,
                config.disk_space_clean_forcibly_ratio,
                holder.name,
                holder.offset,
            )
        deleted = 0
        for index, mapped in enumerate(plan.delete):
            if self._closed():
                break
            files = store.commit_log.files
            if not files or files[0].start_offset != mapped.start:
                break  # the store changed meanwhile (a slave truncated): next round
            if index and config.delete_commit_log_files_interval > 0:
                await trio.sleep(config.delete_commit_log_files_interval)
                if self._closed() or store.commit_log.files[0].start_offset != mapped.start:
                    break
            since = self._held_since.get(mapped.start)
            now = trio.current_time()
            force = (
                since is not None and now - since >= config.destroy_mapped_file_interval_forcibly
            )
            # A file held by a reader: one garbage collection when first found held (a view
            # in a reference cycle), not one per round until it is forced.
            if not store.delete_first_commit_log_file(force=force) and not (
                since is None and self._released_only(mapped.start) and self._collect_and_delete()
            ):
                if since is None and self._released_only(mapped.start):
                    self._held_since[mapped.start] = now
                    logger.info(
                        "%s: commit log file %d is still mapped by a reader: kept for up to "
                        "destroyMapedFileIntervalForcibly %g s",
                        store.root,
                        mapped.start,
                        config.destroy_mapped_file_interval_forcibly,
                    )
                break
            if force:
                logger.warning(
                    "%s: commit log file %d was still mapped by a reader after %g s: unlinked "
                    "anyway (the reader's view stays valid until it drops it)",
                    store.root,
                    mapped.start,
                    config.destroy_mapped_file_interval_forcibly,
                )
            self._held_since.pop(mapped.start, None)
            deleted += 1
            self.statistics.deleted_files += 1
            self.statistics.last_deleted = self._clock()
            logger.info(
                "%s: deleted commit log file %d (last written %s)",
                store.root,
                mapped.start,
                time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(mapped.modified)),
            )
        if deleted:
            logger.info(
                "%s: deleted %d commit log file(s) older than %g h (%s); the commit log now "
                "starts at %d",
                store.root,
                deleted,
                config.file_reserved_time,
                "; ".join(why),
                store.min_offset,
            )
        return deleted

    def _collect_and_delete(self) -> bool:
        """Collect garbage, then try again: a view often outlives its reader only in a
        reference cycle (the traceback of a connection that failed while sending it)."""
        gc.collect()
        return self.store.delete_first_commit_log_file()

    def _released_only(self, start: int) -> bool:
        """Whether the first file (starting at ``start``) may go but for a reader mapping it:
        it is not the last and its records are flushed and dispatched."""
        store = self.store
        files = store.commit_log.files
        return (
            len(files) >= 2
            and files[0].start_offset == start
            and files[0].end_offset <= min(store.flushed_offset, store.dispatched_offset)
        )

    async def _clean_consume_queues(self) -> None:
        store = self.store
        low = store.min_offset
        if low <= self._last_min or store.closed:
            return
        self._last_min = low
        interval = self.config.delete_consume_queue_files_interval
        for topic, queue_id in store.queues():
            if self._closed():
                return
            deleted = store.clean_consume_queue(topic, queue_id, force=True)
            if deleted:
                self.statistics.deleted_queue_files += deleted
                logger.info(
                    "%s: deleted %d consume queue file(s) of %s/%d below commit log offset %d",
                    store.root,
                    deleted,
                    topic,
                    queue_id,
                    low,
                )
                if interval > 0:
                    await trio.sleep(interval)
        deleted = store.clean_index_files()
        if deleted:
            logger.info(
                "%s: deleted %d index file(s) below commit log offset %d", store.root, deleted, low
            )
        for listener in list(self.min_offset_listeners):
            try:
                listener(low)
            except Exception:
                logger.exception("%s: a min offset listener failed", store.root)
