"""HANET_EPOCHS (30004): a broker's epoch history, asked by a slave before it follows.

The request's body is empty or the asking slave's own history, in the answer's form below: the
master then computes the consistent point too and, when the slave's log goes past it, logs a
WARNING naming the slave, the point and both histories (at most once a minute per slave and
point); a body that is not a history, or longer than :data:`MAX_HISTORY_BODY`, answers
SYSTEM_ERROR (a slave whose history is longer sends none: it still compares on its side).
The answer's body is JSON::

    {"entries": [{"epoch": 1, "startOffset": 0}, {"epoch": 2, "startOffset": 40960}],
     "maxOffset": 81920}

the epochs of ``<store>/epoch`` that start at or before the commit log's max offset, ascending,
and that max offset (the last epoch's end); ext field ``maxOffset`` too. A damaged epoch file
answers SYSTEM_ERROR naming it. A RocketMQ 4.9.8 broker answers REQUEST_CODE_NOT_SUPPORTED:
its slaves follow without an epoch check (:func:`fetch_epochs` returns why), as do the slaves
of a master whose ACL refuses them (NO_PERMISSION: sign with ``--access-key``; HANET_EPOCHS
needs an account, no resource).
"""

from __future__ import annotations

import json
import logging
import ssl
from collections.abc import Iterable

import attrs
import trio

from hanet.channel import HandlerContext, parse_address
from hanet.client import RemotingConnection, RemotingError
from hanet.ha import format_epochs
from hanet.protocol import DivergedSlaveInfo, HanetRequestCode, RemotingCommand, ResponseCode
from hanet.store import CommitLogStore, EpochFile, EpochFileError, EpochHistory
from hanet.store.lowlevel import find_consistent_point

from ._backend import BrokerBackend
from ._connection import connection_of

__all__ = ["EpochService", "fetch_epochs", "last_epoch"]

log = logging.getLogger("hanet.broker.epochs")

_LOG_INTERVAL = 60.0  # a refusing slave asks every few seconds
_FORGET = 120.0  # a listed diverged slave that has not asked for this long is dropped
_MAX_LISTED = 64
_MAX_LISTED_PER_SLAVE = 4  # consistent points listed for one slave host

MAX_HISTORY_BODY = 1024 * 1024
"""Most bytes of a slave's history a HANET_EPOCHS request carries (tens of thousands of
terms)."""


@attrs.define
class _Divergence:
    """A diverged slave as the status lists it (see :class:`DivergedSlaveInfo`)."""

    address: str
    point: int
    slave_end: int
    master_end: int
    epochs: str
    checks: int
    last_seen: float


EPOCHS_TIMEOUT = 3.0
"""Seconds a slave waits to connect to its master's broker port, then for the answer."""


def last_epoch(store: CommitLogStore) -> int | None:
    """The newest epoch of ``store``'s history (None: none, or a damaged file)."""
    try:
        last = EpochFile.load(store.root).last
    except EpochFileError:
        return None
    return None if last is None else last.epoch


