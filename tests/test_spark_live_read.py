"""HANET_READ_LOG on a store, and the ``commitlog`` rows read through it against the files'.

Deterministic: the broker's processor is called directly on an open store (the remote reader's
client is replaced by one that calls it), and corruption is written into the files of the open
store (its mappings see it, as a running broker's would).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from hanet.broker import MAX_READ_BYTES, read_log
from hanet.protocol import HanetRequestCode, RemotingCommand, RemotingHeaderError, ResponseCode
from hanet.store import CommitLogStore, Message, StoreConfig
from hanet.store.lowlevel import file_name

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

import pyarrow as pa

from hanet.spark import (
    LogChunk,
    LogReadClient,
    LogReadError,
    commit_log_batches,
    find_stores,
    plan_broker,
    plan_commit_log,
    remote_batches,
)

pytestmark = pytest.mark.spark

FILE = 8192
CONFIG = StoreConfig(mapped_file_size=FILE)


def request(**fields: object) -> RemotingCommand:
    return RemotingCommand.request(HanetRequestCode.HANET_READ_LOG, fields)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[CommitLogStore]:
    with CommitLogStore.open(tmp_path / "store", CONFIG) as opened:
        for i in range(120):
            body = bytes([i % 256]) * (40 + i * 37 % 300)
            message = Message(
                ("Orders", "Payments")[i % 2],
                body,
                queue_id=i % 2,
                properties={"TAGS": f"t{i % 3}", "KEYS": f"k{i}"},
                born_timestamp=1_700_000_000_000 + i,
            )
            assert opened.put(message).ok
        yield opened


def records(store: CommitLogStore) -> list[tuple[int, int]]:
    """(offset, size) of every record, walking the store."""
    found = []
    offset = store.min_offset
    while offset < store.max_offset:
        try:
            size = store.read_record(offset).size
        except Exception:
            offset = offset - offset % FILE + FILE  # the file's blank tail
            continue
        found.append((offset, size))
        offset += size
    return found


def test_answers_whole_records_and_the_logs_offsets(store: CommitLogStore) -> None:
    probe = read_log(store, request(maxBytes=0))
    assert probe.code == ResponseCode.SUCCESS and probe.body == b""
    assert probe.fields["minOffset"] == "0"
    assert probe.fields["maxOffset"] == str(store.max_offset)
    assert probe.fields["fileSize"] == str(FILE)
    starts = [o for o, _ in records(store)]
    answer = read_log(store, request(offset=0, maxBytes=1000))
    end = int(answer.fields["nextOffset"])
    assert end in starts and 0 < end <= 1000
    assert bytes(answer.body) == store.read(0, end)
    # the next read goes on there; a first record larger than maxBytes comes whole
    second = read_log(store, request(offset=end, maxBytes=10))
    assert int(second.fields["nextOffset"]) == starts[starts.index(end) + 1]
    # the end of the first file: its blank tail is a stop, the next read is the next file
    last = max(o for o in starts if o < FILE)
    tail = read_log(store, request(offset=last, maxBytes=MAX_READ_BYTES))
    assert tail.fields["stopReason"] == "blank"
    assert tail.fields["nextOffset"] == str(FILE)
    # at the log's end: nothing, and nowhere further
    done = read_log(store, request(offset=store.max_offset, maxBytes=100))
    assert done.body == b"" and done.fields["nextOffset"] == str(store.max_offset)


def test_bad_offsets_are_refused_with_the_reason(store: CommitLogStore) -> None:
    first_size = records(store)[0][1]
    middle = read_log(store, request(offset=first_size // 2, maxBytes=100))
    assert middle.code == ResponseCode.SYSTEM_ERROR
    assert "not at a record boundary" in (middle.remark or "")
    past = read_log(store, request(offset=store.max_offset + 1, maxBytes=100))
    assert past.code == ResponseCode.SYSTEM_ERROR and "past" in (past.remark or "")
    with pytest.raises(RemotingHeaderError, match="maxBytes must be >= 0"):
        read_log(store, request(offset=0, maxBytes=-1))  # the dispatcher answers SYSTEM_ERROR


def test_offsets_below_the_minimum_are_refused(store: CommitLogStore) -> None:
    store.commit_log.min_offset = FILE  # as retention leaves it after deleting the first file
    below = read_log(store, request(offset=0, maxBytes=100))
    assert below.code == ResponseCode.SYSTEM_ERROR
    assert f"below the log's minimum offset {FILE}" in (below.remark or "")


def test_seek_finds_the_next_record(store: CommitLogStore) -> None:
    (first, size), (second, _) = records(store)[:2]
    answer = read_log(store, request(offset=first + size // 2, maxBytes=100, seek="true"))
    assert answer.code == ResponseCode.SUCCESS
    assert answer.fields["offset"] == str(second)


class DirectClient:
    """:class:`~hanet.spark.LogReadClient` calling the processor on a store."""

    def __init__(self, store: CommitLogStore) -> None:
        self.store = store

    def __call__(self, address: str, tls: Any = None) -> DirectClient:
        return self

    def __enter__(self) -> DirectClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        pass

    def read(self, offset: int | None, max_bytes: int, *, seek: bool = False) -> Any:
        fields: dict[str, object] = {"maxBytes": max_bytes, "seek": str(seek).lower()}
        if offset is not None:
            fields["offset"] = offset
        answer = read_log(self.store, request(**fields))
        if answer.code != ResponseCode.SUCCESS:
            raise LogReadError(answer.remark)
        return LogChunk.from_answer("test", answer)


def file_rows(store: CommitLogStore, max_range: int) -> list[dict[str, Any]]:
    (location,) = find_stores(str(store.root))
    batches = [
        b
        for part in plan_commit_log(location, max_range)
        for b in commit_log_batches(part, include_body=True)
    ]
    return rows_of(batches)


def broker_rows(store: CommitLogStore, max_range: int) -> list[dict[str, Any]]:
    client = DirectClient(store)
    batches = [
        b
        for part in plan_broker("test", max_range, connect=client)
        # several answers per file
        for b in remote_batches(part, include_body=True, read_bytes=700, connect=client)
    ]
    return rows_of(batches)


def rows_of(batches: list[pa.RecordBatch]) -> list[dict[str, Any]]:
    rows = pa.Table.from_batches(batches).drop(["store"]).to_pylist()
    return sorted(rows, key=lambda r: (r["physical_offset"], r["status"]))


@pytest.mark.parametrize("max_range", [FILE, 3000, 200])
def test_the_same_rows_as_the_files(store: CommitLogStore, max_range: int) -> None:
    expected = file_rows(store, max_range)
    assert len(expected) == 120
    assert broker_rows(store, max_range) == expected


def test_the_same_crc_and_corrupt_rows_as_the_files(store: CommitLogStore) -> None:
    in_second = [o for o, _ in records(store) if FILE <= o < 2 * FILE]
    bad_body, bad_header = in_second[1], in_second[4]
    path = store.root / "commitlog" / file_name(FILE)
    with path.open("r+b") as f:  # the store's mapping sees it, as a running broker's would
        f.seek(bad_body - FILE + 100)
        byte = f.read(1)[0]
        f.seek(bad_body - FILE + 100)
        f.write(bytes([byte ^ 1]))
        f.seek(bad_header - FILE + 4)
        f.write(b"\xde\xad\xbe\xef")
    expected = file_rows(store, FILE)
    got = broker_rows(store, FILE)
    assert got == expected
    second = [r for r in got if r["file"] == file_name(FILE)]
    assert [r["status"] for r in second] == ["ok"] * 4 + ["corrupt"]
    assert [r["crc_ok"] for r in second[:4]] == [True, False, True, True]
    assert "magic" in second[4]["error"]


def test_the_command_line_refuses_unreachable_brokers_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from hanet.cli import main

    assert main(["audit", "--broker", "127.0.0.1:1"]) == 2
    assert "hanet: broker 127.0.0.1:1: cannot connect" in capsys.readouterr().err
    assert main(["diff", "hanet://127.0.0.1:1", "/nonexistent"]) == 2
    assert "diff reads store files, not brokers" in capsys.readouterr().err
    assert main(["stats"]) == 2
    assert "give a STORE or --broker HOST:PORT" in capsys.readouterr().err


@pytest.mark.parametrize(
    "change", [{"fileSize": 0}, {"minOffset": -1}, {"minOffset": 10, "maxOffset": 5}]
)
def test_an_answer_with_impossible_bounds_is_refused(
    store: CommitLogStore, change: dict[str, int]
) -> None:
    good = read_log(store, request(maxBytes=100))
    answer = request().response(fields={**good.fields, **change}, body=good.body)
    with pytest.raises(LogReadError, match="malformed HANET_READ_LOG answer"):
        LogChunk.from_answer("test", answer)


class TinyFiles(DirectClient):
    """A broker whose answer claims 1-byte files up to offset 2**62."""

    def read(self, offset: int | None, max_bytes: int, *, seek: bool = False) -> Any:
        chunk = super().read(offset, max_bytes, seek=seek)
        return attrs.evolve(chunk, file_size=1, max_offset=1 << 62)


def test_a_broker_claiming_billions_of_files_is_refused_at_once(store: CommitLogStore) -> None:
    with pytest.raises(LogReadError, match=r"files of 1 bytes .* not planned"):
        plan_broker("test", FILE, connect=TinyFiles(store))


class GoingBack(DirectClient):
    """A broker that answers every read with the log's first records."""

    def read(self, offset: int | None, max_bytes: int, *, seek: bool = False) -> Any:
        return super().read(None, max_bytes)


