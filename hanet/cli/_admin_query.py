"""Message lookups of ``hanet admin``, named after mqadmin's:

- ``queryMsgById -i ID [-t TOPIC] [-n NAMESRV | -b BROKER]``: an offset message id (what a
  broker answers a send with) is looked up at the broker it names, then at ``-b``'s (a slave
  holds the same offsets; VIEW_MESSAGE_BY_ID); when the id is not one, or no broker has its
  record, it is taken as a unique id (``UNIQ_KEY``, what clients show as the message id) and
  looked up with QUERY_MESSAGE on the topic's brokers (``-t`` needed), as mqadmin's
  ``viewMessage`` falls back to ``queryMessageByUniqKey``; the oldest match wins.
- ``queryMsgByKey -t TOPIC -k KEY [-n NAMESRV | -b BROKER]``: every message of the topic with
  the key (``KEYS``) on each broker (QUERY_MESSAGE).
- ``queryMsgByOffset -t TOPIC -q QUEUE -o OFFSET (-b BROKER | -n NAMESRV)``: the message at a
  queue offset (a pull of one message).

The brokers are ``-b HOST:PORT[,HOST:PORT...]`` or, with ``-n``, the topic's route: the master
of each broker name (its first live member). A table is printed (one message: in detail, as
mqadmin's ``printMsg``; ``--json``: one JSON object per message, every field). Found
nothing: exit 1, "no message" (RocketMQ's NO_MESSAGE); a broker that cannot be reached: exit
2.

:func:`add_verbs` adds the three verbs to ``hanet admin``'s registry (:mod:`._admin`).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterable
from typing import Any, Protocol

from hanet.client import (
    QUERY_MAX_TIMESTAMP,
    BrokerClient,
    BrokerError,
    MessageRecord,
    NameServerClient,
    RemotingError,
    query_message,
    view_message,
)
from hanet.errors import HanetError
from hanet.protocol import MessageId
from hanet.store import record_to_json

from ._support import EXIT_FAILED, fail, parse_address, parse_addresses

__all__ = [
    "add_verbs",
    "query_by_id",
    "query_by_key",
    "query_by_offset",
]

_TIMEOUT = 5.0


class _Registry(Protocol):
    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser: ...


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-n", "--namesrv", type=parse_addresses, default=None, metavar="HOST:PORT[;HOST:PORT...]",
        help="the name servers: the topic's brokers are looked up there",
    )  # fmt: skip
    parser.add_argument(
        "-b", "--broker", type=parse_addresses, default=None, metavar="HOST:PORT[,HOST:PORT...]",
        help="the broker ports to ask (instead of the topic's route)",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="one JSON object per message")
    parser.add_argument(
        "--timeout", type=float, default=_TIMEOUT, metavar="S", help="seconds per request (5)"
    )


def add_verbs(verbs: _Registry) -> None:
    """Add ``queryMsgById``, ``queryMsgByKey`` and ``queryMsgByOffset`` to ``verbs``."""
    parser = verbs.add_parser(
        "queryMsgById",
        help="a message by its offset message id or unique id",
        description="An offset message id is looked up at the broker it names "
        "(VIEW_MESSAGE_BY_ID); any other id, or one whose broker has no record there, is taken "
        "as a unique id (UNIQ_KEY) and looked up on the topic's brokers (-t needed) with "
        "QUERY_MESSAGE, as mqadmin does.",
    )
    _common(parser)
    parser.add_argument("-i", "--msgId", dest="msg_id", required=True, help="the message id")
    parser.add_argument("-t", "--topic", default=None, help="the topic (for a unique id)")
    parser.set_defaults(func=query_by_id)

    parser = verbs.add_parser("queryMsgByKey", help="the messages of a topic with a key (KEYS)")
    _common(parser)
    parser.add_argument("-t", "--topic", required=True, help="the topic")
    parser.add_argument("-k", "--msgKey", dest="key", required=True, help="the key")
    parser.add_argument(
        "--begin", type=int, default=0, metavar="MS", help="stored at or after (ms, 0)"
    )
    parser.add_argument(
        "--end", type=int, default=QUERY_MAX_TIMESTAMP, metavar="MS", help="stored at or before"
    )
    parser.add_argument(
        "--max-num", type=int, default=64, metavar="N", help="most messages per broker (64)"
    )
    parser.set_defaults(func=query_by_key)

    parser = verbs.add_parser("queryMsgByOffset", help="the message at a queue offset")
    _common(parser)
    parser.add_argument("-t", "--topic", required=True, help="the topic")
    parser.add_argument("-q", "--queueId", dest="queue_id", type=int, required=True)
    parser.add_argument("-o", "--offset", type=int, required=True, help="the queue offset")
    parser.add_argument(
        "--broker-name", default=None, help="with -n: the broker name (default: the first)"
    )
    parser.set_defaults(func=query_by_offset)


# -- brokers --------------------------------------------------------------------------------


async def _brokers(
    args: argparse.Namespace, topic: str | None, broker_name: str | None = None
) -> list[tuple[str, int]]:
    """``-b``'s addresses, or the master (else the first slave) of each of the topic's
    broker names on ``-n``'s name servers."""
    if args.broker is not None:
        return list(args.broker)
    if args.namesrv is None or topic is None:
        raise _Usage("give -b BROKER, or -n NAMESRV and -t TOPIC")
    route = await NameServerClient(args.namesrv, timeout=args.timeout).route(topic)
    out = []
    for broker in route.brokers:
        if broker_name is not None and broker.broker_name != broker_name:
            continue
        if broker.addresses:
            out.append(parse_address(broker.addresses[0][1]))
    if not out:
        named = f" named {broker_name}" if broker_name else ""
        raise _Usage(f"no broker of topic {topic}{named}")
    return out


