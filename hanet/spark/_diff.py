"""The diff job: how a slave's commit log compares with its master's.

Records are matched by physical offset. Two records are the same when their size and a
fingerprint of every decoded field (topic, queue, offsets, flags, timestamps, hosts,
properties, body CRC and whether it holds) are equal: byte-identical except for a body whose
31-bit CRC collides. :func:`diff` returns a :class:`DiffResult`:

- ``records``: one row per record that differs (same offset, other size or fields) or that
  only one side has (``kind`` ``differs``, ``master_only``, ``slave_only``). For a record that
  differs, ``first_diff_offset`` is the physical offset of the first byte that differs,
  ``first_diff_field`` the field it falls in (``body_crc``, ``store_timestamp``, ``properties``,
  ...) and ``differing_fields`` every decoded field that differs (comma-separated): both sides'
  bytes of the record are read again in a Python worker and compared
  (:func:`hanet.spark._fields.compare_records`); null for one-sided records;
- ``ranges``: the one-sided records collapsed into contiguous ranges per side;
- ``summary``: the first physical offset where they differ and a verdict line, e.g.
  ``slave is a byte-identical prefix of the master up to 98304``.

Only the overlap of the two data ranges is compared for divergence: records the slave still
holds below the master's first offset (the master deleted old files) and records the master
holds past the slave's end (the slave is behind) are one-sided ranges, not divergences.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import attrs
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from ._fields import compare_records
from ._frames import commit_log, record_end
from ._layout import find_stores
from ._local import DEFAULT_DRIVER_ROWS

__all__ = ["DiffResult", "DiffSummary", "diff"]

_FINGERPRINT_COLUMNS = (
    "magic",
    "topic",
    "queue_id",
    "queue_offset",
    "flag",
    "sys_flag",
    "born_timestamp",
    "born_host",
    "store_timestamp",
    "store_host",
    "reconsume_times",
    "body_crc",
    "crc_ok",
)


@attrs.frozen
class DiffSummary:
    """What :func:`diff` found, in numbers and one line.

    Attributes:
        first_difference: the first physical offset where the slave differs from the master
            (a record that differs, or one only one side has, inside the compared range), or
            None.
        master_records, slave_records: good records on each side.
        master_start, master_end, slave_start, slave_end: each side's data range (first record
            offset, offset after the last record; 0 and 0 without records).
        differing: records present on both sides that differ.
        master_only, slave_only: records only one side has.
        master_corrupt, slave_corrupt: the first corrupt-row offset of each side, or None.
        verdict: the verdict line.
        first_diff_offset, first_diff_field: when the first difference is a record that
            differs, the physical offset of its first differing byte and the field that byte
            falls in; else None.
    """

    first_difference: int | None
    master_records: int
    slave_records: int
    master_start: int
    master_end: int
    slave_start: int
    slave_end: int
    differing: int
    master_only: int
    slave_only: int
    master_corrupt: int | None
    slave_corrupt: int | None
    verdict: str
    first_diff_offset: int | None = None
    first_diff_field: str | None = None


@attrs.frozen
class DiffResult:
    """The diff's tables (lazy) and its summary (computed)."""

    records: DataFrame
    ranges: DataFrame
    summary: DiffSummary
    _scan: DataFrame

    def unpersist(self) -> None:
        """Drop the cached scans of the two commit logs."""
        self._scan.unpersist()


def _side(spark: SparkSession, store: str, side: str, driver_rows: int) -> DataFrame:
    fingerprint = F.xxhash64(*_FINGERPRINT_COLUMNS, F.to_json("properties"))
    columns = ("file", "physical_offset", "size", "status", "properties", *_FINGERPRINT_COLUMNS)
    return commit_log(spark, store, columns=columns, driver_rows=driver_rows).select(
        F.lit(side).alias("side"),
        "file",
        "physical_offset",
        "size",
        "status",
        "body_crc",
        fingerprint.alias("fingerprint"),
    )