def test_a_broker_that_does_not_move_on_fails_the_task(store: CommitLogStore) -> None:
    (part, *_) = plan_broker("test", FILE, connect=DirectClient(store))
    with pytest.raises(LogReadError, match="did not move on"):
        list(remote_batches(part, read_bytes=700, connect=GoingBack(store)))


@pytest.fixture
def silent_broker() -> Iterator[tuple[str, list[bytes]]]:
    """A loopback listener that accepts one connection and sends what the test puts in
    ``to_send`` (then keeps it open without a word)."""
    to_send: list[bytes] = []
    listener = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()

    def serve() -> None:
        conn, _ = listener.accept()
        with conn, contextlib.suppress(OSError):
            conn.recv(65536)
            for data in to_send:
                conn.sendall(data)
                if done.wait(0.1):
                    return
            done.wait(10)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"127.0.0.1:{listener.getsockname()[1]}", to_send
    done.set()
    thread.join(10)
    listener.close()


def test_a_broker_that_trickles_its_answer_times_out(
    silent_broker: tuple[str, list[bytes]],
) -> None:
    address, to_send = silent_broker
    to_send.extend([b"\x00"] * 20)  # a byte at a time, for longer than the timeout
    with (
        LogReadClient(address, timeout=0.25) as client,
        pytest.raises(LogReadError, match="no answer in"),
    ):
        client.read(None, 0)


def test_an_oversized_frame_is_refused(silent_broker: tuple[str, list[bytes]]) -> None:
    address, to_send = silent_broker
    to_send.append(b"\x7f\xff\xff\xff")
    with LogReadClient(address) as client, pytest.raises(LogReadError, match="a frame of"):
        client.read(None, 0)
