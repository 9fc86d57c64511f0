"""``hanet admin <verb>``: manage a cluster as RocketMQ's ``mqadmin`` does, with its verbs'
names and option letters, over the same requests (:class:`hanet.client.AdminClient`); works
against hanet's and RocketMQ's name servers and brokers alike.

Every verb takes ``-n HOST:PORT[;HOST:PORT...]`` (the name servers; ``,`` separates too),
``--json`` (one JSON document on stdout instead of the table) and ``--timeout SECONDS``:

- ``clusterList [-c CLUSTER]``: every broker with its version, rates, puts today, disk use.
- ``topicList [-c CLUSTER]``, ``topicRoute -t TOPIC``, ``topicStatus -t TOPIC`` (each queue's
  min and max offsets on each master).
- ``updateTopic -t TOPIC (-b ADDR | -c CLUSTER) [-r 8] [-w 8] [-p 6] [-o]``,
  ``deleteTopic -t TOPIC -c CLUSTER`` (from the cluster's masters, then the name servers).
- ``brokerStatus (-b ADDR | -c CLUSTER)``: a broker's runtime table.
- ``consumerProgress -g GROUP [-t TOPIC]``: per queue the broker and consumer offsets, the lag.
- ``consumerConnection -g GROUP``, ``producerConnection -g GROUP -b ADDR``: live members.
- ``resetOffsetByTime -g GROUP -t TOPIC -s TIME [-f true|false]``: TIME is ms since the epoch,
  ``now``, or ``yyyy-MM-dd#HH:mm:ss:SSS`` (local time), as mqadmin reads it.
- ``updateSubGroup -g GROUP (-b ADDR | -c CLUSTER) [-s -m -d -q -r -i -w -a]``,
  ``deleteSubGroup -g GROUP (-b ADDR | -c CLUSTER) [-r]``.
- ``getBrokerConfig (-b ADDR | -c CLUSTER)``, ``updateBrokerConfig (-b | -c) -k KEY -v VALUE``
  (only settings that may change live; the broker refuses others, saying so).
- ``wipeWritePerm -b BROKER_NAME`` / ``addWritePerm -b BROKER_NAME``: on every name server.

Message lookups (``queryMsgById``, ``queryMsgByKey``, ``queryMsgByOffset``) come from
:mod:`._admin_query`. Exit status: 0 done; 1 a server refused (its remark on stderr); 2 the command
could not run (bad options, nothing answering).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from hanet.client import AdminClient, NameServerClient, RemotingError, RemotingResponseError
from hanet.protocol import (
    CreateTopicRequestHeader,
    MessageQueue,
    SubscriptionGroupConfig,
)

from . import _admin_query
from ._support import EXIT_ERROR, EXIT_FAILED, EXIT_OK, fail, parse_addresses

__all__ = ["AdminVerbs", "admin_client", "parse_time", "register"]

Handler = Callable[[argparse.Namespace], Awaitable[int]]


def _boolean(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"not true or false: {text!r}")


def parse_time(text: str) -> int:
    """A reset time as mqadmin reads it: ms since the epoch, ``now``, or
    ``yyyy-MM-dd#HH:mm:ss:SSS`` (local time); -1 stays -1 (the queues' ends)."""
    text = text.strip()
    if text.lower() == "now":
        return int(time.time() * 1000)
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        stamp = datetime.datetime.strptime(text, "%Y-%m-%d#%H:%M:%S:%f")
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a time: {text!r} (ms since the epoch, now, or yyyy-MM-dd#HH:mm:ss:SSS)"
        ) from None
    return int(stamp.timestamp() * 1000)


