"""Repairing a store from replicas (``--repair-from HOST:PORT[,HOST:PORT...]``): its damaged
ranges, and a tail it lost, from replicas that hold them intact.

Before the broker starts (:func:`repair_store`), the store is opened (recovery marks what is
damaged, see ``hanet.store``); while a master runs (:func:`auto_repair`), a range marked on the
way (a record that failed its checks in an HA transfer) is repaired as soon as a replica serves
it. Each damaged range is read from the replica's broker port with hanet's
HANET_READ_LOG request (30003), a chunk at a time (whole records; a file's blank tail is
rebuilt from the answer's stop). :meth:`~hanet.store.CommitLogStore.repair` then checks every
fetched record fully and that the bytes fit the range exactly before it writes them over the
damaged bytes, clears the mark and fills the consume queue entries. A range the replica cannot
serve intact is an error naming it: nothing of it is written. Each replica is tried in turn.

A master that lost the tail of its log (a crash before it flushed) while a replica holds more
takes the replica's records from its own end on, validated as a slave validates them
(``append_raw``), after checking that the replica's bytes just before that end are its own (the
replica holds the same log, not another one): no acknowledged message stays lost, and no slave
is left ahead of its master (before the broker starts only: a serving master takes puts).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

import trio

from hanet.client import BrokerClient, BrokerError
from hanet.errors import HanetError
from hanet.protocol import HanetRequestCode, RemotingCommand, ResponseCode
from hanet.store import CommitLogStore, DamagedRange, StoreConfig, StoreError
from hanet.store.lowlevel import encode_blank

__all__ = ["RepairError", "auto_repair", "repair_damage", "repair_store"]

log = logging.getLogger("hanet.broker.repair")

_CHUNK = 4 * 1024 * 1024


class RepairError(HanetError):
    """A damaged range could not be repaired (the reason names it)."""


async def repair_store(store_config: StoreConfig, root: Path, addresses: str) -> list[str]:
    """Open the store at ``root``, repair every damaged range, then refill a lost tail, from
    the broker ports ``addresses`` (``HOST:PORT,...``, tried in turn); one line per repair.

    Raises:
        RepairError: a range no replica could serve intact, or a bad address (nothing of that
            range was written; earlier repairs stay).
    """
    replicas = _replicas(addresses)
    with CommitLogStore.open(root, store_config) as store:
        done = await repair_damage(store, addresses)
        tail = await _from_any(replicas, partial(_refill_tail, store), every=True)
        if tail:
            log.warning("%s: %s", root, tail)
            done.append(tail)
    return done


async def repair_damage(store: CommitLogStore, addresses: str) -> list[str]:
    """Repair every damaged range of the open ``store`` from ``addresses`` (tried in turn);
    one line per range repaired.

    Raises:
        RepairError: as :func:`repair_store`.
    """
    replicas = _replicas(addresses)
    done: list[str] = []
    for damaged in store.damage.ranges:
        line = await _from_any(replicas, partial(_repair, store, damaged))
        log.warning("%s: %s", store.root, line)
        done.append(line)
    return done


async def auto_repair(store: CommitLogStore, addresses: str, interval: float) -> None:
    """Every ``interval`` seconds, repair the damaged ranges of a serving ``store`` from
    ``addresses`` (a range no replica serves yet is tried again later). Runs until
    cancelled."""
    _replicas(addresses)  # a bad address fails now, not every round
    while True:
        await trio.sleep(interval)
        if not store.damage:
            continue
        try:
            await repair_damage(store, addresses)
        except RepairError as exc:
            log.warning("%s: damaged ranges not repaired yet: %s", store.root, exc)


def _replicas(addresses: str) -> list[tuple[str, int]]:
    replicas = [_split(a.strip()) for a in addresses.split(",") if a.strip()]
    if not replicas:
        raise RepairError("--repair-from: no replica address (HOST:PORT,...)")
    return replicas


def _split(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise RepairError(f"--repair-from {address!r}: expected HOST:PORT (a broker port)")
    return host.strip("[]"), int(port)


async def _from_any(
    replicas: list[tuple[str, int]],
    attempt: Callable[[BrokerClient], Awaitable[str]],
    *,
    every: bool = False,
) -> str:
    """``attempt`` with each replica in turn: the first success (with ``every``, the lines of
    all that did something; a replica that fails is skipped, never an error)."""
    failures: list[str] = []
    lines: list[str] = []
    for host, port in replicas:
        try:
            async with BrokerClient.connect(host, port, connect_timeout=5) as client:
                line = await attempt(client)
        except (RepairError, BrokerError, StoreError, ValueError) as exc:
            failures.append(f"{host}:{port}: {exc}")
            continue
        if not every:
            return line
        if line:
            lines.append(line)
    if every:
        for failure in failures:  # skipped, but said: a lost tail no replica gave back
            log.warning("--repair-from: nothing taken from %s", failure)
        return "; ".join(lines)
    raise RepairError("; ".join(failures))


async def _repair(store: CommitLogStore, damaged: DamagedRange, client: BrokerClient) -> str:
    data, _ = await _read(client, damaged.start, damaged.end, store.config.mapped_file_size)
    if len(data) != damaged.end - damaged.start:
        raise RepairError(
            f"damaged range {damaged}: the replica's records end at "
            f"{damaged.start + len(data)}, not at the range's end (not the same log?)"
        )
    try:
        count = store.repair(damaged, data)
    except ValueError as exc:  # CorruptRecordError is one
        raise RepairError(f"damaged range {damaged} not repaired: {exc}") from exc
    return f"repaired {damaged} from {_name(client)}: {count} record(s)"


async def _refill_tail(store: CommitLogStore, client: BrokerClient) -> str:
    """Take the records a replica holds past the store's end (nothing when it holds none)."""
    start = store.max_offset
    bounds = await _answer(client, {"offset": store.min_offset, "maxBytes": 0})
    replica_end = int(bounds.fields.get("maxOffset", 0) or 0)
    if replica_end <= start:
        return ""
    file_size = store.config.mapped_file_size
    if start > 0:  # the replica's bytes just before our end must be ours
        low = max(start - 4096, int(bounds.fields.get("minOffset", 0) or 0))
        seen = await _answer(client, {"offset": low, "maxBytes": start - low, "seek": "true"})
        at = int(seen.fields.get("offset", low) or low)
        theirs = bytes(seen.body or b"")
        if theirs and bytes(store.read(at, len(theirs))) != theirs:
            raise RepairError(
                f"its log differs from this master's before {start} (at {at}): not the same log"
            )
    position = start
    while position < replica_end:
        data, _ = await _read(client, position, replica_end, file_size, once=True)
        if not data:
            break
        store.append_raw(position, data)
        if store.max_offset != position + len(data):
            error = store.dispatch_error
            raise RepairError(f"its records at {position} failed validation: {error}")
        position += len(data)
    return f"took {position - start} bytes past {start} (a lost tail) from {_name(client)}"