def diff(
    spark: SparkSession, master: str, slave: str, *, driver_rows: int = DEFAULT_DRIVER_ROWS
) -> DiffResult:
    """Compare a slave's store with its master's (two paths); see the module docstring. A
    side of at most ``driver_rows`` rows is read in the driver (:func:`~hanet.spark.commit_log`).
    """
    master_side = _side(spark, master, "master", driver_rows)
    scan = master_side.unionByName(_side(spark, slave, "slave", driver_rows)).cache()
    ok = scan.where(F.col("status") == "ok")
    m = ok.where(F.col("side") == "master").drop("side", "status")
    s = ok.where(F.col("side") == "slave").drop("side", "status")
    joined = m.alias("m").join(s.alias("s"), "physical_offset", "full_outer")
    kind = (
        F.when(F.col("s.size").isNull(), "master_only")
        .when(F.col("m.size").isNull(), "slave_only")
        .when(
            (F.col("m.size") != F.col("s.size"))
            | (F.col("m.fingerprint") != F.col("s.fingerprint")),
            "differs",
        )
    )
    records = (
        joined.select(
            "physical_offset",
            kind.alias("kind"),
            F.coalesce(F.col("m.file"), F.col("s.file")).alias("file"),
            F.col("m.file").alias("master_file"),
            F.col("s.file").alias("slave_file"),
            F.col("m.size").alias("master_size"),
            F.col("s.size").alias("slave_size"),
            F.col("m.body_crc").alias("master_body_crc"),
            F.col("s.body_crc").alias("slave_body_crc"),
        )
        .where(F.col("kind").isNotNull())
        .cache()
    )
    bounds = ok.groupBy("side").agg(
        F.count("*").alias("records"),
        F.min("physical_offset").alias("start"),
        F.max(record_end()).alias("end"),
    )
    corrupt = (
        scan.where(F.col("status") == "corrupt")
        .groupBy("side")
        .agg(F.min("physical_offset").alias("first_corrupt"))
    )
    sides = {row["side"]: row for row in bounds.collect()}
    first_corrupt = {row["side"]: row["first_corrupt"] for row in corrupt.collect()}
    ms, ss = sides.get("master"), sides.get("slave")
    m_records, m_start, m_end = (ms["records"], ms["start"], ms["end"]) if ms else (0, 0, 0)
    s_records, s_start, s_end = (ss["records"], ss["start"], ss["end"]) if ss else (0, 0, 0)
    low = max(m_start, s_start)
    in_scope = (
        (F.col("kind") == "differs")
        | ((F.col("kind") == "master_only") & (F.col("physical_offset") >= low) & (
            F.col("physical_offset") < s_end))
        | ((F.col("kind") == "slave_only") & (F.col("physical_offset") >= low))
    )  # fmt: skip
    counts_row = records.agg(
        F.min(F.when(in_scope, F.col("physical_offset"))).alias("first"),
        F.count(F.when(F.col("kind") == "differs", 1)).alias("differs"),
        F.count(F.when(F.col("kind") == "master_only", 1)).alias("master_only"),
        F.count(F.when(F.col("kind") == "slave_only", 1)).alias("slave_only"),
    ).collect()[0]
    first = counts_row["first"]
    table = _with_differences(records, _commit_log_dir(master), _commit_log_dir(slave))
    first_row = None
    if first is not None:
        first_row = table.where(F.col("physical_offset") == first).first()
    summary = DiffSummary(
        first_difference=first,
        master_records=m_records,
        slave_records=s_records,
        master_start=m_start,
        master_end=m_end,
        slave_start=s_start,
        slave_end=s_end,
        differing=counts_row["differs"],
        master_only=counts_row["master_only"],
        slave_only=counts_row["slave_only"],
        master_corrupt=first_corrupt.get("master"),
        slave_corrupt=first_corrupt.get("slave"),
        verdict="",
        first_diff_offset=None if first_row is None else first_row["first_diff_offset"],
        first_diff_field=None if first_row is None else first_row["first_diff_field"],
    )
    verdict = _verdict(summary, None if first_row is None else first_row["kind"])
    return DiffResult(
        records=table.orderBy("physical_offset"),
        ranges=_ranges(records),
        summary=attrs.evolve(summary, verdict=verdict),
        scan=scan,
    )


def _verdict(s: DiffSummary, first_kind: str | None) -> str:
    if s.first_difference is not None:
        what = {
            "differs": "the records there differ",
            "master_only": "only the master has a record there",
            "slave_only": "only the slave has a record there",
        }.get(first_kind or "", "")
        line = f"slave diverges from the master at {s.first_difference}: {what}"
        if s.first_diff_offset is not None:
            line += f", first at byte {s.first_diff_offset} ({s.first_diff_field or 'unknown'})"
    elif s.slave_records == 0:
        line = f"slave holds no records; the master holds {s.master_records}"
    elif s.master_records == 0:
        line = f"master holds no records; the slave holds {s.slave_records}"
    elif s.slave_start == s.master_start and s.slave_end == s.master_end:
        line = (
            f"slave is byte-identical to the master ({s.slave_records} records, "
            f"offsets {s.slave_start}..{s.slave_end})"
        )
    else:
        behind = s.master_end - s.slave_end
        line = f"slave is a byte-identical prefix of the master up to {s.slave_end}"
        if behind > 0:
            line += f" ({s.master_only} records, {behind} bytes behind)"
        if s.slave_start != s.master_start:
            line += f"; compared from {max(s.slave_start, s.master_start)}"
    if s.slave_corrupt is not None:
        line += f"; the slave's scan stopped on bad data at {s.slave_corrupt}"
    if s.master_corrupt is not None:
        line += f"; the master's scan stopped on bad data at {s.master_corrupt}"
    return line


