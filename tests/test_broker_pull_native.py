"""A pull gathered natively (``pull_gather``, one call per consume queue file) answers exactly
what the reference loop answers: same status, offsets, member suggested, body bytes and
errors, over queues, offsets, batch sizes, tag filters and byte budgets (hypothesis), with
blank entries, damaged ranges, records being deleted and bytes flipped on disk in the commit
log or the consume queue; and the broker port's answers are byte for byte the same either way.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import pytest
from broker_support import config, running
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hanet.broker import GetMessageStatus, serve_pull, subscription_filter
from hanet.protocol import encode_command, pull_message_request
from hanet.store import CommitLogStore, CorruptRecordError, DamagedRange, Message, StoreConfig
from hanet.store.lowlevel import (
    CQ_BLANK_SIZE,
    NATIVE_PULL,
    native_pull_gather,
)
from hanet.testing import EmbeddedChannel

pytestmark = pytest.mark.skipif(native_pull_gather is None, reason="the extension is not built")

COMMIT_LOG_FILE = 16 * 1024
CONSUME_QUEUE_FILE = 20 * 7  # 7 entries a consume queue file
TAGS = ("a", "b", "c", "é", "")
EXPRESSIONS = ("*", "a", "b || c", "é", "a || é || zz", "", "c||a")


def _fill(store: CommitLogStore, count: int = 70) -> None:
    """Two topics, T over 3 queues and U over 1, bodies of 1 to ~2 KiB, a tag each (none
    for some), interleaved: a queue's records are spread over the commit log files."""
    for i in range(count):
        topic = "U" if i % 5 == 4 else "T"
        tag = TAGS[i % len(TAGS)]
        properties = {"TAGS": tag} if tag else {}
        body = b"%04d" % i + bytes([i % 251]) * ((i * 97) % 2000)
        assert store.put(
            Message(topic, body, queue_id=i % 3 if topic == "T" else 0, properties=properties)
        ).ok


@contextmanager
def _store() -> Iterator[CommitLogStore]:
    config = StoreConfig(
        mapped_file_size=COMMIT_LOG_FILE, consume_queue_file_size=CONSUME_QUEUE_FILE
    )
    with (
        tempfile.TemporaryDirectory(prefix="hanet-test-pull-native-") as tmp,
        CommitLogStore.open(Path(tmp) / "store", config) as opened,
    ):
        _fill(opened)
        yield opened


@pytest.fixture(scope="module")
def healthy() -> Iterator[CommitLogStore]:
    with _store() as opened:
        yield opened


