"""DLedger failover: time from SIGKILL of the leader to the first successful put, with puts in
flight across every kill; every acknowledged put must survive.

Three ``hanet dledger`` processes on loopback. ``--in-flight N`` putters run for the whole run,
each through a ``FailoverClient`` of its own (it follows a follower's SERVICE_NOT_AVAILABLE to
the leader, and sends a request again on the next address when its connection is lost), each
putting bodies of its own, one after another, every body unique. Each round kills the leader
with SIGKILL while they put, times until a put is acknowledged by another node, restarts the
killed node and lets it catch up. A put answered PUT_OK is acknowledged; one answered another
status or an error is not (it may or may not be stored: both are allowed).

Once the kills are done and the putters stopped, everything the last leader serves is read
(pulls of every queue), and the run fails (exit 1), naming them, if any acknowledged body is
missing, if a body the client sent only once is stored twice, or if a body stored twice carries
two ``UNIQ_KEY`` values (a put sent again keeps its own, so that consumers can tell the copy
by its message id). Also reported: unacknowledged puts stored anyway, and bodies stored twice
after the client sent them again (at least once is what a client that resends after a lost
connection promises). ``--in-flight 1`` is the sequential mode: one put in flight at each kill
at most.

    .venv/bin/python bench/failover.py --kills 10 --in-flight 16 --election-timeout 0.5

A table, then the last line one JSON object (goal: p99 <= 2 x the election timeout). With
fewer than 100 kills the p99 is the maximum sample: the goal is then checked against the
maximum and reported as such (``p99_s`` is null).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dledger_group import Group

from hanet.client import BrokerClient, BrokerRequestError, FailoverClient, PutStatus

QUEUES = 64  # at most: the pulls stop at the first queue the broker refuses as illegal


async def served(address: tuple[str, int]) -> dict[bytes, list[str]]:
    """Every body of topic ``T`` the broker at ``address`` serves, with the ``UNIQ_KEY`` of
    each copy stored (as many as copies)."""
    bodies: dict[bytes, list[str]] = {}
    async with BrokerClient.connect(*address) as client:
        for queue in range(QUEUES):
            offset = 0
            while True:
                try:
                    result = await client.pull("T", queue, offset, 256)
                except BrokerRequestError as exc:
                    if queue and "is illegal" in str(exc):
                        return bodies  # past the topic's read queues
                    raise
                for m in result.messages:
                    bodies.setdefault(m.body, []).append(m.properties.get("UNIQ_KEY", ""))
                if not result.messages or result.next_offset >= result.max_offset:
                    break
                offset = result.next_offset
    return bodies


@dataclass
class Put:
    """One body's put: the kills done when it was sent and when it was answered, and how
    often the client sent it again (after a lost connection; after a refusal)."""

    sent_after: int
    answered_after: int = -1
    resent: int = 0
    redirects: int = 0
    outcome: str = ""
    """PUT_OK, another status's name, or the error's class name."""

    @property
    def acknowledged(self) -> bool:
        return self.outcome == PutStatus.PUT_OK.name


@dataclass
class Ledger:
    """What the putters sent, and the failover being timed."""

    retry_for: float = 30.0
    """How long a client keeps sending a put again (elsewhere) before it gives up."""
    puts: dict[bytes, Put] = field(default_factory=dict)
    kills: int = 0
    killed: float = 0.0
    killed_address: tuple[str, int] | None = None
    back: trio.Event | None = None
    """Set by the first put acknowledged by another node after the kill."""
    in_flight_at_kills: list[int] = field(default_factory=list)
    busy: int = 0
    stop: bool = False

    def answered(self, address: tuple[str, int] | None) -> None:
        if self.back is not None and not self.back.is_set() and address != self.killed_address:
            self.back.set()


async def putter(index: int, addresses: list[tuple[str, int]], ledger: Ledger) -> None:
    async with FailoverClient.connect(
        addresses, retry_for=ledger.retry_for, request_timeout=2
    ) as client:
        n = 0
        while not ledger.stop:
            body = b"p%d-%d" % (index, n)
            n += 1
            put = ledger.puts[body] = Put(ledger.kills)
            resent, redirects = client.resent, client.redirects
            ledger.busy += 1
            try:
                put.outcome = (await client.put("T", body)).status.name
            except Exception as exc:  # an error: not acknowledged, perhaps stored
                put.outcome = type(exc).__name__
            finally:
                ledger.busy -= 1
            put.answered_after = ledger.kills
            put.resent, put.redirects = client.resent - resent, client.redirects - redirects
            if put.acknowledged:
                ledger.answered(client.address)
            else:
                await trio.sleep(0.01)  # after a refusal (non-OK status) as after an error


async def run(
    args: argparse.Namespace, root: Path, ledger: Ledger
) -> tuple[list[float], dict[bytes, list[str]]]:
    group = Group(root, 3, election_timeout=args.election_timeout)
    group.start_all()
    times: list[float] = []
    try:
        await group.leader()
        addresses = list(group.brokers.values())
        async with trio.open_nursery() as nursery:
            for index in range(args.in_flight):
                nursery.start_soon(putter, index, addresses, ledger)
            await trio.sleep(3 * args.election_timeout)
            for kill in range(args.kills):
                old = await group.leader()
                ledger.back = trio.Event()
                ledger.killed_address = group.brokers[old]
                group.kill(old)
                ledger.killed = time.monotonic()
                ledger.kills += 1
                ledger.in_flight_at_kills.append(ledger.busy)
                with trio.fail_after(60):
                    await ledger.back.wait()
                times.append(time.monotonic() - ledger.killed)
                acked = sum(p.acknowledged for p in ledger.puts.values())
                print(
                    f"kill {kill + 1:>3}: {old} with {ledger.in_flight_at_kills[-1]:>3} puts in "
                    f"flight -> first put after {times[-1]:.3f} s ({acked} acknowledged so far)",
                    flush=True,
                )
                group.start(old)
                await trio.sleep(3 * args.election_timeout)
            ledger.stop = True  # the putters end with the put they are in
        stored = await served(group.brokers[await group.leader()])
    finally:
        group.stop_all()
    return times, stored


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--in-flight", type=int, default=16, help="concurrent putters")
    parser.add_argument("--election-timeout", type=float, default=0.5)
    parser.add_argument(
        "--retry-for",
        type=float,
        default=30.0,
        help="seconds a client keeps sending a put again before it answers the error "
        "(short: more puts unacknowledged across a kill)",
    )
    args = parser.parse_args()
    if args.kills < 1 or args.in_flight < 1:
        parser.error("--kills and --in-flight take a number from 1")
    root = Path(tempfile.mkdtemp(prefix="hanet-failover-"))
    ledger = Ledger(retry_for=args.retry_for)
    load = [os.getloadavg()[0]]
    failed = True
    try:
        measured, found = trio.run(run, args, root, ledger)
        load.append(os.getloadavg()[0])
        times = sorted(measured)
        puts = ledger.puts
        acked = [b for b, p in puts.items() if p.acknowledged]
        missing = [b for b in acked if b not in found]
        unacked = [b for b, p in puts.items() if not p.acknowledged]
        stored_unacked = [b for b in unacked if b in found]
        twice = [b for b, copies in found.items() if len(copies) > 1]
        twice_acked = [b for b in twice if b in puts and puts[b].acknowledged]
        twice_sent_once = [
            b for b in twice if b in puts and puts[b].resent + puts[b].redirects == 0
        ]
        unknown = [b for b in found if b not in puts]
        # a put sent again keeps its UNIQ_KEY: its copies are one message id, which a
        # consumer can drop
        twice_other_id = [b for b in twice if len(set(found[b])) > 1]
        failed = bool(missing or twice_sent_once or unknown or twice_other_id)
    finally:
        if failed:  # keep the nodes' logs for the evidence; drop the stores
            for node in root.iterdir():
                if node.is_dir():
                    shutil.rmtree(node, ignore_errors=True)
            print(f"node logs kept in {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    n = len(times)
    p50 = times[n // 2]
    p99 = times[math.ceil(0.99 * n) - 1] if n >= 100 else None  # nearest rank
    tail, tail_name = (times[-1], "max") if p99 is None else (p99, "p99")
    goal = 2 * args.election_timeout
    p99_text = "" if p99 is None else f", p99 {p99:.3f} s"
    errors = Counter(puts[b].outcome for b in unacked)

    def described(body: bytes) -> str:
        put = puts.get(body)
        if put is None:
            return f"{body!r} (never sent)"
        return (
            f"{body!r} (sent after kill {put.sent_after}, answered {put.outcome} after kill "
            f"{put.answered_after}, resent {put.resent}, redirected {put.redirects}, "
            f"stored {len(found[body])}x)"
        )

    rows = [
        ("puts in flight (putters)", str(args.in_flight)),
        ("client retries for (s)", f"{args.retry_for:g}"),
        ("puts in flight at each kill", " ".join(map(str, ledger.in_flight_at_kills))),
        ("puts sent", str(len(puts))),
        ("acknowledged (PUT_OK)", str(len(acked))),
        ("acknowledged, missing", str(len(missing))),
        ("unacknowledged", f"{len(unacked)} {dict(errors) if errors else ''}".strip()),
        ("unacknowledged, stored anyway", str(len(stored_unacked))),
        ("resent by the client (lost connection)", str(sum(p.resent > 0 for p in puts.values()))),
        ("refusals followed elsewhere (redirects)", str(sum(p.redirects for p in puts.values()))),
        ("stored twice", str(len(twice))),
        ("stored twice, acknowledged", str(len(twice_acked))),
        ("stored twice, sent once", str(len(twice_sent_once))),
        ("stored twice, another UNIQ_KEY", str(len(twice_other_id))),
        ("stored, never sent", str(len(unknown))),
        ("load average (1 min), start/end", f"{load[0]:.2f} / {load[-1]:.2f}"),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    for title, bodies in (
        ("MISSING (acknowledged)", missing),
        ("STORED TWICE, SENT ONCE", twice_sent_once),
        ("STORED TWICE, ANOTHER UNIQ_KEY", twice_other_id),
        ("STORED, NEVER SENT", unknown),
        ("stored twice", [b for b in twice if b not in twice_sent_once]),
    ):
        for body in bodies[:20]:
            print(f"{title}: {described(body)}")
    print(
        f"{n} kills: p50 {p50:.3f} s{p99_text}, max {times[-1]:.3f} s "
        f"(goal p99 <= {goal:g} s, checked on the {tail_name}: "
        f"{'met' if tail <= goal else 'missed'})"
    )
    print(
        json.dumps(
            {
                "kills": n,
                "election_timeout": args.election_timeout,
                "in_flight": args.in_flight,
                "retry_for_s": args.retry_for,
                "p50_s": round(p50, 3),
                "p99_s": None if p99 is None else round(p99, 3),
                "max_s": round(times[-1], 3),
                "goal_checked_on": tail_name,
                "puts": len(puts),
                "acknowledged": len(acked),
                "missing": len(missing),
                "unacknowledged": len(unacked),
                "stored_unacknowledged": len(stored_unacked),
                "resent": sum(p.resent > 0 for p in puts.values()),
                "redirects": sum(p.redirects for p in puts.values()),
                "duplicates": len(twice),
                "duplicates_acknowledged": len(twice_acked),
                "duplicates_sent_once": len(twice_sent_once),
                "duplicates_with_another_id": len(twice_other_id),
                "stored_never_sent": len(unknown),
                "in_flight_at_kills": ledger.in_flight_at_kills,
                "load1": [round(x, 2) for x in load],
                f"{tail_name}_over_election_timeout": round(tail / args.election_timeout, 2),
            }
        )
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
