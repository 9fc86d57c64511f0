"""Tests of hanet.spark without a Spark session: planning, Arrow batches, CLI edges.

The reader of a partition (``hanet.spark._arrow``) and the planner (``hanet.spark._layout``)
run here directly on the RocketMQ fixture and on files written with the store's codec; the
Spark side is in test_spark_pipeline.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hanet.store import (
    CommitLogReader,
    CommitLogStore,
    Message,
    MessageRecord,
    StoreConfig,
    encode_record,
)
from hanet.store.lowlevel import (
    decode_properties,
    encode_blank,
    encode_properties,
    file_name,
    native_columns,
    record_columns_py,
    scan_index_py,
)

pa = pytest.importorskip("pyarrow")

from hanet.spark import (  # noqa: E402  (after the importorskip)
    PropertyColumns,
    RecordDifference,
    commit_log_batches,
    commit_log_schema,
    compare_records,
    consume_queue_batches,
    find_record_start,
    find_stores,
    plan_commit_log,
    plan_consume_queues,
    properties_map_column,
    record_spans,
)

FIXTURE = Path(__file__).parent / "fixtures" / "rocketmq-store-8k"  # a real RocketMQ broker's
FILE = 4096


@pytest.fixture(autouse=True, params=["native", "python"])
def implementation(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test once with the native scanner and columns (when built) and once with the
    pure-Python references (what ``HANET_NO_EXTENSIONS=1`` selects)."""
    if request.param == "python":
        monkeypatch.setattr("hanet.spark._arrow.record_columns", record_columns_py)
        monkeypatch.setattr("hanet.spark._arrow.scan_index", scan_index_py)
        monkeypatch.setattr("hanet.store._index.scan_index", scan_index_py)
    elif native_columns is None:  # pragma: no cover
        pytest.skip("hanet.store._speedups is not built")
    return str(request.param)


def rows_of(store: str | Path, **kwargs: Any) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for location in find_stores(str(store)):
        for part in plan_commit_log(location, **kwargs):
            for batch in commit_log_batches(part):
                assert batch.schema.equals(commit_log_schema())
                rows.extend(batch.to_pylist())
    return rows


SIZE = 192  # of a record of topic T and a 100-byte body


def record(offset: int, body: bytes = b"x" * 100, **kwargs: Any) -> bytes:
    return encode_record(
        MessageRecord.create(topic="T", body=body, physical_offset=offset, **kwargs)
    )


def write_file(directory: Path, start: int, *chunks: bytes, size: int = FILE) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    data = b"".join(chunks)
    path = directory / file_name(start)
    path.write_bytes(data + bytes(size - len(data)))
    return path


def test_fixture_batches_match_the_store_reader() -> None:
    rows = rows_of(FIXTURE)
    expected = list(CommitLogReader(FIXTURE / "commitlog").records())
    assert len(rows) == len(expected) == 47
    for row, (offset, rec) in zip(rows, expected, strict=True):
        assert row["status"] == "ok"
        assert row["error"] is None
        assert row["crc_ok"] is True
        assert row["store"] == str(FIXTURE)
        assert row["file"] == file_name(0)
        assert row["physical_offset"] == offset == 172 * rec.queue_offset
        assert (row["size"], row["magic"], row["body_crc"]) == (rec.size, rec.magic, rec.body_crc)
        assert (row["topic"], row["queue_id"], row["queue_offset"]) == ("abc", 0, rec.queue_offset)
        assert (row["flag"], row["sys_flag"]) == (rec.flag, rec.sys_flag)
        assert row["born_timestamp"] == rec.born_timestamp
        assert row["store_timestamp"] == rec.store_timestamp
        assert row["born_host"] == rec.born_address == "127.0.0.1:0"
        assert row["store_host"] == rec.store_address == "192.168.71.1:8123"
        assert row["reconsume_times"] == rec.reconsume_times
        assert dict(row["properties"]) == rec.properties
        assert row["tags"] == rec.tags
        assert row["keys"] == rec.properties.get("KEYS")
        assert row["msg_id"] == rec.msg_id


