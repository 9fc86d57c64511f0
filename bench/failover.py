"""DLedger failover: time from SIGKILL of the leader to the first successful put.

Three ``hanet dledger`` processes on loopback; each round puts through a ``FailoverClient``
(it follows a follower's SERVICE_NOT_AVAILABLE to the leader and tries the next address),
kills the leader with SIGKILL, and times until a put succeeds again; the killed node is
restarted before the next round. Every put has a body of its own; once the kills are done, every
acknowledged (PUT_OK) body is looked for in what the last leader serves (pulls of every queue),
and the run fails, naming them, if any is missing.

    .venv/bin/python bench/failover.py --kills 20 --election-timeout 0.5

A table, then the last line one JSON object (goal: p99 <= 2 x the election timeout). With
fewer than 100 kills the p99 is the maximum sample: the goal is then checked against the
maximum and reported as such (``p99_s`` is null).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dledger_group import Group

from hanet.client import BrokerClient, BrokerRequestError, FailoverClient, PutStatus

QUEUES = 64  # at most: the pulls stop at the first queue the broker refuses as illegal


async def served(address: tuple[str, int]) -> set[bytes]:
    """Every body of topic ``T`` the broker at ``address`` serves."""
    bodies: set[bytes] = set()
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
                bodies.update(m.body for m in result.messages)
                if not result.messages or result.next_offset >= result.max_offset:
                    break
                offset = result.next_offset
    return bodies


async def run(args: argparse.Namespace, root: Path) -> tuple[list[float], int, list[bytes]]:
    group = Group(root, 3, election_timeout=args.election_timeout)
    group.start_all()
    times: list[float] = []
    acked: list[bytes] = []
    try:
        await group.leader()
        addresses = list(group.brokers.values())
        async with FailoverClient.connect(addresses, retry_for=30, request_timeout=2) as client:
            for kill in range(args.kills):
                old = await group.leader()
                for n in range(20):
                    body = b"before-%d-%d" % (kill, n)
                    assert (await client.put("T", body)).status is PutStatus.PUT_OK
                    acked.append(body)
                group.kill(old)
                killed = time.monotonic()
                tries = 0
                while True:
                    ok = False
                    body = b"after-%d-%d" % (kill, tries)
                    tries += 1
                    with contextlib.suppress(Exception):
                        ok = (await client.put("T", body)).status is PutStatus.PUT_OK
                    if ok:
                        acked.append(body)
                        break
                    await trio.sleep(0.01)  # after a refusal (non-OK status) as after an error
                times.append(time.monotonic() - killed)
                print(f"kill {kill + 1:>3}: {old} -> first put after {times[-1]:.3f} s", flush=True)
                group.start(old)
                await trio.sleep(3 * args.election_timeout)
        found = await served(group.brokers[await group.leader()])
    finally:
        group.stop_all()
    return times, len(acked), [body for body in acked if body not in found]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--election-timeout", type=float, default=0.5)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="hanet-failover-"))
    try:
        measured, acked, missing = trio.run(run, args, root)
        times = sorted(measured)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    n = len(times)
    p50 = times[n // 2]
    p99 = times[math.ceil(0.99 * n) - 1] if n >= 100 else None  # nearest rank
    tail, tail_name = (times[-1], "max") if p99 is None else (p99, "p99")
    goal = 2 * args.election_timeout
    p99_text = "" if p99 is None else f", p99 {p99:.3f} s"
    print(f"{acked} acknowledged puts, {len(missing)} missing after the kills: {missing[:10]}")
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
                "p50_s": round(p50, 3),
                "p99_s": None if p99 is None else round(p99, 3),
                "max_s": round(times[-1], 3),
                "goal_checked_on": tail_name,
                "acknowledged": acked,
                "missing": len(missing),
                f"{tail_name}_over_election_timeout": round(tail / args.election_timeout, 2),
            }
        )
    )
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