_DIFFERENCE = "struct<offset:bigint,field:string,fields:string>"
_COLUMNS = (
    "physical_offset",
    "kind",
    "file",
    "master_size",
    "slave_size",
    "master_body_crc",
    "slave_body_crc",
)


def _commit_log_dir(store: str) -> str | None:
    """The commit log directory of the one store a diff side names (None for several)."""
    found = find_stores(store)
    return str(found[0].commit_log_dir) if len(found) == 1 else None


def _read_record(directory: str, file: str, physical_offset: int, size: int) -> bytes:
    with open(Path(directory) / file, "rb") as f:
        f.seek(physical_offset - int(file))
        return f.read(size)


def _difference_udf(
    master_dir: str, slave_dir: str
) -> Callable[[Column, Column, Column, Column, Column], Column]:
    """A Python UDF reading one record from each side and comparing the bytes."""

    def compare(
        m_file: str, s_file: str, physical_offset: int, m_size: int, s_size: int
    ) -> tuple[int, str | None, str] | None:
        try:
            master = _read_record(master_dir, m_file, physical_offset, m_size)
            slave = _read_record(slave_dir, s_file, physical_offset, s_size)
        except OSError:
            return None  # the files changed since the scan
        found = compare_records(master, slave, physical_offset)
        if found is None:
            return None
        return found.offset, found.field, ",".join(found.fields)

    return F.udf(compare, _DIFFERENCE, useArrow=False)  # pickled rows: no pandas needed


def _with_differences(
    records: DataFrame, master_dir: str | None, slave_dir: str | None
) -> DataFrame:
    """``records`` with ``first_diff_offset``, ``first_diff_field`` and ``differing_fields``,
    computed (by reading both records again) only for the records that differ."""
    null = F.lit(None).cast(_DIFFERENCE)
    differs = records.where(F.col("kind") == "differs")
    if master_dir is not None and slave_dir is not None:
        compare = _difference_udf(master_dir, slave_dir)
        found = compare(
            F.col("master_file"),
            F.col("slave_file"),
            F.col("physical_offset"),
            F.col("master_size"),
            F.col("slave_size"),
        )
    else:
        found = null
    both = differs.withColumn("d", found).unionByName(
        records.where(F.col("kind") != "differs").withColumn("d", null)
    )
    return both.select(
        *_COLUMNS,
        F.col("d.offset").alias("first_diff_offset"),
        F.col("d.field").alias("first_diff_field"),
        F.col("d.fields").alias("differing_fields"),
    )


def _ranges(records: DataFrame) -> DataFrame:
    """One-sided records collapsed into ``[start, end)`` ranges per side.

    A range goes on across a file boundary: the next record starts where the previous ended,
    or at the start of the next file (the previous file ended with a blank record).
    """
    one_sided = records.where(F.col("kind") != "differs").select(
        F.when(F.col("kind") == "master_only", "master").otherwise("slave").alias("side"),
        "physical_offset",
        "file",
        F.coalesce(F.col("master_size"), F.col("slave_size")).alias("size"),
    )
    order = Window.partitionBy("side").orderBy("physical_offset")
    previous_end = F.lag(F.col("physical_offset") + F.col("size").cast("bigint")).over(order)
    previous_file = F.lag("file").over(order)
    continues = (F.col("physical_offset") == F.col("previous_end")) | (
        (F.col("file") != F.col("previous_file"))
        & (F.col("physical_offset") == F.col("file").cast("bigint"))
    )
    starts = F.when(F.col("previous_end").isNotNull() & continues, 0).otherwise(1)
    return (
        one_sided.withColumn("previous_end", previous_end)
        .withColumn("previous_file", previous_file)
        .withColumn("range_id", F.sum(starts).over(order))
        .groupBy("side", "range_id")
        .agg(
            F.min("physical_offset").alias("start"),
            F.max(F.col("physical_offset") + F.col("size").cast("bigint")).alias("end"),
            F.count("*").alias("records"),
        )
        .drop("range_id")
        .orderBy("start", "side")
    )
