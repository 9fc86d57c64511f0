"""``hanet dump`` and ``hanet verify``: read-only tools for a store or a ``commitlog/`` dir.

- ``hanet dump STORE_DIR [--json] [--from OFFSET] [--limit N] [--mapped-file-size BYTES]``
  prints one line per message (with ``--json`` one JSON object per line); a record whose body
  or whole-record CRC does not match is shown with ``crc=BAD`` (``"crc_ok": false``). A record
  that fails any other check is not shown: its damaged range (up to the next record that passes
  every check) is named on stderr and the dump goes on after it, then exits 1.
- ``hanet verify STORE_DIR [--mapped-file-size BYTES]`` checks every record (magic, lengths,
  CRC, the whole-record CRC property, PHYSICALOFFSET, blank records ending their files, queue
  offsets following each other) and every consume queue entry, and exits 0 when all hold, 1
  naming every inconsistency found (offset and why; the first 20 printed, the rest counted).
  A bad record does not end the check: as recovery does, it goes on at the next record that
  passes every check and names the damaged range in between. The epoch file must read and fit
  the log (each epoch starting at a record's start, none past the log's end).

Both read a log that no longer starts at 0 (retention deleted its first files): from its
first file on; consume queue entries of deleted records are counted, not errors. The file
size is the store's own (``store.properties``) unless ``--mapped-file-size`` says otherwise.

Bad input (a missing directory, a wrong file size, garbage) gives a one-line error on stderr
and exit status 2 (1 for a failed verification), never a traceback. Neither tool writes to the
store, so they work on read-only copies and next to a running broker.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, TextIO

from hanet.store import (
    CommitLogReader,
    MessageRecord,
    StopReason,
    StoreError,
    encode_record,
    record_to_json,
    resolve_store_dir,
)
from hanet.store.lowlevel import (
    CQ_ENTRY_SIZE,
    CRC32_PROPERTY,
    CRC32_RESERVED_LEN,
    DamageLedger,
    crc32_trailer,
    list_mapped_files,
    read_store_sizes,
    record_crc,
)

from ._resync import DamageWalk
from ._support import EXIT_FAILED, EXIT_OK, fail, parse_size
from ._verify_epochs import epoch_problems
from ._verify_queues import QueueCheck, read_consume_queues

__all__ = ["dump", "register", "verify"]


def register(subparsers: Any) -> None:
    """Add the ``dump`` and ``verify`` verbs to the ``hanet`` parser."""
    parser = subparsers.add_parser(
        "dump",
        description="Print one line per message of a store (or its commitlog/ directory).",
    )
    parser.add_argument("store_dir", type=Path, metavar="STORE_DIR")
    parser.add_argument("--json", action="store_true", help="one JSON object per message")
    parser.add_argument(
        "--from", dest="from_offset", type=int, default=None, metavar="OFFSET",
        help="start at this physical offset (a record boundary)",
    )  # fmt: skip
    parser.add_argument("--limit", type=int, default=None, metavar="N", help="at most N messages")
    _add_file_size(parser)
    parser.set_defaults(func=dump)

    parser = subparsers.add_parser(
        "verify",
        description="Exit 0 when every record and consume queue entry holds, else 1 naming "
        "every inconsistency (a bad record's damaged range, and what follows it).",
    )
    parser.add_argument("store_dir", type=Path, metavar="STORE_DIR")
    _add_file_size(parser)
    parser.set_defaults(func=verify)


def _add_file_size(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--mapped-file-size", type=parse_size, default=None, metavar="BYTES",
        help="commit log file size, K/M/G suffixes (default: taken from the files)",
    )  # fmt: skip


def _open(args: argparse.Namespace) -> tuple[CommitLogReader, Path | None]:
    commit_dir, root = resolve_store_dir(args.store_dir)
    size = args.mapped_file_size
    if size is None and root is not None:
        size = read_store_sizes(root).get("mappedFileSizeCommitLog")  # what it was made with
    return CommitLogReader(commit_dir, size), root


_CRC32_HEAD = CRC32_PROPERTY.encode() + b"\x01"


def _crc_ok(record: MessageRecord) -> bool:
    """Whether the body matches BODYCRC and, for a record that carries one, every byte
    matches the whole-record CRC property (``dump`` shows records that fail only these)."""
    if not record.crc_ok:
        return False
    trailer = record.properties_raw[-CRC32_RESERVED_LEN:]
    if not trailer.startswith(_CRC32_HEAD):
        return True  # a RocketMQ 4 record: the body CRC is all it has
    try:
        return crc32_trailer(record_crc(encode_record(record))) == trailer
    except ValueError:
        return False


def _text_line(offset: int, record: MessageRecord, crc_ok: bool) -> str:
    body = record.body.decode("utf-8", "replace")
    if len(body) > 60:
        body = body[:57] + "..."
    properties = " ".join(f"{k}={v}" for k, v in record.properties.items())
    return (
        f"{offset:>12} size={record.size} topic={record.topic} queue={record.queue_id} "
        f"qoffset={record.queue_offset} stored={record.store_timestamp} "
        f"crc={'ok' if crc_ok else 'BAD'} {properties} body={body!r}"
    )


async def dump(args: argparse.Namespace) -> int:
    """``hanet dump``: print the messages up to the data end, naming each damaged range
    (on stderr) and going on after it."""
    try:
        reader, _ = _open(args)
        return _dump(reader, args, sys.stdout)
    except StoreError as exc:
        return fail(str(exc))
    except BrokenPipeError:
        raise  # `hanet dump | head`: the command line ends quietly
    except OSError as exc:
        return fail(f"{args.store_dir}: {exc.strerror or exc}")


def _dump(reader: CommitLogReader, args: argparse.Namespace, out: TextIO) -> int:
    limit = args.limit
    if limit is not None and limit <= 0:
        return EXIT_OK
    walk = DamageWalk(reader, lambda d: _named(f"damaged commit log range {d}: skipped"))
    records = walk.records(args.from_offset, check_crc=False)
    for count, (offset, record) in enumerate(records, 1):
        crc_ok = _crc_ok(record)
        if args.json:
            row = record_to_json(record)
            row["crc_ok"] = crc_ok
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
        else:
            out.write(_text_line(offset, record, crc_ok) + "\n")
        if limit is not None and count >= limit:
            records.close()
            return EXIT_OK
    stop = walk.stop
    if stop is not None and stop.reason is StopReason.INVALID:
        return fail(f"stopped at offset {stop.offset}: {stop.detail}", EXIT_FAILED)
    if walk.damaged:
        return fail(f"{len(walk.damaged)} damaged range(s) skipped", EXIT_FAILED)
    return EXIT_OK


def _named(problem: str) -> None:
    fail(problem, EXIT_FAILED)


async def verify(args: argparse.Namespace) -> int:
    """``hanet verify``: exit 0 when every record and consume queue entry holds."""
    try:
        reader, root = _open(args)
        return _verify(reader, root)
    except StoreError as exc:
        return fail(str(exc))
    except OSError as exc:
        return fail(f"{args.store_dir}: {exc.strerror or exc}")


_SHOWN_PROBLEMS = 20  # problems printed one per line; the rest are counted


def _verify(reader: CommitLogReader, root: Path | None) -> int:
    """Every record against its neighbours and its consume queue entry, every entry against
    the records: each inconsistency is named (the first :data:`_SHOWN_PROBLEMS` printed, the
    rest counted); exit 1 when there is any."""
    check_queues = root is not None and (root / "consumequeue").is_dir()
    queues = read_consume_queues(root) if root is not None and check_queues else {}
    # The dispatch frontier: records past the end of every consume queue entry are not
    # dispatched yet (a live slave dispatches behind its acks), not missing. A queue's entries
    # are in commit log order: its last non-blank entry ends furthest.
    ends = (queue.end() for queue in queues.values())
    frontier = max((e for e in ends if e is not None), default=reader.min_offset)
    check = QueueCheck(queues, check_queues, frontier)
    walk = DamageWalk(reader, lambda _: check.damage())  # on past each bad record
    for topics, rows in walk.index():
        check.window(topics, rows)
    count, undispatched, problems = check.count, check.undispatched, check.problems
    end = reader.min_offset if check.last_end is None else check.last_end
    stop = walk.stop
    assert stop is not None
    marked = list(DamageLedger(root) if root is not None else ())
    for damaged in walk.damaged:  # each where the walk found it, before what it found after
        known = [m for m in marked if m.overlaps(damaged.start, damaged.end)]
        marked = [m for m in marked if m not in known]
        same = [m for m in known if (m.start, m.end) == (damaged.start, damaged.end)]
        note = ", marked by the store: not repaired yet" if known else ""
        problems.append(
            f"bad record at offset {damaged.start}: {damaged.reason}; damaged commit log range "
            f"{same[0] if same else damaged}{note}; valid records resume at {damaged.end}"
        )
    if stop.reason is StopReason.INVALID:
        problems.append(f"bad record at offset {stop.offset}: {stop.detail}")
    data_end = end
    if stop.reason is StopReason.BLANK:
        end = stop.offset + stop.blank_size
    trimmed, unchecked = check.entries(reader.min_offset, stop, end, walk.damaged)
    problems.extend(_queue_file_problems(root) if root is not None and check_queues else ())
    problems.extend(epoch_problems(root, reader, end))
    problems.extend(  # kept by the store, refused until repaired (hanet master --repair-from)
        f"damaged commit log range {damaged}, marked by the store: not repaired yet"
        for damaged in marked
    )
    if problems:
        for problem in problems[:_SHOWN_PROBLEMS]:
            fail(problem, EXIT_FAILED)
        more = len(problems) - _SHOWN_PROBLEMS
        if more > 0:
            fail(f"... and {more} more problem(s)", EXIT_FAILED)
        if unchecked:
            fail(f"{unchecked} consume queue entries past the bad record not checked", EXIT_FAILED)
        if len(problems) > 1:
            fail(f"{len(problems)} problem(s) found", EXIT_FAILED)
        return EXIT_FAILED
    where = "" if check_queues else " (no consume queues to check)"
    if trimmed:
        where += f", {trimmed} entr{'y' if trimmed == 1 else 'ies'} below the first offset"
    if undispatched:
        where += f", {undispatched} message(s) past {frontier} not dispatched yet"
    blank = f", end-of-file blank record at {data_end}" if end != data_end else ""
    print(
        f"OK: {count} messages, offsets {reader.min_offset}..{data_end}{blank}, "
        f"{len(reader.files)} file(s) of {reader.file_size} bytes, "
        f"{len(queues)} consume queue(s){where}"
    )
    return EXIT_OK


def _queue_file_problems(root: Path) -> list[str]:
    """Consume queue files that are not whole entries (a file cut short): RocketMQ's files
    are all of one size, a multiple of 20 bytes."""
    problems = []
    for topic_dir in sorted(p for p in (root / "consumequeue").iterdir() if p.is_dir()):
        for queue_dir in sorted(p for p in topic_dir.iterdir() if p.is_dir()):
            files = list_mapped_files(queue_dir) if queue_dir.name.isdigit() else []
            sizes = {path.stat().st_size for _, path in files}
            if len(sizes) > 1 or any(size % CQ_ENTRY_SIZE for size in sizes):
                shown = ", ".join(f"{path.name}: {path.stat().st_size}" for _, path in files)
                problems.append(
                    f"consume queue {topic_dir.name}/{queue_dir.name}: files of different or "
                    f"partial-entry sizes ({shown})"
                )
    return problems