def test_mixed_hosts_v2_topics_and_odd_properties_match_the_codec(tmp_path: Path) -> None:
    v6 = bytes(range(16))
    made = [
        MessageRecord.create(
            topic="T" * 200, body=b"a", store_host=v6, store_port=9, properties={"TAGS": "x"}
        ),
        MessageRecord.create(topic="ü", body=b"", born_host=v6, properties={"KEYS": "k"}),
        MessageRecord.create(topic="T", body=b"b" * 70, properties=b"TAGS\x01\xff\x02"),
        MessageRecord.create(topic="T", body=b"c", properties=b"TAGS\x01a\x02TAGS\x01b"),
    ]
    data = b""
    for rec in made:
        data += encode_record(rec._replace(physical_offset=len(data)))
    write_file(tmp_path / "commitlog", 0, data)
    rows = rows_of(tmp_path)
    assert [r["status"] for r in rows] == ["ok"] * 4
    for row, (offset, rec) in zip(
        rows, CommitLogReader(tmp_path / "commitlog").records(), strict=True
    ):
        assert row["physical_offset"] == offset
        assert (row["topic"], row["magic"], row["sys_flag"]) == (rec.topic, rec.magic, rec.sys_flag)
        assert (row["born_host"], row["store_host"]) == (rec.born_address, rec.store_address)
        assert row["msg_id"] == rec.msg_id
        assert dict(row["properties"]) == rec.properties
        assert row["tags"] == rec.properties.get("TAGS")
        assert row["keys"] == rec.properties.get("KEYS")
    only = [
        b
        for part in plan_commit_log(find_stores(str(tmp_path))[0])
        for b in commit_log_batches(part, columns=["tags", "keys", "body"])
    ]
    assert pa.Table.from_batches(only).to_pydict() == {
        "tags": ["x", None, "\ufffd", "b"],
        "keys": [None, "k", None, None],
        "body": [b"a", b"", b"b" * 70, b"c"],
    }


def test_schema_is_what_spark_expects() -> None:
    pytest.importorskip("pyspark")
    from pyspark.sql.pandas.types import to_arrow_schema

    from hanet.spark import commit_log_struct, consume_queue_schema, consume_queue_struct

    for body in (False, True):
        spark_side = to_arrow_schema(commit_log_struct(body), timezone="UTC")
        assert spark_side.equals(commit_log_schema(body))
    assert to_arrow_schema(consume_queue_struct(), timezone="UTC").equals(consume_queue_schema())


def test_body_only_with_include_body() -> None:
    (part,) = plan_commit_log(find_stores(str(FIXTURE))[0])
    (batch,) = commit_log_batches(part, include_body=True)
    assert batch.schema.names[-1] == "body"
    bodies = [rec.body for _, rec in CommitLogReader(FIXTURE / "commitlog").records()]
    assert batch.column("body").to_pylist() == bodies
    assert "body" not in next(iter(commit_log_batches(part))).schema.names


def test_columns_option_computes_only_those(tmp_path: Path) -> None:
    (part,) = plan_commit_log(find_stores(str(FIXTURE))[0])
    full = next(iter(commit_log_batches(part))).to_pylist()
    wanted = ["msg_id", "tags", "physical_offset", "store_host"]
    (batch,) = commit_log_batches(part, columns=wanted)
    assert batch.schema.names == wanted
    assert batch.to_pylist() == [{k: row[k] for k in wanted} for row in full]
    (batch,) = commit_log_batches(part, columns=["size"], include_body=True)
    assert batch.schema.names == ["size", "body"]
    for bad in (["nope"], ["size", "size"], []):
        with pytest.raises(ValueError, match="bad commit log columns"):
            commit_log_schema(columns=bad or ["store", "no such"])
    records = [record(0), b"garbage" + bytes(100)]
    write_file(tmp_path / "commitlog", 0, *records)
    (part,) = plan_commit_log(find_stores(str(tmp_path))[0])
    rows = [r for b in commit_log_batches(part, columns=["status", "size"]) for r in b.to_pylist()]
    assert rows == [{"status": "ok", "size": SIZE}, {"status": "corrupt", "size": None}]


def test_paths_commitlog_dir_and_glob(tmp_path: Path) -> None:
    (bare,) = find_stores(str(FIXTURE / "commitlog"))
    assert (bare.name, bare.root) == (str(FIXTURE / "commitlog"), None)  # no consumequeue/
    for name in ("a", "b"):
        write_file(tmp_path / name / "commitlog", 0, record(0))
    stores = find_stores(str(tmp_path / "*"))
    assert [s.name for s in stores] == [str(tmp_path / "a"), str(tmp_path / "b")]
    assert {r["store"] for r in rows_of(tmp_path / "*")} == {str(tmp_path / n) for n in "ab"}
    from hanet.store import StoreLayoutError

    with pytest.raises(StoreLayoutError, match="no store matches"):
        find_stores(str(tmp_path / "zz*"))


