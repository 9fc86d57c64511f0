"""``hanet master --repair-from HOST:PORT``: repair the damaged ranges of a master's commit log
from a replica that holds them intact.

Before the broker starts, the master's store is opened (recovery marks what is damaged, see
``hanet.store``), and each damaged range is read from the replica's broker port with hanet's
HANET_READ_LOG request (30003), a chunk at a time (whole records; a file's blank tail is
rebuilt from the answer's stop). :meth:`~hanet.store.CommitLogStore.repair` then checks every
fetched record fully and that the bytes fit the range exactly before it writes them over the
damaged bytes, clears the mark and fills the consume queue entries. A range the replica cannot
serve intact is an error naming it: nothing of it is written.
"""

from __future__ import annotations

import logging
from pathlib import Path

from hanet.client import BrokerClient
from hanet.errors import HanetError
from hanet.protocol import HanetRequestCode, RemotingCommand, ResponseCode
from hanet.store import CommitLogStore, DamagedRange, StoreConfig, encode_blank

__all__ = ["RepairError", "repair_from"]

log = logging.getLogger("hanet.cli.repair")

_CHUNK = 4 * 1024 * 1024


class RepairError(HanetError):
    """A damaged range could not be repaired (the reason names it)."""


async def repair_from(store_config: StoreConfig, root: Path, address: str) -> list[str]:
    """Repair every damaged range of the store at ``root`` from the broker port at
    ``address`` (``HOST:PORT``); returns one line per range repaired.

    Raises:
        RepairError: a range could not be fetched intact or did not check (nothing of it
            was written); earlier ranges stay repaired.
    """
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise RepairError(f"--repair-from {address!r}: expected HOST:PORT (a broker port)")
    done: list[str] = []
    with CommitLogStore.open(root, store_config) as store:
        if not store.damage:
            return done
        async with BrokerClient.connect(host.strip("[]"), int(port)) as client:
            for damaged in store.damage.ranges:
                data = await _fetch(client, damaged, store_config.mapped_file_size)
                try:
                    count = store.repair(damaged, data)
                except ValueError as exc:  # CorruptRecordError is one
                    raise RepairError(f"damaged range {damaged} not repaired: {exc}") from exc
                line = f"repaired {damaged} from {address}: {count} record(s)"
                log.warning("%s: %s", root, line)
                done.append(line)
    return done


async def _fetch(client: BrokerClient, damaged: DamagedRange, file_size: int) -> bytes:
    """The bytes of ``damaged`` as the replica holds them (HANET_READ_LOG answers)."""
    data = bytearray()
    position = damaged.start
    while position < damaged.end:
        fields = {"offset": position, "maxBytes": min(_CHUNK, damaged.end - position)}
        answer = await client.invoke(
            RemotingCommand.request(HanetRequestCode.HANET_READ_LOG, fields)
        )
        if answer.code != ResponseCode.SUCCESS:
            raise RepairError(
                f"damaged range {damaged}: {client.address[0]}:{client.address[1]} refused "
                f"offset {position}: {answer.remark or answer.code}"
            )
        body = bytes(answer.body or b"")
        data += body
        position += len(body)
        reason = answer.fields.get("stopReason")
        stop = int(answer.fields.get("stopOffset", -1) or -1)
        if reason == "blank" and stop == position:  # a file's blank tail: as the writer makes it
            blank = int(answer.fields.get("blankSize", 0) or 0)
            if blank <= 0 or (position + blank) % file_size:
                raise RepairError(f"damaged range {damaged}: a bad blank record at {position}")
            data += encode_blank(blank) + bytes(blank - 8)
            position += blank
        elif not body:
            why = answer.fields.get("stopDetail") or reason or "no data"
            raise RepairError(
                f"damaged range {damaged}: the replica has no intact record at {position} ({why})"
            )
    if position != damaged.end:
        raise RepairError(
            f"damaged range {damaged}: the replica's records end at {position}, not at the "
            "range's end (it does not hold the same log)"
        )
    return bytes(data)
