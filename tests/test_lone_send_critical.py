"""``bench/lone_send.py --critical``: each round trip split by the system calls on its path,
from ``perf`` events (here made up, so the split is checked exactly)."""

from __future__ import annotations

from bench_support import load_bench

BROKER, CLIENT = 100, 200
EPOLL, READV, WRITEV, SENDTO, RECVFROM = 232, 19, 20, 44, 45
SWITCH = -1


def _send(t: float) -> list[tuple[int, float, bool, int, int]]:
    """One lone send from ``t`` (in us): the client's sendto, the broker woken, its read,
    40 us of handlers, the answer's write, the client's answer, the broker back in its wait."""
    us = 1e-6
    return [
        (CLIENT, (t + 0) * us, False, SENDTO, 0),
        (CLIENT, (t + 3) * us, True, SENDTO, 1100),
        (CLIENT, (t + 4) * us, False, RECVFROM, 0),
        (BROKER, (t + 12) * us, True, EPOLL, 1),
        (BROKER, (t + 20) * us, False, READV, 0),
        (BROKER, (t + 22) * us, True, READV, 1100),
        (BROKER, (t + 62) * us, False, WRITEV, 0),
        (BROKER, (t + 69) * us, True, WRITEV, 200),
        (CLIENT, (t + 90) * us, True, RECVFROM, 200),
        (BROKER, (t + 80) * us, False, EPOLL, 0),
        (BROKER, (t + 81) * us, True, SWITCH, 0),  # asleep in its wait
        (BROKER, (t + 299) * us, False, SWITCH, 0),
    ]


def _preempted(t: float) -> list[tuple[int, float, bool, int, int]]:
    """:func:`_send` with the broker preempted for 15 us in its Python path and for 5 us
    after its answer."""
    us = 1e-6
    return [
        *_send(t),
        (BROKER, (t + 30) * us, True, SWITCH, 1),
        (BROKER, (t + 45) * us, False, SWITCH, 0),
        (BROKER, (t + 72) * us, True, SWITCH, 1),
        (BROKER, (t + 77) * us, False, SWITCH, 0),
    ]


def test_each_round_trip_is_split_into_its_phases() -> None:
    bench = load_bench("lone_send.py", "lone_send_bench")
    events = sorted([e for i in range(5) for e in _send(i * 300.0)], key=lambda e: e[1])
    figures = bench._critical(events, BROKER, CLIENT)
    assert figures["requests"] == 5
    phases = {k: v for k, v in figures.items() if k not in ("requests", "calls_per_request")}
    p50 = {name: phase["p50_us"] for name, phase in phases.items()}
    assert p50["sendto to epoll return (wake-up in)"] == 12.0
    assert p50["epoll return to readv"] == 8.0
    assert p50["readv"] == 2.0
    assert p50["readv to writev (critical, Python)"] == 40.0
    assert p50["writev"] == 7.0
    assert p50["writev to answer read (wake-up out)"] == 28.0
    assert p50["writev to next epoll_wait (off the path)"] == 11.0
    assert p50["client round trip (sendto to answer)"] == 90.0
    assert p50["client between answer and next send"] == 210.0
    assert p50["broker idle in epoll_wait"] == 232.0  # its next wait's start to the next wake
    assert p50["readv to writev (critical, Python), on a CPU"] == 40.0
    assert p50["writev to next epoll_wait (off the path), on a CPU"] == 11.0
    assert figures["calls_per_request"]["readv"] == 1.0
    assert figures["calls_per_request"]["sendto (client)"] == 1.0
    assert figures["calls_per_request"]["switch"] == 1.0


def test_time_switched_out_is_not_counted_on_a_cpu() -> None:
    bench = load_bench("lone_send.py", "lone_send_bench")
    events = sorted([e for i in range(5) for e in _preempted(i * 300.0)], key=lambda e: e[1])
    figures = bench._critical(events, BROKER, CLIENT)
    assert figures["readv to writev (critical, Python)"]["p50_us"] == 40.0
    assert figures["readv to writev (critical, Python), on a CPU"]["p50_us"] == 25.0
    assert figures["writev to next epoll_wait (off the path)"]["p50_us"] == 11.0
    assert figures["writev to next epoll_wait (off the path), on a CPU"]["p50_us"] == 6.0
    assert figures["epoll return to readv, on a CPU"]["p50_us"] == 8.0
    assert figures["calls_per_request"]["involuntary switch"] == 2.0


def test_the_broker_side_alone_needs_no_client() -> None:
    bench = load_bench("lone_send.py", "lone_send_bench")
    events = [e for i in range(3) for e in _send(i * 300.0) if e[0] == BROKER]
    figures = bench._critical(events, BROKER, None)
    assert figures["requests"] == 3
    assert figures["readv to writev (critical, Python)"]["p50_us"] == 40.0
    assert "client round trip (sendto to answer)" not in figures