class EpochService:
    """Serves HANET_EPOCHS from a backend's store (see the module)."""

    def __init__(self, backend: BrokerBackend) -> None:
        self.backend = backend
        self._logged: dict[tuple[str, int], float] = {}
        self._diverged: dict[tuple[str, int], _Divergence] = {}
        """(slave host, consistent point) -> the last check that found it diverged."""

    def diverged_slaves(self) -> tuple[DivergedSlaveInfo, ...]:
        """The slaves whose last epoch checks found them diverged (the status's list), those
        that have not asked for :data:`_FORGET` seconds left out."""
        now = trio.current_time()
        for key, note in list(self._diverged.items()):
            if now - note.last_seen > _FORGET:
                del self._diverged[key]
        return tuple(
            DivergedSlaveInfo(
                address=note.address,
                diverged_at=note.point,
                slave_end=note.slave_end,
                master_end=note.master_end,
                slave_epochs=note.epochs,
                checks=note.checks,
                last_seen_ago=round(now - note.last_seen, 3),
            )
            for _, note in sorted(self._diverged.items())
        )

    def _note(self, peer: str, point: int, slave: EpochHistory, mine: EpochHistory) -> None:
        """List a diverged slave (or refresh it), or drop its listing once its check finds
        its log ending at the point it diverged at (it truncated to it)."""
        host = peer.rpartition(":")[0]
        now = trio.current_time()
        if point >= slave.end_offset:
            self._diverged.pop((host, slave.end_offset), None)
            return
        note = self._diverged.get((host, point))
        checks = 1 if note is None else note.checks + 1
        if note is None:  # bounded, per slave host and in all: drop the oldest
            same_host = [key for key in self._diverged if key[0] == host]
            if len(same_host) >= _MAX_LISTED_PER_SLAVE:
                self._drop_oldest(same_host)
            elif len(self._diverged) >= _MAX_LISTED:
                self._drop_oldest(self._diverged)
        epochs = format_epochs(slave.entries)
        self._diverged[host, point] = _Divergence(
            peer, point, slave.end_offset, mine.end_offset, epochs, checks, now
        )

    def _drop_oldest(self, keys: Iterable[tuple[str, int]]) -> None:
        del self._diverged[min(keys, key=lambda key: self._diverged[key].last_seen)]

    def serve(self, ctx: HandlerContext, request: RemotingCommand) -> RemotingCommand:
        store = self.backend.store
        end = store.max_offset
        try:
            history = EpochFile.load(store.root).history(end)
        except EpochFileError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        if len(request.body) > MAX_HISTORY_BODY:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"the request's body ({len(request.body)} bytes) is longer than an epoch history "
                f"is read from ({MAX_HISTORY_BODY})",
            )
        if request.body:
            try:
                slave = EpochHistory.from_json(json.loads(bytes(request.body)))
            except ValueError as exc:  # a JSONDecodeError or UnicodeDecodeError too
                return request.response(
                    ResponseCode.SYSTEM_ERROR, f"the request's body is not an epoch history: {exc}"
                )
            self._compare(connection_of(ctx).peer, slave, history)
        body = json.dumps(history.to_json(), separators=(",", ":")).encode()
        return request.response(ResponseCode.SUCCESS, None, {"maxOffset": end}, body)

    def _compare(self, peer: str, slave: EpochHistory, mine: EpochHistory) -> None:
        """Log and list a slave whose log goes past the consistent point (it refuses or
        truncates)."""
        if not slave.entries or slave.end_offset == 0:
            return  # a new slave, or one without epochs: nothing to compare
        point = find_consistent_point(
            slave.entries, slave.end_offset, mine.entries, mine.end_offset
        )
        self._note(peer, point, slave, mine)
        if point >= slave.end_offset:
            return
        key = (peer.rpartition(":")[0], point)
        now = trio.current_time()
        if now - self._logged.get(key, -_LOG_INTERVAL) < _LOG_INTERVAL:
            return
        if len(self._logged) > 1024:  # bounded: forget the oldest notes
            self._logged.clear()
        self._logged[key] = now
        log.warning(
            "slave %s diverged from this master at offset %d: its log goes on to %d with bytes "
            "no shared master term wrote (its epochs %s, this master's %s, log end %d); it "
            "refuses to follow, or truncates to %d with haDivergence=truncate",
            peer,
            point,
            slave.end_offset,
            format_epochs(slave.entries),
            format_epochs(mine.entries),
            mine.end_offset,
            point,
        )


async def fetch_epochs(
    address: str | None,
    mine: EpochHistory | None = None,
    *,
    tls: ssl.SSLContext | None = None,
    within: float = EPOCHS_TIMEOUT,
) -> EpochHistory | str:
    """Ask the broker port at ``address`` for its epoch history, telling it ``mine`` (the
    slave's, unless longer than :data:`MAX_HISTORY_BODY`); a string says why there is none to
    compare (no address known, a broker without epochs).

    Raises:
        OSError: the broker could not be reached, or answered an error or a bad body.
    """
    if address is None:
        return "the master's broker port is not known (--master-broker, or a name server)"
    host, port = parse_address(address)
    body = b"" if mine is None else json.dumps(mine.to_json(), separators=(",", ":")).encode()
    if len(body) > MAX_HISTORY_BODY:
        body = b""  # the master would refuse it: it does not compare, this slave does
    try:
        async with RemotingConnection.connect(
            host, port, connect_timeout=within, request_timeout=within, tls=tls
        ) as conn:
            request = RemotingCommand.request(HanetRequestCode.HANET_EPOCHS, body=body)
            answer = await conn.invoke(request)
    except RemotingError as exc:
        raise ConnectionError(f"cannot ask the master's broker port {address}: {exc}") from exc
    if answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
        return f"the master's broker port {address} keeps no epochs (a RocketMQ 4.9.8 broker)"
    if answer.code == ResponseCode.NO_PERMISSION:  # followed as before: say why, do not block
        return (
            f"the master's broker port {address} refused HANET_EPOCHS ({answer.remark or ''}): "
            "sign this slave's requests (--access-key) to compare epochs"
        )
    if answer.code != ResponseCode.SUCCESS:
        raise ConnectionError(
            f"the master's broker port {address} answered HANET_EPOCHS with code "
            f"{answer.code}: {answer.remark or ''}"
        )
    try:
        return EpochHistory.from_json(json.loads(bytes(answer.body)))
    except ValueError as exc:  # a JSONDecodeError too
        raise ConnectionError(
            f"the master's broker port {address} sent a bad epoch history: {exc}"
        ) from exc
