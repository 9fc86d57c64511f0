"""What an HA master may push, judged without a connection (:class:`hanet.ha.PushValidator`):
whole valid records and a file's blank tail go, a damaged record never does, and a slave's
first request may start inside a valid record but not inside a damaged one."""

from __future__ import annotations

import pytest
from ha_support import FILE, commit_log_bytes, put
from test_ha_master_integrity import flip_body_byte

from hanet.ha import PushValidator
from hanet.store import CommitLogStore, CorruptRecordError, Message


def records(store: CommitLogStore, n: int) -> list[int]:
    """The offsets of queue T/0's first ``n`` records."""
    offsets = []
    for i in range(n):
        entry = store.consume_queue_entry("T", 0, i)
        assert entry is not None
        offsets.append(entry[0])
    return offsets


def test_whole_valid_records_go_up_to_a_batch(master_store: CommitLogStore) -> None:
    put(master_store, 10)
    starts = records(master_store, 10)
    push = PushValidator(master_store, "s")
    body = push.validate(0, 1000)
    assert len(body) <= 1000 and len(body) in starts  # ends at a record boundary
    assert bytes(body) == commit_log_bytes(master_store, 0, len(body))
    assert push.valid_end == len(body)
    assert not push.validate(master_store.max_offset, 1000)  # nothing written yet


def test_a_record_larger_than_the_batch_goes_whole(master_store: CommitLogStore) -> None:
    put(master_store, 1, size=3000)
    push = PushValidator(master_store, "s")
    assert len(push.validate(0, 1000)) == master_store.max_offset


def test_a_damaged_record_is_never_handed_out(master_store: CommitLogStore) -> None:
    put(master_store, 10)
    starts = records(master_store, 10)
    flip_body_byte(master_store, starts[5])
    push = PushValidator(master_store, "s")
    body = push.validate(0, FILE)
    assert len(body) == starts[5]  # the valid records before it
    with pytest.raises(CorruptRecordError, match="body CRC mismatch") as raised:
        push.validate(starts[5], FILE)
    assert raised.value.offset == starts[5]


def test_a_files_blank_tail_goes_as_it_is(master_store: CommitLogStore) -> None:
    put(master_store, 1, size=FILE - 500)
    written = master_store.max_offset
    master_store.put(Message(topic="T", body=b"x" * 1000))  # does not fit: the next file
    assert master_store.max_offset > FILE
    push = PushValidator(master_store, "s")
    assert len(push.validate(0, FILE)) == written
    tail = push.validate(written, FILE)
    assert written + len(tail) == FILE and push.valid_end == FILE


def test_where_a_first_request_may_start(master_store: CommitLogStore) -> None:
    put(master_store, 20)
    starts = records(master_store, 20)
    flip_body_byte(master_store, starts[12])
    push = PushValidator(master_store, "s")
    assert push.check_boundary(master_store.max_offset, 1000) is None  # the data end
    assert push.check_boundary(starts[3], 1000) is None  # a record start
    inside = PushValidator(master_store, "s")
    assert inside.check_boundary(starts[3] + 9, 1000) is None  # inside a valid record
    assert inside.valid_end == starts[4]  # that record is checked: it goes from there
    damaged = PushValidator(master_store, "s").check_boundary(starts[12] + 9, 1000)
    assert damaged is not None
    assert f"the record at {starts[12]} around it is damaged: body CRC mismatch" in damaged