class AdminVerbs:
    """The ``hanet admin`` verbs' registry: :meth:`add_parser` gives a verb the common
    options (``-n``, ``--json``, ``--timeout``); set its handler with
    ``parser.set_defaults(func=handler)`` (``async def handler(args) -> int``; build the
    client with :func:`admin_client`)."""

    def __init__(self, subparsers: Any) -> None:
        self._subparsers = subparsers

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        """A verb's parser with the common options."""
        # A fresh parent per verb: argparse's "resolve" takes a redefined option's strings off
        # the parent's action itself, which a shared parent would pass on to every verb.
        common = argparse.ArgumentParser(add_help=False)
        common.add_argument(
            "-n", "--namesrv", type=parse_addresses, default=None, metavar="HOST:PORT[;HOST:PORT]",
            help="the name servers (';' or ',' between them)",
        )  # fmt: skip
        common.add_argument(
            "--json", action="store_true", help="print one JSON document instead of a table"
        )
        common.add_argument(
            "--timeout", type=float, default=5.0, metavar="SECONDS",
            help="seconds for connecting and for each answer (5)",
        )  # fmt: skip
        kwargs["parents"] = [*kwargs.get("parents", ()), common]
        kwargs.setdefault("conflict_handler", "resolve")  # a verb may define -n its own way
        parser: argparse.ArgumentParser = self._subparsers.add_parser(name, **kwargs)
        return parser


def admin_client(args: argparse.Namespace) -> AdminClient:
    """The client of a verb's ``-n`` and ``--timeout``."""
    names = NameServerClient(args.namesrv, timeout=args.timeout) if args.namesrv else None
    return AdminClient(names, timeout=args.timeout)


def _run(work: Callable[[argparse.Namespace, AdminClient], Awaitable[Any]]) -> Handler:
    """A verb's handler: ``work`` returns what to print (a JSON document; a table in text)."""

    async def handler(args: argparse.Namespace) -> int:
        try:
            client = admin_client(args)
            result = await work(args, client)
        except RemotingResponseError as exc:
            return fail(str(exc), EXIT_FAILED)
        except (RemotingError, ValueError) as exc:
            return fail(str(exc), EXIT_ERROR)
        document, table = result
        if args.json:
            print(json.dumps(document, indent=2, ensure_ascii=False), flush=True)
        else:
            for line in table:
                print(line)
            sys.stdout.flush()
        return EXIT_OK

    return handler


