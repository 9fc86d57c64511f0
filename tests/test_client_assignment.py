"""Which queues a consumer holds among its group's members, decided without I/O: when a
rebalance is due, which member list it uses, what it releases and takes, and that members
deciding from the same list share every queue exactly once."""

from __future__ import annotations

import pytest

from hanet.client import Assignment, RebalanceOutcome, RouteBroker, TopicRoute, queues_of

ROUTE = TopicRoute(
    "T",
    (
        RouteBroker("broker-b", 2, ((0, "10.0.0.2:10911"),)),
        RouteBroker("broker-a", 2, ((0, "10.0.0.1:10911"),)),
    ),
)
QUEUES = queues_of(ROUTE)
FRESH_MEMBERS = 1.0  # the default fresh_for


def carry_out(assignment: Assignment, members: tuple[str, ...] | None, now: float) -> set[str]:
    """Decide and carry the decision out; the outcome's name."""
    decision = assignment.decide(QUEUES, members, now)
    for key in decision.lost:
        assignment.release(key)
    assignment.take(decision)
    return {decision.outcome.name}


def test_queues_are_listed_by_broker_name_then_queue_id() -> None:
    assert QUEUES == [("broker-a", 0), ("broker-a", 1), ("broker-b", 0), ("broker-b", 1)]
    assert queues_of(None) == []


def test_the_first_rebalance_is_due_at_once_then_every_interval() -> None:
    assignment = Assignment("a", interval=20.0, listed_retry=10.0)
    assert assignment.is_due(0.0)
    assert assignment.start(0.0) is None  # no list at hand: ask the brokers
    assert not assignment.is_due(19.9) and assignment.is_due(20.0)


def test_alone_it_takes_every_queue_then_shares_when_a_member_joins() -> None:
    alone = Assignment("a", interval=20.0, listed_retry=10.0)
    decision = alone.decide(QUEUES, ("a",), 0.0)
    assert decision.outcome is RebalanceOutcome.CHANGED
    assert decision.gained == tuple(QUEUES) and decision.lost == ()
    alone.take(decision)
    assert alone.decide(QUEUES, ("a",), 1.0).outcome is RebalanceOutcome.UNCHANGED

    joined = alone.decide(QUEUES, ("a", "b"), 2.0)
    assert joined.lost == (("broker-b", 0), ("broker-b", 1))  # sorted: committed in order
    assert joined.gained == ()
    assert joined.held == frozenset(QUEUES[:2])


def test_a_released_queue_drops_what_was_pulled_under_its_old_generation() -> None:
    assignment = Assignment("a", interval=20.0, listed_retry=10.0)
    carry_out(assignment, ("a",), 0.0)
    key = ("broker-b", 1)
    assert assignment.generation(key) == 0
    carry_out(assignment, ("a", "b"), 1.0)
    assert key not in assignment.held
    assert assignment.generation(key) == 1  # a message pulled at generation 0 is dropped
    assert assignment.generation(("broker-a", 0)) == 0  # kept: untouched


@pytest.mark.parametrize("members", [("a",), ("a", "b"), ("a", "b", "c"), tuple("abcde")])
def test_members_deciding_from_one_list_share_every_queue_once(members: tuple[str, ...]) -> None:
    held: list[tuple[str, int]] = []
    for member in members:
        assignment = Assignment(member, interval=20.0, listed_retry=10.0)
        carry_out(assignment, members, 0.0)
        held.extend(assignment.held)
    assert sorted(held) == QUEUES


def test_without_a_member_list_the_queues_held_are_kept() -> None:
    assignment = Assignment("a", interval=20.0, listed_retry=10.0)
    carry_out(assignment, ("a",), 0.0)
    decision = assignment.decide(QUEUES, None, 1.0)
    assert decision.outcome is RebalanceOutcome.NO_MEMBERS
    assert decision.held == frozenset(QUEUES) and assignment.members == ("a",)


def test_a_list_not_naming_this_member_keeps_its_queues_and_asks_again_soon() -> None:
    assignment = Assignment("a", interval=20.0, listed_retry=10.0)
    carry_out(assignment, ("a",), 0.0)
    assignment.start(5.0)
    decision = assignment.decide(QUEUES, ("b", "c"), 5.0)
    assert decision.outcome is RebalanceOutcome.NOT_LISTED
    assert decision.held == frozenset(QUEUES)
    assert assignment.members == ("b", "c")
    assert assignment.is_due(6.0) and not assignment.is_due(5.9)  # min(1, listed_retry)


def test_a_changed_list_from_the_heartbeat_is_used_at_once_while_fresh() -> None:
    assignment = Assignment("a", interval=20.0, listed_retry=10.0)
    carry_out(assignment, ("a",), 0.0)
    assignment.start(0.0)
    assert not assignment.members_seen(("a",), 3.0)  # no change: nothing due
    assert not assignment.is_due(3.0)
    assert assignment.members_seen(("a", "b"), 3.0)
    assert assignment.is_due(3.0)
    assert assignment.start(3.0 + FRESH_MEMBERS) == ("a", "b")
    assert assignment.start(3.0 + FRESH_MEMBERS) is None  # used once


def test_a_stale_list_from_the_heartbeat_is_asked_again() -> None:
    assignment = Assignment("a", interval=20.0, listed_retry=10.0)
    assignment.members_seen(("a", "b"), 3.0)
    assert assignment.start(3.0 + FRESH_MEMBERS + 0.1) is None


def test_a_broker_notification_asks_for_a_new_list_at_once() -> None:
    assignment = Assignment("a", interval=20.0, listed_retry=10.0)
    assignment.start(0.0)
    assignment.members_seen(("a", "b"), 2.0)
    assignment.request(2.5)  # NOTIFY_CONSUMER_IDS_CHANGED: the list above may be old
    assert assignment.is_due(2.5)
    assert assignment.start(2.5) is None


def test_a_route_with_other_queues_makes_a_rebalance_due() -> None:
    assignment = Assignment("a", interval=20.0, listed_retry=10.0)
    assignment.start(0.0)
    assignment.route_changed(ROUTE, ROUTE, 1.0)
    assert not assignment.is_due(1.0)
    grown = TopicRoute("T", (*ROUTE.brokers, RouteBroker("broker-c", 4, ((0, "h:1"),))))
    assignment.route_changed(ROUTE, grown, 1.0)
    assert assignment.is_due(1.0)
    assignment.start(1.0)
    assignment.route_changed(None, ROUTE, 2.0)  # the first route
    assert assignment.is_due(2.0)