class _Usage(HanetError):
    pass


def _show(records: Iterable[MessageRecord], as_json: bool, *, detail: bool = False) -> int:
    """Print the records (a table, each in detail with ``detail``, or JSON lines); exit 1
    with RocketMQ's NO_MESSAGE words when there are none."""
    found = list(records)
    if not found:
        print("no message (NO_MESSAGE: query message finished, but no message)")
        return EXIT_FAILED
    if as_json:
        for record in found:
            print(json.dumps(record_to_json(record)), flush=True)
    elif detail:
        for record in found:
            _print_detail(record)
    else:
        print(f"{'#Message ID':<34} {'#Unique Key':<34} {'#QID':>4} {'#Offset':>10}  #Keys")
        for r in found:
            unique = r.properties.get("UNIQ_KEY", "")
            keys = r.properties.get("KEYS", "")
            print(f"{r.msg_id:<34} {unique:<34} {r.queue_id:>4} {r.queue_offset:>10}  {keys}")
    return 0


def _print_detail(record: MessageRecord) -> None:
    """One message as mqadmin's ``printMsg`` shows it."""
    fields = record_to_json(record)
    rows = [
        ("OffsetID", record.msg_id),
        ("Unique Key", record.properties.get("UNIQ_KEY", "")),
        ("Topic", record.topic),
        ("Tags", f"[{record.properties.get('TAGS', '')}]"),
        ("Keys", f"[{record.properties.get('KEYS', '')}]"),
        ("Queue ID", record.queue_id),
        ("Queue Offset", record.queue_offset),
        ("CommitLog Offset", record.physical_offset),
        ("Reconsume Times", record.reconsume_times),
        ("Born Timestamp", _stamp(record.born_timestamp)),
        ("Store Timestamp", _stamp(record.store_timestamp)),
        ("Born Host", fields["born_host"]),
        ("Store Host", fields["store_host"]),
        ("System Flag", record.sys_flag),
        ("Properties", record.properties),
        ("Body", fields.get("body", fields.get("body_base64"))),
    ]
    for name, value in rows:
        print(f"{name + ':':<20}{value}")
    print()


def _stamp(millis: int) -> str:
    seconds, ms = divmod(millis, 1000)
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds)) + f",{ms:03d}"


