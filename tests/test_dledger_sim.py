"""The deterministic simulation of DLedger groups: hundreds of seeds, every safety check.

Thousands more: ``python bench/dledger_sim.py --seeds 5000`` (a failing seed is printed with
the command that replays it).
"""

from __future__ import annotations

import attrs
import pytest

from hanet.dledger import (
    RaftNode,
)
from hanet.testing import SIM_RAFT_CONFIG, SimConfig, SimResult, simulate


def _failures(results: list[SimResult]) -> list[str]:
    return [
        f"seed {r.seed} ({r.nodes} nodes): settled={r.settled} {list(r.violations)}"
        for r in results
        if not r.ok
    ]


@pytest.mark.parametrize(("nodes", "seeds"), [(3, 250), (5, 100)])
def test_seeds_keep_every_safety_property(nodes: int, seeds: int) -> None:
    results = [simulate(seed, SimConfig(nodes=nodes)) for seed in range(seeds)]
    assert _failures(results) == []
    # the faults did happen, and the group still did work
    assert sum(r.crashes for r in results) > seeds // 2
    assert sum(r.mid_step_crashes for r in results) > seeds // 5
    assert sum(r.partitions for r in results) > seeds // 2
    assert sum(r.dropped for r in results) > seeds
    assert sum(r.leaders for r in results) > seeds * 3 // 2  # re-elections
    assert sum(r.acknowledged for r in results) > 20 * seeds


@pytest.mark.parametrize(
    "changes",
    [{"pre_vote": False}, {"check_quorum": False}, {"max_inflight": 1, "max_batch": 1}],
)
def test_seeds_with_other_settings(changes: dict[str, object]) -> None:
    config = SimConfig(raft=attrs.evolve(SIM_RAFT_CONFIG, **changes))  # type: ignore[arg-type]
    results = [simulate(seed, config) for seed in range(1000, 1060)]
    assert _failures(results) == []


def test_a_seed_replays_the_same_run() -> None:
    config = SimConfig(nodes=5)
    assert simulate(42, config) == simulate(42, config)
    assert simulate(42, config) != simulate(43, config)


def test_without_faults_every_append_is_acknowledged() -> None:
    quiet = SimConfig(loss=0, duplicate=0, crash_rate=0, partition_rate=0)
    result = simulate(7, quiet)
    assert result.ok and result.leaders == 1 and result.max_term == 1
    assert result.statuses.get("wait_quorum_ack_timeout", 0) == 0
    assert result.acknowledged == result.statuses["success"] > 50
    assert result.committed == result.acknowledged + 1  # and the no-op


def test_the_checks_catch_a_broken_vote(monkeypatch: pytest.MonkeyPatch) -> None:
    """A core that votes without the up-to-date log check loses committed entries: the
    simulation must say so for some seed."""
    monkeypatch.setattr(RaftNode, "_log_is_current", lambda self, index, term: True)
    results = [simulate(seed) for seed in range(40)]
    assert any(r.violations for r in results)