def _outcome(store: CommitLogStore, native: bool, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
    """What a pull answers, or the error it raises."""
    try:
        result = serve_pull(
            store, *args, joined=True, native=native, suggest=lambda behind: behind, **kwargs
        )
    except CorruptRecordError as exc:
        return ("refused", exc.offset, str(exc))
    return (
        result.status,
        result.next_offset,
        result.min_offset,
        result.max_offset,
        result.suggested,
        result.count,
        result.body,
    )


def _agree(store: CommitLogStore, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
    """The native and reference outcomes of a pull, checked equal (and the reference's
    records one by one, joined, the same body)."""
    native = _outcome(store, True, *args, **kwargs)
    reference = _outcome(store, False, *args, **kwargs)
    assert native == reference
    if reference[0] is GetMessageStatus.FOUND:
        one_by_one = serve_pull(store, *args, views=True, **kwargs)
        assert b"".join(one_by_one.records) == reference[-1]
        assert len(one_by_one.records) == reference[-2]
    return native


pulls = st.tuples(
    st.sampled_from([("T", 0), ("T", 1), ("T", 2), ("U", 0), ("T", 3), ("V", 0)]),
    st.integers(-1, 30),
    st.integers(0, 40),
    st.sampled_from(EXPRESSIONS),
    st.sampled_from([1, 700, 3000, 9000, 4 * 1024 * 1024]),
)


def test_the_native_gather_is_used_when_built() -> None:
    assert (not os.environ.get("HANET_NO_EXTENSIONS")) == NATIVE_PULL


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(pull=pulls)
def test_native_and_reference_pulls_agree(healthy: CommitLogStore, pull: Any) -> None:
    (topic, queue_id), offset, count, expression, budget = pull
    tags = subscription_filter(expression)
    _agree(healthy, topic, queue_id, offset, count, tags=tags, max_bytes=budget)


def test_every_offset_and_filter_agrees(healthy: CommitLogStore) -> None:
    found = 0
    for topic, queue_id in (("T", 0), ("T", 1), ("T", 2), ("U", 0)):
        for offset in range(healthy.max_queue_offset(topic, queue_id) + 1):
            for expression in EXPRESSIONS:
                outcome = _agree(
                    healthy, topic, queue_id, offset, 32, tags=subscription_filter(expression)
                )
                found += outcome[0] is GetMessageStatus.FOUND
    assert found > 100


def test_the_byte_budget_stops_a_pull_where_the_reference_does(healthy: CommitLogStore) -> None:
    whole = _agree(healthy, "T", 0, 0, 32)
    for budget in (1, 500, 2500, 6000, 12_000):
        outcome = _agree(healthy, "T", 0, 0, 32, max_bytes=budget)
        assert outcome[0] is GetMessageStatus.FOUND and 1 <= outcome[5] < whole[5]


def _write(path: Path, position: int, data: bytes) -> None:
    with path.open("r+b") as f:  # under the live mapping (MAP_SHARED): the store sees it
        f.seek(position)
        f.write(data)


def _queue_file(store: CommitLogStore, topic: str, queue_id: int, queue_offset: int) -> Path:
    start = queue_offset * 20 - queue_offset * 20 % CONSUME_QUEUE_FILE
    return store.root / "consumequeue" / topic / str(queue_id) / f"{start:020d}"


def _log_file(store: CommitLogStore, physical: int) -> Path:
    return store.root / "commitlog" / f"{physical - physical % COMMIT_LOG_FILE:020d}"


def _all_pulls(store: CommitLogStore) -> None:
    for topic, queue_id in (("T", 0), ("T", 1), ("U", 0)):
        for offset in range(0, store.max_queue_offset(topic, queue_id), 3):
            for expression in ("*", "b || c"):
                for budget in (3000, 4 * 1024 * 1024):
                    _agree(
                        store,
                        topic,
                        queue_id,
                        offset,
                        10,
                        tags=subscription_filter(expression),
                        max_bytes=budget,
                    )


@settings(max_examples=120, deadline=None)
@given(
    where=st.sampled_from(["log", "queue"]),
    entry=st.integers(0, 15),
    position=st.integers(0, 2100),
    xor=st.integers(1, 255),
)
def test_a_byte_flipped_on_disk_is_refused_alike(
    where: str, entry: int, position: int, xor: int
) -> None:
    with _store() as store:
        found = store.consume_queue_entry("T", 0, entry)
        assert found is not None
        physical, size, _ = found
        if where == "log":
            path, at = _log_file(store, physical), physical % COMMIT_LOG_FILE + position % size
        else:
            path, at = _queue_file(store, "T", 0, entry), entry * 20 % CONSUME_QUEUE_FILE
            at += position % 20
        data = path.read_bytes()
        _write(path, at, bytes([data[at] ^ xor]))
        _all_pulls(store)


def test_blank_entries_damaged_ranges_and_deleted_records_agree() -> None:
    with _store() as store:
        # a gap: the entry of T/0 offset 4 made blank (RocketMQ's fillPreBlank entry)
        blank = (0).to_bytes(8, "big") + CQ_BLANK_SIZE.to_bytes(4, "big") + bytes(8)
        _write(_queue_file(store, "T", 0, 4), 4 * 20 % CONSUME_QUEUE_FILE, blank)
        _all_pulls(store)
        # a damaged range holding T/0's record at offset 9, then one between two records
        entry = store.consume_queue_entry("T", 0, 9)
        assert entry is not None
        store.damage.add(DamagedRange(entry[0] + 5, entry[0] + 9, "test"))
        refused = _agree(store, "T", 0, 6, 32)
        assert refused[0] == "refused" and "damaged" in refused[2]
        _all_pulls(store)
        for damaged in store.damage:
            store.damage.remove(damaged)
        store.damage.add(DamagedRange(1, 2, "test"))  # before every record of T/0 but its first
        _all_pulls(store)
        # records being deleted: the commit log's min offset moved past T/0's first records
        for damaged in store.damage:
            store.damage.remove(damaged)
        entry = store.consume_queue_entry("T", 0, 5)
        assert entry is not None
        store.commit_log.min_offset = entry[0]
        skipped = _agree(store, "T", 0, 0, 32)
        assert skipped[0] is GetMessageStatus.FOUND
        _all_pulls(store)


# -- the native call's own checks ------------------------------------------------------------


def _gather(entries: bytes, log: bytes, **changes: Any) -> tuple[int, int, int, int, int, bytes]:
    assert native_pull_gather is not None
    args: dict[str, Any] = {
        "log_base": 0,
        "floor": 0,
        "tags": None,
        "budget": 1 << 22,
        "taken": 0,
        "topic": b"T",
        "queue_id": 0,
        "queue_offset": 0,
        "damaged": None,
    }
    args.update(changes)
    return native_pull_gather(
        memoryview(entries),
        memoryview(log),
        args["log_base"],
        args["floor"],
        args["tags"],
        args["budget"],
        args["taken"],
        args["topic"],
        args["queue_id"],
        args["queue_offset"],
        args["damaged"],
    )


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="whole number of consume queue entries"):
        _gather(bytes(19), b"")
    with pytest.raises(ValueError, match="int64 pairs"):
        _gather(bytes(20), b"", damaged=bytes(15))
    with pytest.raises(ValueError, match=">= 0"):
        _gather(bytes(20), b"", log_base=-1)
    with pytest.raises(TypeError):
        _gather(bytes(20), b"", tags=3)
    with pytest.raises(OverflowError):
        _gather(bytes(20), b"", tags=frozenset({1 << 70}))


@settings(max_examples=300, deadline=None)
@given(
    entries=st.lists(
        st.tuples(st.integers(-(1 << 63), (1 << 63) - 1), st.integers(-(1 << 31), (1 << 31) - 1))
        | st.tuples(st.integers(-64, 4200), st.integers(-5, 4200)),
        max_size=8,
    ),
    log=st.binary(max_size=4096),
    log_base=st.integers(0, 4096),
    budget=st.integers(-10, 5000),
    damaged=st.none() | st.binary(max_size=48).map(lambda b: b[: len(b) // 16 * 16]),
)
def test_garbage_entries_and_logs_are_read_within_their_buffers(
    entries: list[tuple[int, int]], log: bytes, log_base: int, budget: int, damaged: bytes | None
) -> None:
    packed = b"".join(
        p.to_bytes(8, "big", signed=True) + s.to_bytes(4, "big", signed=True) + bytes(8)
        for p, s in entries
    )
    stop, used, count, pulled_end, left, body = _gather(
        packed, log, log_base=log_base, budget=budget, damaged=damaged, tags=frozenset({0})
    )
    assert 0 <= used <= len(entries) and 0 <= count <= used
    assert (stop == 0) == (used == len(entries))
    assert len(body) == budget - left and len(body) <= count * len(log)
    assert (pulled_end == -1) == (count == 0)


# -- the broker port's answers ---------------------------------------------------------------


async def test_the_broker_ports_answers_are_the_same_bytes_natively(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    requests = []
    opaque = 0
    for topic, queue_id in (("T", 0), ("T", 1), ("U", 0), ("T", 7), ("V", 0)):
        for offset in (0, 1, 5, 17, 18, 40):
            for subscription in ("*", "a || b", "zz"):
                opaque += 1
                request = pull_message_request(
                    "g", topic, queue_id, offset, 16, subscription=subscription, opaque=opaque
                )
                requests.append(encode_command(request))
    answers: dict[bool, bytes] = {}
    async with running(config(tmp_path)) as (broker, _):
        _fill(broker.store)
        for native in (True, False):
            monkeypatch.setattr("hanet.broker._pull.NATIVE_PULL", native)
            channel = EmbeddedChannel()
            broker.port.initialize(cast(Any, channel))
            out = bytearray()
            for frame in requests:
                channel.write_inbound(frame)
                while (chunk := channel.read_outbound()) is not None:
                    out += chunk
            answers[native] = bytes(out)
    assert answers[True] == answers[False]
    assert answers[True].count(b'"remark":"FOUND"') >= 15