def _table(rows: Sequence[Sequence[Any]]) -> list[str]:
    """Rows as left-aligned columns (the first row: the headings)."""
    if not rows:
        return []
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def _target(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    group = parser.add_mutually_exclusive_group(required=required)
    group.add_argument("-b", "--broker-addr", metavar="HOST:PORT", help="one broker's address")
    group.add_argument("-c", "--cluster", metavar="NAME", help="every master of the cluster")


async def _addresses(args: argparse.Namespace, client: AdminClient) -> list[str]:
    if args.broker_addr:
        return [args.broker_addr]
    return await client.masters(args.cluster)


def _queue(queue: MessageQueue) -> dict[str, Any]:
    return {"topic": queue.topic, "brokerName": queue.broker_name, "queueId": queue.queue_id}


def _ms_text(stamp: int) -> str:
    if stamp <= 0:
        return "N/A"
    moment = datetime.datetime.fromtimestamp(stamp / 1000)
    return moment.strftime("%Y-%m-%d %H:%M:%S")


# -- the verbs --------------------------------------------------------------------------------


async def _cluster_list(args: argparse.Namespace, client: AdminClient) -> Any:
    info = await client.cluster()
    rows: list[dict[str, Any]] = []
    for cluster, name, broker_id, address in info.members():
        if args.cluster and cluster != args.cluster:
            continue
        try:
            runtime = await client.runtime_info(address)
        except RemotingError as exc:
            runtime = {"error": str(exc)}
        rows.append(
            {
                "cluster": cluster,
                "brokerName": name,
                "brokerId": broker_id,
                "addr": address,
                "runtime": runtime,
            }
        )
    table: list[list[Any]] = [
        ["#Cluster Name", "#Broker Name", "#BID", "#Addr", "#Version", "#InTPS", "#OutTPS",
         "#PutToday", "#GetToday", "#SPACE"],
    ]  # fmt: skip
    for row in rows:
        r = row["runtime"]
        table.append(
            [
                row["cluster"],
                row["brokerName"],
                row["brokerId"],
                row["addr"],
                r.get("brokerVersionDesc", "-"),
                r.get("putTps", "-").split(" ")[0],
                r.get("getTransferedTps", "-").split(" ")[0],
                r.get("msgPutTotalTodayNow", "-"),
                r.get("msgGetTotalTodayNow", "-"),
                r.get("commitLogDiskRatio", "-"),
            ]
        )
    return rows, _table(table)


async def _topic_list(args: argparse.Namespace, client: AdminClient) -> Any:
    names = await client.name_servers.topics(args.cluster)
    topics = list(names.topic_list)
    return {"topicList": topics}, topics


async def _topic_route(args: argparse.Namespace, client: AdminClient) -> Any:
    route = await client.route(args.topic)
    table: list[list[Any]] = [["#Broker Name", "#Read Queues", "#Write Queues", "#Perm", "#Addrs"]]
    addresses = {b.broker_name: b.broker_addrs for b in route.broker_datas}
    for queue in route.queue_datas:
        members = addresses.get(queue.broker_name, {})
        shown = ", ".join(f"{i}={a}" for i, a in sorted(members.items()))
        table.append(
            [queue.broker_name, queue.read_queue_nums, queue.write_queue_nums, queue.perm, shown]
        )
    return route.to_json(), _table(table)


async def _topic_status(args: argparse.Namespace, client: AdminClient) -> Any:
    offsets = []
    for _, address in await client.route_masters(args.topic):
        stats = await client.topic_stats(address, args.topic)
        for queue, offset in sorted(stats.offset_table.items()):
            offsets.append((queue, offset))
    document = [
        _queue(q)
        | {
            "minOffset": o.min_offset,
            "maxOffset": o.max_offset,
            "lastUpdateTimestamp": o.last_update_timestamp,
        }
        for q, o in offsets
    ]
    table: list[list[Any]] = [
        ["#Broker Name", "#QID", "#Min Offset", "#Max Offset", "#Last Updated"]
    ]
    for q, o in offsets:
        table.append(
            [
                q.broker_name,
                q.queue_id,
                o.min_offset,
                o.max_offset,
                _ms_text(o.last_update_timestamp),
            ]
        )
    return document, _table(table)


async def _update_topic(args: argparse.Namespace, client: AdminClient) -> Any:
    header = CreateTopicRequestHeader(
        args.topic,
        read_queue_nums=args.read_queue_nums,
        write_queue_nums=args.write_queue_nums,
        perm=args.perm,
        order=args.order,
    )
    done = []
    for address in await _addresses(args, client):
        await client.create_topic(address, header)
        done.append(address)
    lines = [f"create topic to {a} success." for a in done]
    document = {"topic": args.topic, "brokers": done, "readQueueNums": args.read_queue_nums,
                "writeQueueNums": args.write_queue_nums, "perm": args.perm}  # fmt: skip
    return document, lines


async def _delete_topic(args: argparse.Namespace, client: AdminClient) -> Any:
    masters = await client.masters(args.cluster)
    for address in masters:
        await client.delete_topic_in_broker(address, args.topic)
    await client.delete_topic_in_namesrv(args.topic, args.cluster)
    line = f"delete topic [{args.topic}] from cluster [{args.cluster}] success."
    return {"topic": args.topic, "cluster": args.cluster, "brokers": masters}, [line]


async def _broker_status(args: argparse.Namespace, client: AdminClient) -> Any:
    out: dict[str, dict[str, str]] = {}
    lines: list[str] = []
    for address in await _addresses(args, client):
        info = await client.runtime_info(address)
        out[address] = info
        width = max((len(k) for k in info), default=0)
        prefix = f"{address}  " if len(out) > 1 or args.cluster else ""
        lines.extend(f"{prefix}{key:<{width}} : {value}" for key, value in sorted(info.items()))
    return (out if args.cluster else next(iter(out.values()), {})), lines


async def _consumer_progress(args: argparse.Namespace, client: AdminClient) -> Any:
    table = await client.consumer_progress(args.group, args.topic)
    document = [
        _queue(q)
        | {
            "brokerOffset": w.broker_offset,
            "consumerOffset": w.consumer_offset,
            "diff": w.broker_offset - w.consumer_offset,
            "lastTimestamp": w.last_timestamp,
        }
        for q, w in table.items()
    ]
    rows: list[list[Any]] = [
        [
            "#Topic",
            "#Broker Name",
            "#QID",
            "#Broker Offset",
            "#Consumer Offset",
            "#Diff",
            "#LastTime",
        ]
    ]
    for q, w in table.items():
        rows.append(
            [q.topic, q.broker_name, q.queue_id, w.broker_offset, w.consumer_offset,
             w.broker_offset - w.consumer_offset, _ms_text(w.last_timestamp)]
        )  # fmt: skip
    total = sum(w.broker_offset - w.consumer_offset for w in table.values())
    lines = [*_table(rows), "", f"Diff Total: {total}"]
    return {"group": args.group, "offsets": document, "diffTotal": total}, lines


async def _consumer_connection(args: argparse.Namespace, client: AdminClient) -> Any:
    last: RemotingError | None = None
    for _, address in await client.route_masters(f"%RETRY%{args.group}"):
        try:
            body = await client.consumer_connections(address, args.group)
        except RemotingResponseError as exc:
            last = exc
            continue
        break
    else:
        if last is not None:
            raise last
        raise ValueError(f"no broker holds the group {args.group}'s retry topic")
    document = json.loads(body.encode())
    rows: list[list[Any]] = [["#", "#ClientId", "#ClientAddr", "#Language", "#Version"]]
    for i, c in enumerate(body.connection_set, 1):
        rows.append([i, c.client_id, c.client_addr, c.language, c.version])
    subscriptions = [[topic, s.sub_string] for topic, s in sorted(body.subscription_table.items())]
    lines = [*_table(rows), "", *_table([["#Topic", "#SubExpression"], *subscriptions])]
    for what, value in (
        ("ConsumeType", body.consume_type),
        ("MessageModel", body.message_model),
        ("ConsumeFromWhere", body.consume_from_where),
    ):
        lines.append(f"{what}: {value.name if value is not None else '-'}")
    return document, lines


async def _producer_connection(args: argparse.Namespace, client: AdminClient) -> Any:
    body = await client.producer_connections(args.broker_addr, args.group)
    rows: list[list[Any]] = [["#", "#ClientId", "#ClientAddr", "#Language", "#Version"]]
    for i, c in enumerate(body.connection_set, 1):
        rows.append([i, c.client_id, c.client_addr, c.language, c.version])
    return json.loads(body.encode()), _table(rows)


async def _reset_offset_by_time(args: argparse.Namespace, client: AdminClient) -> Any:
    results = await client.reset_offset_by_time(
        args.topic, args.group, args.timestamp, force=args.force
    )
    document = []
    rows: list[list[Any]] = [["#Broker Name", "#QID", "#Offset", "#Consumers"]]
    for result in results:
        for queue, offset in sorted(result.offsets.items()):
            document.append(_queue(queue) | {"offset": offset, "online": result.online})
            rows.append([queue.broker_name, queue.queue_id, offset,
                         "told" if result.online else "offline: committed"])  # fmt: skip
    return {"group": args.group, "topic": args.topic, "timestamp": args.timestamp,
            "offsets": document}, _table(rows)  # fmt: skip


async def _update_sub_group(args: argparse.Namespace, client: AdminClient) -> Any:
    config = SubscriptionGroupConfig(
        args.group,
        consume_enable=args.consume_enable,
        consume_from_min_enable=args.consume_from_min_enable,
        consume_broadcast_enable=args.consume_broadcast_enable,
        retry_queue_nums=args.retry_queue_nums,
        retry_max_times=args.retry_max_times,
        broker_id=args.broker_id,
        which_broker_when_consume_slowly=args.which_broker_when_consume_slowly,
        notify_consumer_ids_changed_enable=args.notify_consumer_ids_changed_enable,
    )
    done = []
    for address in await _addresses(args, client):
        await client.update_subscription_group(address, config)
        done.append(address)
    lines = [f"create subscription group to {a} success." for a in done]
    return {"group": config.to_json(), "brokers": done}, lines


async def _delete_sub_group(args: argparse.Namespace, client: AdminClient) -> Any:
    done = []
    for address in await _addresses(args, client):
        await client.delete_subscription_group(
            address, args.group, remove_offset=args.remove_offset
        )
        done.append(address)
    lines = [f"delete subscription group [{args.group}] from {a} success." for a in done]
    return {"group": args.group, "brokers": done}, lines


async def _get_broker_config(args: argparse.Namespace, client: AdminClient) -> Any:
    out: dict[str, dict[str, str]] = {}
    lines: list[str] = []
    for address in await _addresses(args, client):
        settings = await client.broker_config(address)
        out[address] = settings
        lines.append(f"============{address}============")
        width = max((len(k) for k in settings), default=0)
        lines.extend(f"{key:<{width}} = {value}" for key, value in sorted(settings.items()))
    return out, lines


async def _update_broker_config(args: argparse.Namespace, client: AdminClient) -> Any:
    done = []
    for address in await _addresses(args, client):
        await client.update_broker_config(address, {args.key: args.value})
        done.append(address)
    lines = [f"update broker config success, {a}" for a in done]
    return {"key": args.key, "value": args.value, "brokers": done}, lines


async def _write_perm(args: argparse.Namespace, client: AdminClient, add: bool) -> Any:
    if add:
        counts = await client.add_write_perm(args.broker_name)
    else:
        counts = await client.wipe_write_perm(args.broker_name)
    what = "add" if add else "wipe"
    lines = [
        f"{what} write perm of broker[{args.broker_name}] in name server[{a}] OK, {n}"
        for a, n in counts.items()
    ]
    return {"brokerName": args.broker_name, "topics": counts}, lines


async def _wipe(args: argparse.Namespace, client: AdminClient) -> Any:
    return await _write_perm(args, client, add=False)


async def _add(args: argparse.Namespace, client: AdminClient) -> Any:
    return await _write_perm(args, client, add=True)


def _add_verbs(verbs: AdminVerbs) -> None:
    p = verbs.add_parser(
        "clusterList", help="every broker of the cluster(s) with its runtime figures"
    )
    p.add_argument("-c", "--cluster", default=None, help="only this cluster")
    p.set_defaults(func=_run(_cluster_list))

    p = verbs.add_parser("topicList", help="every topic the name servers route")
    p.add_argument("-c", "--cluster", default=None, help="only this cluster's topics")
    p.set_defaults(func=_run(_topic_list))

    p = verbs.add_parser("topicRoute", help="a topic's route")
    p.add_argument("-t", "--topic", required=True)
    p.set_defaults(func=_run(_topic_route))

    p = verbs.add_parser("topicStatus", help="each queue's offsets on each master")
    p.add_argument("-t", "--topic", required=True)
    p.set_defaults(func=_run(_topic_status))

    p = verbs.add_parser("updateTopic", help="create a topic or change its queues/permission")
    p.add_argument("-t", "--topic", required=True)
    _target(p)
    p.add_argument("-r", "--read-queue-nums", type=int, default=8, help="read queues (8)")
    p.add_argument("-w", "--write-queue-nums", type=int, default=8, help="write queues (8)")
    p.add_argument("-p", "--perm", type=int, default=6, help="2 write, 4 read, 6 both (6)")
    p.add_argument("-o", "--order", type=_boolean, default=False, help="an ordered topic")
    p.set_defaults(func=_run(_update_topic))

    p = verbs.add_parser(
        "deleteTopic", help="delete a topic from a cluster's brokers and the name servers"
    )
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-c", "--cluster", required=True)
    p.set_defaults(func=_run(_delete_topic))

    p = verbs.add_parser("brokerStatus", help="a broker's runtime table")
    _target(p)
    p.set_defaults(func=_run(_broker_status))

    p = verbs.add_parser("consumerProgress", help="a consumer group's progress and lag per queue")
    p.add_argument("-g", "--group", required=True)
    p.add_argument("-t", "--topic", default=None, help="only this topic")
    p.set_defaults(func=_run(_consumer_progress))

    p = verbs.add_parser("consumerConnection", help="a consumer group's live members")
    p.add_argument("-g", "--group", required=True)
    p.set_defaults(func=_run(_consumer_connection))

    p = verbs.add_parser("producerConnection", help="a producer group's live members on a broker")
    p.add_argument("-g", "--group", required=True)
    p.add_argument("-b", "--broker-addr", required=True, metavar="HOST:PORT")
    p.set_defaults(func=_run(_producer_connection))

    p = verbs.add_parser("resetOffsetByTime", help="move a group's offsets of a topic to a time")
    p.add_argument("-g", "--group", required=True)
    p.add_argument("-t", "--topic", required=True)
    p.add_argument(
        "-s", "--timestamp", type=parse_time, required=True,
        help="ms since the epoch, now, or yyyy-MM-dd#HH:mm:ss:SSS (-1: the end)",
    )  # fmt: skip
    p.add_argument(
        "-f", "--force", type=_boolean, default=True,
        help="move offsets forward too (true); false: only back",
    )  # fmt: skip
    p.set_defaults(func=_run(_reset_offset_by_time))

    p = verbs.add_parser("updateSubGroup", help="create or change a consumer group's settings")
    p.add_argument("-g", "--group", required=True)
    _target(p)
    p.add_argument("-s", "--consume-enable", type=_boolean, default=True)
    p.add_argument("-m", "--consume-from-min-enable", type=_boolean, default=False)
    p.add_argument("-d", "--consume-broadcast-enable", type=_boolean, default=False)
    p.add_argument("-q", "--retry-queue-nums", type=int, default=1)
    p.add_argument("-r", "--retry-max-times", type=int, default=16)
    p.add_argument("-i", "--broker-id", type=int, default=0)
    p.add_argument("-w", "--which-broker-when-consume-slowly", type=int, default=1)
    p.add_argument("-a", "--notify-consumer-ids-changed-enable", type=_boolean, default=True)
    p.set_defaults(func=_run(_update_sub_group))

    p = verbs.add_parser("deleteSubGroup", help="delete a consumer group's settings")
    p.add_argument("-g", "--group", required=True)
    _target(p)
    p.add_argument("-r", "--remove-offset", type=_boolean, default=False, help="its offsets too")
    p.set_defaults(func=_run(_delete_sub_group))

    p = verbs.add_parser("getBrokerConfig", help="a broker's settings")
    _target(p)
    p.set_defaults(func=_run(_get_broker_config))

    p = verbs.add_parser("updateBrokerConfig", help="change a setting that may change live")
    _target(p)
    p.add_argument("-k", "--key", required=True)
    p.add_argument("-v", "--value", required=True)
    p.set_defaults(func=_run(_update_broker_config))

    p = verbs.add_parser("wipeWritePerm", help="route a broker name's topics read-only")
    p.add_argument("-b", "--broker-name", required=True)
    p.set_defaults(func=_run(_wipe))

    p = verbs.add_parser("addWritePerm", help="give a broker name's topics write back")
    p.add_argument("-b", "--broker-name", required=True)
    p.set_defaults(func=_run(_add))


def register(subparsers: Any) -> None:
    """Add the ``admin`` verb (and its own verbs) to the ``hanet`` parser."""
    parser = subparsers.add_parser(
        "admin",
        description="Manage name servers and brokers (hanet's or RocketMQ's) with mqadmin's "
        "verbs and option letters; --json prints one JSON document.",
    )
    verbs = AdminVerbs(parser.add_subparsers(dest="admin_verb", metavar="VERB", required=True))
    _add_verbs(verbs)
    _admin_query.add_verbs(verbs)
