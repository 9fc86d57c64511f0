"""A short run of the DLedger put benchmark with ali-ons (``bench/dledger_put.py --clients
alions``): a name server process, 1 and 3 nodes registered with it and a classic master, ali-ons
sending through the routes for a second; every send acknowledged and each case reported with
the nodes' and the client's CPU per message."""

from __future__ import annotations

import pytest
from bench_support import run_bench
from interop_support import ClientUnavailable, ensure_alions

from hanet.testing import cli_flags

pytestmark = pytest.mark.slow


def test_alions_sends_to_the_leader_the_name_server_routes_and_to_the_master() -> None:
    try:
        ensure_alions()
    except ClientUnavailable as exc:
        pytest.skip(f"ali-ons unavailable: {exc}")
    flags = cli_flags(rounds=1, nodes="1,3", sizes=100, clients="alions", concurrency=8)
    result = run_bench("dledger_put.py", [*flags, "--seconds", "1"])
    cases = result["cases"]
    assert set(cases) == {"1n/100B/alions", "3n/100B/alions", "master/100B/alions"}
    for case in cases.values():
        assert case["failed"] == 0 and case["first_error"] is None
        assert case["msg_s_median"] > 0 and case["p99_ms_median"] > 0
        assert case["cpu_us_per_msg_median"] > 0 and case["client_cpu_us_per_msg_median"] > 0
        assert len(case["load1"]) == 1 and case["in_flight"] == 8
    for name in ("1n/100B/alions", "3n/100B/alions"):
        assert cases[name]["vs_master"] > 0 and cases[name]["vs_rocketmq_dledger"] > 0