def test_flipped_header_byte_ends_the_file_with_a_corrupt_row(tmp_path: Path) -> None:
    records = [record(i * SIZE) for i in range(5)]
    assert all(len(r) == SIZE for r in records)
    bad = bytearray(records[3])
    bad[5] ^= 0xFF  # the magic code
    write_file(tmp_path / "commitlog", 0, *records[:3], bytes(bad), records[4])
    rows = rows_of(tmp_path)
    assert [r["status"] for r in rows] == ["ok"] * 3 + ["corrupt"]
    assert rows[-1]["physical_offset"] == 3 * SIZE
    assert "magic" in rows[-1]["error"]
    assert rows[-1]["topic"] is None


def test_flipped_body_byte_is_a_crc_failure_and_the_scan_goes_on(tmp_path: Path) -> None:
    records = [record(i * SIZE) for i in range(5)]
    bad = bytearray(records[1])
    bad[100] ^= 0x01  # inside the body
    write_file(tmp_path / "commitlog", 0, records[0], bytes(bad), *records[2:])
    rows = rows_of(tmp_path)
    assert [r["status"] for r in rows] == ["ok"] * 5
    assert [r["crc_ok"] for r in rows] == [True, False, True, True, True]
    assert rows[1]["physical_offset"] == SIZE


def test_several_crc_failures_each_give_one_row_and_a_bad_header_still_ends(
    tmp_path: Path,
) -> None:
    records = [bytearray(record(i * SIZE)) for i in range(8)]
    for k in (1, 2, 5, 7):
        records[k][100] ^= 0x01  # inside the body: each checked on its own, the scan goes on
    write_file(tmp_path / "crc" / "commitlog", 0, *map(bytes, records))
    rows = rows_of(tmp_path / "crc")
    assert [r["status"] for r in rows] == ["ok"] * 8
    assert [r["crc_ok"] for r in rows] == [k not in (1, 2, 5, 7) for k in range(8)]
    assert [r["physical_offset"] for r in rows] == [k * SIZE for k in range(8)]
    records[6][5] ^= 0xFF  # a bad magic code after the CRC failures: one corrupt row
    write_file(tmp_path / "magic" / "commitlog", 0, *map(bytes, records))
    rows = rows_of(tmp_path / "magic")
    assert [r["status"] for r in rows] == ["ok"] * 6 + ["corrupt"]
    assert [r["crc_ok"] for r in rows[:6]] == [True, False, False, True, True, False]


def test_torn_tail_and_misplaced_blank(tmp_path: Path) -> None:
    records = [record(i * SIZE) for i in range(3)]
    write_file(tmp_path / "torn" / "commitlog", 0, *records[:2], records[2][:120])
    rows = rows_of(tmp_path / "torn")
    assert [r["status"] for r in rows] == ["ok", "ok", "corrupt"]
    assert rows[-1]["physical_offset"] == 2 * SIZE
    write_file(tmp_path / "blank" / "commitlog", 0, records[0], encode_blank(100))
    rows = rows_of(tmp_path / "blank")
    assert [r["status"] for r in rows] == ["ok", "corrupt"]
    assert "does not end the file" in rows[-1]["error"]


def test_blank_record_ends_a_file_and_unwritten_ends_the_data(tmp_path: Path) -> None:
    first = record(0)
    write_file(tmp_path / "commitlog", 0, first, encode_blank(FILE - len(first)))
    write_file(tmp_path / "commitlog", FILE, record(FILE))
    rows = rows_of(tmp_path)
    assert [(r["status"], r["physical_offset"]) for r in rows] == [("ok", 0), ("ok", FILE)]
    # the first file unwritten after its record, but a file follows: data is missing
    write_file(tmp_path / "commitlog", 0, first)
    rows = rows_of(tmp_path)
    assert [r["status"] for r in rows] == ["ok", "corrupt", "ok"]
    assert "more files follow" in rows[1]["error"]


def test_large_file_splits_at_record_boundaries(tmp_path: Path) -> None:
    config = StoreConfig(mapped_file_size=64 * 1024, consume_queue_file_size=2000)
    with CommitLogStore.open(tmp_path, config) as store:
        for i in range(300):
            body = bytes([i % 256]) * (50 + i * 7 % 400)
            assert store.put(Message(f"T{i % 3}", body, queue_id=i % 2)).ok
    whole = rows_of(tmp_path)
    location = find_stores(str(tmp_path))[0]
    ranges = plan_commit_log(location, 10_000)
    assert len(ranges) > len(plan_commit_log(location))
    for r in ranges:
        starts = {row["physical_offset"] - r.file_start for row in whole}
        assert r.start in starts or r.start == 0
    split = rows_of(tmp_path, max_range_bytes=10_000)
    assert split == whole
    assert len(whole) == 300


