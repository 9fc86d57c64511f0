"""``hanet consume``: a consumer group member that pulls its share of a topic's queues.

``hanet consume --namesrv HOST:PORT --group G --topic T`` looks the topic's route up on the
name servers, pulls its share of the queues (:class:`~hanet.client.Consumer`: the group's
members, each ``--client-id``, split the queues and rebalance when one joins or leaves; alone
it takes them all), prints each message (one
line, or one JSON object with ``--json``: the record's fields plus ``broker_name`` and
``broker_id``, the member it came from) and commits the group's offsets every
``--commit-interval`` seconds and at exit. It keeps going across a master's loss by reading
from a slave (from the last committed offset on a restart). A group that never committed
starts at each queue's end unless ``--from-beginning``.

``--rate N`` makes it a slow consumer (at most N messages a second). It runs until Ctrl-C or
SIGTERM (offsets committed, the group left; exit 130 or 0), ``--max-messages N`` messages, or
``--idle-exit S`` seconds without a message; then prints a summary line on stderr, with the
queues it held.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import trio

from hanet.boot import run_until_stopped
from hanet.client import (
    ConsumedMessage,
    Consumer,
    ConsumerConfig,
    ConsumerStats,
    RemotingError,
    broker_connector,
)
from hanet.store import record_to_json

from ._client import add_namesrv, client_tls, name_server_client
from ._credentials import add_credentials, signed_verb
from ._support import EXIT_OK, fail, first_message, interrupted, stop_status

__all__ = ["message_json", "register", "run_consume"]


def register(subparsers: Any) -> None:
    """Add the ``consume`` verb."""
    parser = subparsers.add_parser(
        "consume",
        description="Pull this member's share of the queues of --topic for --group (the "
        "group's members split them and rebalance) through the route the name servers give, "
        "print the messages, commit offsets (to the master, to a slave while it is down) and "
        "keep going across a master's loss by reading from a slave.",
    )
    add_namesrv(parser, required=True)
    parser.add_argument("--group", required=True, help="the consumer group")
    parser.add_argument("--topic", required=True, help="the topic")
    parser.add_argument(
        "--client-id", default=None, metavar="ID",
        help="this member's id in the group (default: host@pid@random)",
    )  # fmt: skip
    parser.add_argument(
        "--from-beginning", action="store_true",
        help="a queue the group never committed starts at its first message (default: its end)",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="one JSON object per message")
    parser.add_argument(
        "--max-messages", type=int, default=None, metavar="N", help="stop after N messages"
    )
    parser.add_argument(
        "--idle-exit", type=float, default=None, metavar="S",
        help="stop after S seconds without a message",
    )  # fmt: skip
    parser.add_argument(
        "--commit-interval", type=float, default=5.0, metavar="S",
        help="seconds between commits (5)",
    )  # fmt: skip
    parser.add_argument(
        "--retry-interval", type=float, default=5.0, metavar="S",
        help="seconds a broker whose connection failed is skipped before it is tried again (5)",
    )  # fmt: skip
    parser.add_argument(
        "--pull-batch", type=int, default=32, metavar="N", help="most messages per pull (32)"
    )
    parser.add_argument(
        "--rate", type=float, default=None, metavar="N",
        help="consume at most N messages a second (a slow consumer, for demos)",
    )  # fmt: skip
    parser.add_argument(
        "--timeout", type=float, default=5.0, metavar="S",
        help="seconds to connect and per request (5)",
    )  # fmt: skip
    parser.add_argument(
        "--tls-ca", type=Path, default=None, metavar="FILE",
        help="talk TLS (brokers and name servers), trusting this CA (plain TCP without it)",
    )  # fmt: skip
    parser.add_argument(
        "--tls-cert", type=Path, default=None, metavar="FILE",
        help="present this certificate (PEM) to brokers that require one (mutual TLS)",
    )  # fmt: skip
    parser.add_argument(
        "--tls-key", type=Path, default=None, metavar="FILE", help="the key of --tls-cert"
    )
    add_credentials(parser)
    parser.set_defaults(func=signed_verb(run_consume))


def message_json(message: ConsumedMessage) -> dict[str, Any]:
    """A consumed message as printed by ``--json``: the record's fields, its broker name and
    the member (broker id) it was pulled from."""
    return {
        "broker_name": message.broker_name,
        "broker_id": message.broker_id,
        **record_to_json(message.record),
    }


def _line(message: ConsumedMessage) -> str:
    record = message.record
    body = record.body.decode("utf-8", "replace")
    if len(body) > 60:
        body = body[:57] + "..."
    member = "master" if message.broker_id == 0 else f"slave {message.broker_id}"
    props = " ".join(f"{k}={v}" for k, v in record.properties.items())
    return (
        f"{message.broker_name}/{record.queue_id} @{record.queue_offset:<8} ({member}) "
        f"{record.msg_id} {props} {body!r}"
    )


def summary_line(stats: ConsumerStats) -> str:
    """What a consumer did, in one line."""
    return (
        f"consumed {stats.delivered} messages ({stats.slave_pulls} of {stats.pulls} pulls "
        f"answered by a slave, {stats.failovers} failovers); {stats.commits} offsets committed "
        f"({stats.slave_commits} to a slave, {stats.commit_failures} retried); held "
        f"{', '.join(f'{name}/{queue}' for name, queue in sorted(stats.held)) or 'no queue'}"
        f" ({stats.rebalances} rebalances)"
    )


async def run_consume(args: argparse.Namespace) -> int:
    """``hanet consume``."""
    if args.max_messages is not None and args.max_messages < 1:
        return fail("--max-messages must be >= 1")
    try:  # the consumer's own checks (NaN included), named by their flags
        config = ConsumerConfig(
            request_timeout=args.timeout,
            pull_batch=args.pull_batch,
            commit_interval=args.commit_interval,
            retry_interval=args.retry_interval,
            client_id=args.client_id,
        )
    except ValueError as exc:
        return fail(
            f"--pull-batch must be >= 1, --commit-interval, --retry-interval and --timeout > 0 "
            f"({exc})"
        )
    if args.rate is not None and args.rate <= 0:
        return fail("--rate must be > 0")
    stats: list[ConsumerStats] = []

    async def consume() -> None:
        tls = client_tls(args)
        async with Consumer.open(
            name_server_client(args, tls),
            args.group,
            args.topic,
            from_beginning=args.from_beginning,
            connector=broker_connector(tls=tls, timeout=args.timeout),
            config=config,
        ) as consumer:
            stats.append(consumer.stats)
            idle = math.inf if args.idle_exit is None else args.idle_exit
            started = trio.current_time()
            while args.max_messages is None or consumer.stats.delivered < args.max_messages:
                message = None
                with trio.move_on_after(idle):
                    message = await anext(consumer)
                if message is None:
                    break
                print(json.dumps(message_json(message)) if args.json else _line(message))
                if args.rate:
                    sys.stdout.flush()
                    await trio.sleep_until(started + consumer.stats.delivered / args.rate)
                if consumer.stats.delivered % 64 == 0 or not consumer.buffered:
                    sys.stdout.flush()

    failure: str | None = None
    status = EXIT_OK
    try:
        status = stop_status(await run_until_stopped(consume))
    except* (RemotingError, OSError) as group:
        failure = first_message(group)
    sys.stdout.flush()
    if stats:
        print(f"hanet: {summary_line(stats[0])}", file=sys.stderr, flush=True)
    return interrupted(status) if failure is None else fail(failure)
