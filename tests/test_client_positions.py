"""How a consumer moves its place in a queue, decided without I/O: a pull's answer moves the
next pull forward (never back past what a slave that is behind says), the caller's progress
never moves back, and a commit is due until the master took it."""

from __future__ import annotations

from hanet.client import PullResult, PullStatus, QueuePosition

KEY = ("broker-a", 0)
MASTER, SLAVE = 0, 1


def answer(status: PullStatus, next_offset: int, suggest: int = MASTER) -> PullResult:
    return PullResult(status, next_offset, 0, next_offset, (), suggest)


def test_found_moves_to_the_next_offset_and_takes_the_suggestion() -> None:
    position = QueuePosition()
    position.begin(10)
    position.follow(KEY, MASTER, 10, answer(PullStatus.FOUND, 42, suggest=SLAVE))
    assert position.pull_offset == 42 and position.suggested_broker_id == SLAVE
    assert position.consumed == 10  # the caller has not consumed them yet


def test_an_offset_before_the_start_moves_forward_never_back() -> None:
    position = QueuePosition()
    position.begin(100)
    position.follow(KEY, SLAVE, 100, answer(PullStatus.OFFSET_TOO_SMALL, 150))
    assert position.pull_offset == 150
    position.follow(KEY, SLAVE, 150, answer(PullStatus.NO_MATCHED_MESSAGE, 120))
    assert position.pull_offset == 150


def test_past_the_end_is_followed_from_the_master_only() -> None:
    position = QueuePosition()
    position.begin(500)
    position.follow(KEY, SLAVE, 500, answer(PullStatus.OFFSET_OVERFLOW_BADLY, 300))
    assert position.pull_offset == 500  # a slave behind: wait for it to catch up
    position.follow(KEY, MASTER, 500, answer(PullStatus.OFFSET_OVERFLOW_BADLY, 300))
    assert position.pull_offset == 300
    position.follow(KEY, MASTER, 300, answer(PullStatus.OFFSET_OVERFLOW_ONE, 300))
    assert position.pull_offset == 300


def test_consumed_never_moves_back() -> None:
    position = QueuePosition()
    position.consume(7)
    position.consume(5)
    assert position.consumed == 7


def test_a_commit_is_due_until_the_master_takes_it() -> None:
    position = QueuePosition()
    assert position.commit_due() is None  # not started: nothing to save
    position.begin(3)
    assert position.commit_due() == 3  # the start itself is committed
    position.committed_at(3, SLAVE)
    assert position.commit_due() == 3  # again, to the master once it answers
    position.committed_at(3, MASTER)
    assert position.commit_due() is None
    position.consume(4)
    assert position.commit_due() == 4
