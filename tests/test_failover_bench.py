"""A short run of the DLedger failover benchmark (bench/failover.py): two leader kills with
puts in flight across each; nothing acknowledged is missing afterwards, and the figures are
reported."""

from __future__ import annotations

import pytest
from bench_support import run_bench

from hanet.testing import cli_flags

pytestmark = pytest.mark.slow


def test_two_kills_with_puts_in_flight_lose_nothing_acknowledged() -> None:
    flags = cli_flags(kills=2, in_flight=8, election_timeout=0.5)
    result = run_bench("failover.py", flags)
    assert result["kills"] == 2 and result["in_flight"] == 8
    assert result["acknowledged"] > 0 and result["missing"] == 0
    assert result["duplicates_sent_once"] == 0 and result["stored_never_sent"] == 0
    assert result["duplicates_with_another_id"] == 0
    # Puts were in flight when the leader died: the kills were not between puts.
    assert max(result["in_flight_at_kills"]) >= 1
    assert result["max_s"] > 0 and len(result["load1"]) == 2


def test_puts_given_up_across_a_kill_are_not_counted_as_acknowledged() -> None:
    """A client that gives up after 0.3 s (less than an election): puts in flight at the kill
    end in errors, may or may not be stored, and do not fail the run."""
    flags = cli_flags(kills=1, in_flight=4, retry_for=0.3)
    result = run_bench("failover.py", flags)
    assert result["missing"] == 0 and result["retry_for_s"] == 0.3
    assert result["acknowledged"] + result["unacknowledged"] == result["puts"]
    assert 0 <= result["stored_unacknowledged"] <= result["unacknowledged"]
