"""A follower's acknowledgements batched: of the successful APPEND_OKs one batch sends one
member in one term, only the highest goes; anything else is left as it is, in order."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hanet.dledger import AppendRequest, AppendResponse, Envelope, coalesce_acks

acks = st.builds(
    AppendResponse,
    term=st.integers(1, 2),
    success=st.booleans(),
    prev_index=st.integers(0, 50),
    match_index=st.integers(0, 50),
)
appends = st.builds(
    AppendRequest,
    term=st.integers(1, 2),
    leader=st.just("n0"),
    prev_index=st.integers(0, 9),
    prev_term=st.just(1),
    entries=st.just(()),
    commit_index=st.just(0),
)
envelopes = st.builds(
    Envelope, st.just("n1"), st.sampled_from(["n0", "n2"]), st.one_of(acks, appends)
)


@given(st.lists(envelopes, max_size=12))
def test_only_the_highest_of_a_run_of_successes_goes(messages: list[Envelope]) -> None:
    out = coalesce_acks(messages)
    # a subsequence of the batch, in order (matched by identity: equal messages may repeat)
    rest = iter(messages)
    assert all(any(e is m for m in rest) for e in out)
    for target in ("n0", "n2"):
        mine = [e.message for e in messages if e.target == target]
        sent = [e.message for e in out if e.target == target]
        batched = len(mine) > 1 and all(
            isinstance(m, AppendResponse) and m.success and m.term == mine[0].term for m in mine
        )
        if batched:
            assert len(sent) == 1
            assert sent[0].match_index == max(m.match_index for m in mine)  # type: ignore[union-attr]
        else:
            assert sent == mine


def test_a_run_of_acknowledgements_becomes_its_last() -> None:
    oks = [Envelope("n1", "n0", AppendResponse(3, True, i, match_index=i + 4)) for i in range(4)]
    assert coalesce_acks(oks) == oks[-1:]
    refused = Envelope("n1", "n0", AppendResponse(3, False, 9, conflict_index=2))
    assert coalesce_acks([*oks, refused]) == [*oks, refused]