def test_find_record_start_skips_lookalikes() -> None:
    inner = record(5000)  # a record whose PHYSICALOFFSET is not where it sits
    outer = record(0, body=inner)
    data = outer + record(len(outer)) + bytes(100)
    assert find_record_start(data, 1, base_offset=0) == len(outer)
    assert find_record_start(data, len(outer) + 1, base_offset=0) is None
    assert find_record_start(bytes(10_000), 0, base_offset=0) is None


def test_consume_queue_batches(tmp_path: Path) -> None:
    with CommitLogStore.open(tmp_path, StoreConfig(mapped_file_size=FILE)) as store:
        for i in range(7):
            store.put(Message("T", b"x" * i, queue_id=i % 2, properties={"TAGS": "TagA"}))
    parts = plan_consume_queues(find_stores(str(tmp_path))[0])
    assert [(p.topic, p.queue_id) for p in parts] == [("T", 0), ("T", 1)]
    rows = [row for p in parts for batch in consume_queue_batches(p) for row in batch.to_pylist()]
    assert [(r["queue_id"], r["queue_offset"]) for r in rows] == [
        *[(0, offset) for offset in range(4)],
        *[(1, offset) for offset in range(3)],
    ]
    assert {r["tag_hash"] for r in rows} == {2598919}
    assert plan_consume_queues(find_stores(str(FIXTURE))[0]) == []


def test_consume_queue_blank_entries_are_skipped(tmp_path: Path) -> None:
    import struct

    queue = tmp_path / "consumequeue" / "T" / "0"
    entry = struct.Struct(">qiq")
    data = entry.pack(0, 0x7FFFFFFF, 0) * 2 + entry.pack(300, 120, 5) + bytes(200)
    write_file(queue, 0, data, size=len(data))
    write_file(tmp_path / "commitlog", 0, record(0))
    (part,) = plan_consume_queues(find_stores(str(tmp_path))[0])
    (batch,) = consume_queue_batches(part)
    assert batch.to_pylist() == [
        {
            "store": str(tmp_path),
            "topic": "T",
            "queue_id": 0,
            "queue_offset": 2,
            "physical_offset": 300,
            "size": 120,
            "tag_hash": 5,
        }
    ]


_text = st.text(st.characters(exclude_characters="\x01\x02", exclude_categories=["Cs"]))


@given(st.dictionaries(_text.filter(bool), _text, max_size=5))
def test_properties_column_matches_the_codec(props: dict[str, str]) -> None:
    raw = encode_properties(props)
    column = properties_map_column([raw, b"", b"junk\x02A\x01b"])
    assert [dict(v) for v in column.to_pylist()] == [
        decode_properties(raw),
        {},
        {"A": "b"},
    ]


@given(st.lists(st.dictionaries(st.sampled_from(["TAGS", "KEYS", "XTAGS", "A"]), _text)))
def test_tags_and_keys_without_the_map_match_the_codec(batch: list[dict[str, str]]) -> None:
    raw = [encode_properties(p) for p in batch]
    for want_map in (False, True):
        properties = PropertyColumns(raw, want_map)
        expected = [decode_properties(r) for r in raw]
        assert properties.column("tags").to_pylist() == [p.get("TAGS") for p in expected]
        assert properties.column("keys").to_pylist() == [p.get("KEYS") for p in expected]


def test_properties_with_invalid_utf8_fall_back_to_the_codec() -> None:
    raw = [b"TAGS\x01\xff\xfe\x02", b"KEYS\x01k\x02"]
    assert [dict(v) for v in properties_map_column(raw).to_pylist()] == [
        decode_properties(r) for r in raw
    ]
    assert PropertyColumns(raw, False).column("tags").to_pylist() == ["\ufffd\ufffd", None]


def test_record_spans_follow_the_protocol_table() -> None:
    rec = MessageRecord.create(topic="TopicTest", body=b"Hello", properties={"TAGS": "a"})
    spans = {name: (start, end) for name, start, end in record_spans(rec)}
    assert spans["body_crc"] == (8, 12)
    assert spans["queue_offset"] == (20, 28)
    assert spans["store_timestamp"] == (56, 64)
    assert spans["body_length"] == (84, 88)
    assert spans["body"] == (88, 93)
    assert spans["topic"] == (94, 103)
    assert spans["properties"][1] == rec.size == len(encode_record(rec))
    v6 = rec._replace(born_host=bytes(16), sys_flag=0x10, size=rec.size + 12)
    assert {n: (a, b) for n, a, b in record_spans(v6)}["store_timestamp"] == (68, 76)


