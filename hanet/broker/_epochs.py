"""HANET_EPOCHS (30004): a broker's epoch history, asked by a slave before it follows.

The request has no fields. The answer's body is JSON::

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
import ssl

from hanet.channel import parse_address
from hanet.client import RemotingConnection, RemotingError
from hanet.protocol import HanetRequestCode, RemotingCommand, ResponseCode
from hanet.store import CommitLogStore, EpochFile, EpochFileError, EpochHistory

__all__ = ["fetch_epochs", "last_epoch", "serve_epochs"]

EPOCHS_TIMEOUT = 3.0
"""Seconds a slave waits to connect to its master's broker port, then for the answer."""


def last_epoch(store: CommitLogStore) -> int | None:
    """The newest epoch of ``store``'s history (None: none, or a damaged file)."""
    try:
        last = EpochFile.load(store.root).last
    except EpochFileError:
        return None
    return None if last is None else last.epoch


def serve_epochs(store: CommitLogStore, request: RemotingCommand) -> RemotingCommand:
    """Serve HANET_EPOCHS from ``store`` (see the module)."""
    end = store.max_offset
    try:
        history = EpochFile.load(store.root).history(end)
    except EpochFileError as exc:
        return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
    body = json.dumps(history.to_json(), separators=(",", ":")).encode()
    return request.response(ResponseCode.SUCCESS, None, {"maxOffset": end}, body)


async def fetch_epochs(
    address: str | None, *, tls: ssl.SSLContext | None = None, within: float = EPOCHS_TIMEOUT
) -> EpochHistory | str:
    """Ask the broker port at ``address`` for its epoch history; a string says why there is
    none to compare (no address known, a broker without epochs).

    Raises:
        OSError: the broker could not be reached, or answered an error or a bad body.
    """
    if address is None:
        return "the master's broker port is not known (--master-broker, or a name server)"
    host, port = parse_address(address)
    try:
        async with RemotingConnection.connect(
            host, port, connect_timeout=within, request_timeout=within, tls=tls
        ) as conn:
            answer = await conn.invoke(RemotingCommand.request(HanetRequestCode.HANET_EPOCHS))
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