async def _query_all(
    args: argparse.Namespace,
    brokers: list[tuple[str, int]],
    topic: str,
    key: str,
    *,
    unique: bool,
    max_num: int = 64,
    begin: int = 0,
    end: int = QUERY_MAX_TIMESTAMP,
) -> tuple[list[MessageRecord], list[str]]:
    found: list[MessageRecord] = []
    errors: list[str] = []
    for host, port in brokers:
        try:
            async with BrokerClient.connect(
                host, port, connect_timeout=args.timeout, request_timeout=args.timeout
            ) as client:
                result = await query_message(
                    client, topic, key, max_num=max_num, begin=begin, end=end, unique=unique
                )
        except (RemotingError, OSError) as exc:
            errors.append(f"{host}:{port}: {exc}")
            continue
        found.extend(result.messages)
    return found, errors


# -- the verbs ------------------------------------------------------------------------------


async def query_by_key(args: argparse.Namespace) -> int:
    """``queryMsgByKey``: the messages of ``-t`` with key ``-k`` on every broker."""
    try:
        brokers = await _brokers(args, args.topic)
        found, errors = await _query_all(
            args,
            brokers,
            args.topic,
            args.key,
            unique=False,
            max_num=args.max_num,
            begin=args.begin,
            end=args.end,
        )
    except _Usage as exc:
        return fail(str(exc))
    except RemotingError as exc:
        return fail(f"cannot look the topic up: {exc}")
    if errors and not found:
        return fail("; ".join(errors))
    return _show(found, args.json)


async def query_by_id(args: argparse.Namespace) -> int:
    """``queryMsgById``: an offset message id at its broker, else a unique id on the
    topic's brokers (see the module docstring)."""
    msg_id: str = args.msg_id.strip()
    try:
        parsed: MessageId | None = MessageId.parse(msg_id)
    except ValueError:
        parsed = None
    if parsed is not None:
        record = await _view(args, parsed)
        if record is not None:
            return _show([record], args.json, detail=True)
    if args.topic is None:
        return fail(
            f"{msg_id}: no message at the broker the id names; give -t TOPIC to look it up "
            "as a unique id"
        )
    try:
        brokers = await _brokers(args, args.topic)
        found, errors = await _query_all(args, brokers, args.topic, msg_id, unique=True)
    except _Usage as exc:
        return fail(str(exc))
    except RemotingError as exc:
        return fail(f"cannot look the topic up: {exc}")
    if errors and not found:
        return fail("; ".join(errors))
    found.sort(key=lambda r: r.store_timestamp)
    return _show(found[:1], args.json, detail=True)


async def _view(args: argparse.Namespace, msg_id: MessageId) -> MessageRecord | None:
    """The record an offset message id names: at the broker it names, else at ``-b``'s
    (a slave holds the same offsets); only a record whose own offset id is ``msg_id``
    counts. None: none there (the id may be a unique id)."""
    candidates: list[tuple[str, int]] = []
    try:
        candidates.append(parse_address(msg_id.address))
    except (ValueError, argparse.ArgumentTypeError):
        pass  # not an address: the id is no offset id
    candidates += [a for a in (args.broker or []) if a not in candidates]
    for host, port in candidates:
        try:
            async with BrokerClient.connect(
                host, port, connect_timeout=min(args.timeout, 3.0), request_timeout=args.timeout
            ) as client:
                record = await view_message(client, msg_id.offset)
        except (BrokerError, RemotingError, OSError, ValueError):
            continue
        if record is not None and record.msg_id == str(msg_id):
            return record
    return None


async def query_by_offset(args: argparse.Namespace) -> int:
    """``queryMsgByOffset``: the message at queue offset ``-o`` of queue ``-q``."""
    try:
        brokers = await _brokers(args, args.topic, args.broker_name)
    except _Usage as exc:
        return fail(str(exc))
    except RemotingError as exc:
        return fail(f"cannot look the topic up: {exc}")
    host, port = brokers[0]
    try:
        async with BrokerClient.connect(
            host, port, connect_timeout=args.timeout, request_timeout=args.timeout
        ) as client:
            pulled = await client.pull(args.topic, args.queue_id, args.offset, 1)
    except (RemotingError, OSError) as exc:
        return fail(f"{host}:{port}: {exc}")
    records = [r for r in pulled.messages if r.queue_offset == args.offset]
    return _show(records, args.json, detail=True)