def made(body: bytes = b"x" * 20, keys: str = "k1", **fields: int) -> MessageRecord:
    return MessageRecord.create(
        topic="T",
        body=body,
        queue_offset=fields.get("queue_offset", 5),
        physical_offset=4096,
        store_timestamp=fields.get("store_timestamp", 1000),
        properties={"KEYS": keys},
    )


def test_compare_records_names_the_first_differing_field() -> None:
    a = made()
    raw = encode_record(a)
    assert compare_records(raw, raw, 4096) is None
    cases = {
        "store_timestamp": made(store_timestamp=1001),
        "queue_offset": made(queue_offset=6),
        "properties": made(keys="k2"),
    }
    for field, b in cases.items():
        found = compare_records(raw, encode_record(b), 4096)
        assert found is not None
        assert (found.field, found.fields) == (field, (field,))
        start = {n: s for n, s, _ in record_spans(a)}[field]
        assert 4096 + start <= found.offset < 4096 + start + 8
    found = compare_records(raw, encode_record(made(body=b"y" * 20)), 4096)
    assert found is not None
    assert (found.field, found.fields) == ("body_crc", ("body_crc", "body"))
    assert compare_records(raw, encode_record(made(body=b"x" * 21)), 4096) == RecordDifference(
        offset=4096 + 3, field="size", fields=("size", "body_crc", "body")
    )
    garbage = compare_records(raw, raw[:30] + bytes(b ^ 0xFF for b in raw[30:]), 4096)
    assert garbage is not None
    assert (garbage.offset, garbage.field, garbage.fields) == (4096 + 30, "physical_offset", ())


def test_importing_hanet_spark_does_not_import_pyspark() -> None:
    code = (
        "import sys, hanet.spark, hanet.cli._spark, hanet.cli\n"
        "hanet.cli.build_parser()\n"
        "assert 'pyspark' not in sys.modules, 'pyspark imported'\n"
        "assert 'pyarrow' not in sys.modules, 'pyarrow imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_cli_without_pyspark_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from hanet.cli import main

    for name in list(sys.modules):
        if name.startswith(("pyspark", "hanet.cli._spark_jobs")):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pyspark", None)
    assert main(["audit", str(FIXTURE)]) == 2
    err = capsys.readouterr().err
    assert "pip install 'hanet[spark]'" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("verb", ["audit", "stats"])
def test_an_unusable_out_directory_fails_before_spark(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    verb: str,
) -> None:
    from hanet.cli import main

    for name in list(sys.modules):
        if name.startswith(("pyspark", "hanet.cli._spark_jobs")):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pyspark", None)  # a Spark job would say "install pyspark"
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for out, reason in ((blocker / "out", "Not a directory"), (blocker, "File exists")):
        assert main([verb, str(FIXTURE), "--out", str(out)]) == 2
        assert capsys.readouterr().err == f"hanet: --out {out}: {reason}\n"
    # a directory that does not exist yet is created (and the missing pyspark comes next)
    assert main([verb, str(FIXTURE), "--out", str(tmp_path / "new" / "out")]) == 2
    assert "pip install 'hanet[spark]'" in capsys.readouterr().err
    assert (tmp_path / "new" / "out").is_dir()


def test_cli_bad_store_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hanet.cli import main

    assert main(["stats", "/nonexistent/store"]) == 2
    err = capsys.readouterr().err
    assert err == "hanet: /nonexistent/store: no such directory\n"
    write_file(tmp_path / "a" / "commitlog", 0, record(0))
    write_file(tmp_path / "a" / "commitlog", FILE, record(FILE), size=FILE + 1)
    write_file(tmp_path / "b" / "commitlog", 0, record(0))
    assert main(["audit", str(tmp_path / "a")]) == 2
    assert "files of different sizes" in capsys.readouterr().err
    assert main(["diff", str(tmp_path / "*"), str(tmp_path / "b")]) == 2
    assert "one store with one store, not 2" in capsys.readouterr().err


def test_java_missing_is_explained(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("pyspark")
    from pyspark.sql import SparkSession

    from hanet.cli import main
    from hanet.spark import JAVA_HINT, SparkUnavailableError, java_problem, spark_session

    assert java_problem({"PATH": str(tmp_path)}) == (
        f"no `java` on PATH and JAVA_HOME is not set. {JAVA_HINT}"
    )
    assert "has no bin/java" in (java_problem({"JAVA_HOME": str(tmp_path)}) or "")
    if SparkSession.getActiveSession() is not None:
        pytest.skip("a Spark session already runs in this process")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(SparkUnavailableError, match="openjdk-17"):
        spark_session()
    assert main(["diff", str(FIXTURE), str(FIXTURE)]) == 2
    err = capsys.readouterr().err
    assert "needs a Java runtime" in err
    assert "Traceback" not in err