async def _answer(client: BrokerClient, fields: dict[str, object]) -> RemotingCommand:
    answer = await client.invoke(RemotingCommand.request(HanetRequestCode.HANET_READ_LOG, fields))
    if answer.code != ResponseCode.SUCCESS:
        raise RepairError(f"{_name(client)} refused {fields}: {answer.remark or answer.code}")
    return answer


def _name(client: BrokerClient) -> str:
    return f"{client.address[0]}:{client.address[1]}"


async def _read(
    client: BrokerClient, start: int, end: int, file_size: int, *, once: bool = False
) -> tuple[bytes, int]:
    """The replica's bytes of ``[start, end)`` as whole records (a file's blank tail rebuilt
    as the writer makes it), stopping early where the replica has no record; with ``once``,
    one answer's worth. Returns the bytes and where they end."""
    data = bytearray()
    position = start
    while position < end:
        asked = min(_CHUNK, end - position)
        answer = await _answer(client, {"offset": position, "maxBytes": asked})
        body = answer.body
        if len(body) > asked:
            raise RepairError(f"{_name(client)}: {len(body)} bytes at {position}, {asked} asked")
        data += body
        position += len(body)
        reason = answer.fields.get("stopReason")
        stop = int(answer.fields.get("stopOffset", -1) or -1)
        if reason == "blank" and stop == position:
            blank = int(answer.fields.get("blankSize", 0) or 0)
            if blank < 8 or blank != file_size - position % file_size:  # it ends its file
                raise RepairError(f"{_name(client)}: a bad blank record at {position}")
            data += encode_blank(blank) + bytes(blank - 8)
            position += blank
        elif not body:
            break
        if once:
            break
    return bytes(data), position
