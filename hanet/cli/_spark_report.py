"""Showing the jobs' tables in the terminal, as JSON, and writing them out (Parquet, CSV or
JSON)."""

from __future__ import annotations

import datetime
import decimal
import json
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import attrs
from pyspark.sql import DataFrame
from rich import box
from rich.console import Console
from rich.table import Table

__all__ = [
    "OUT_FORMATS",
    "Collected",
    "format_table",
    "json_rows",
    "json_value",
    "show",
    "write_json",
    "write_tables",
]

OUT_FORMATS = ("parquet", "csv", "json")
"""What ``--out`` writes."""


@attrs.frozen
class Collected:
    """A table already collected on the driver: printed and put in the JSON document as it is
    (no second Spark job); a DataFrame again (``frame``) only to be written out."""

    columns: list[str]
    rows: list[Any]
    frame: Callable[[], DataFrame]


AnyTable = DataFrame | Collected


def _take(df: AnyTable, limit: int | None) -> list[Any]:
    if isinstance(df, Collected):
        return list(df.rows if limit is None else df.rows[:limit])
    return (df if limit is None else df.limit(limit)).collect()


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.1f}"
    return str(value)


def format_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain text table: a header, a rule, one line per row; numbers right-aligned."""
    cells = [[_cell(v) for v in row] for row in rows]
    numeric = [
        all(isinstance(row[i], int | float) or row[i] is None for row in rows) and bool(rows)
        for i in range(len(columns))
    ]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(values, widths, numeric, strict=True)
        ]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(list(columns)), rule, *(line(r) for r in cells)])


def show(
    title: str, df: AnyTable, *, limit: int, total: int | None = None, out: TextIO | None = None
) -> list[Any]:
    """Print ``title`` and the first ``limit`` rows of ``df`` as a table; returns those rows.

    ``total`` (the row count, when known) is printed with the title when rows were left out.
    On a terminal, rich renders the table when it is installed (the ``progress`` extra);
    otherwise (a pipe, a file, no rich) it is plain text, never truncated.
    """
    out = out or sys.stdout
    started = time.monotonic()
    rows = _take(df, limit + 1 if total is None else limit)
    more = len(rows) > limit if total is None else total > limit
    rows = rows[:limit]
    elapsed = time.monotonic() - started
    count = f"first {limit} of {total}" if more and total is not None else (
        f"first {limit}" if more else f"{len(rows)} row{'s' * (len(rows) != 1)}"
    )  # fmt: skip
    heading = f"{title} ({count}, {elapsed:.1f} s)"
    columns = list(df.columns)  # a Collected has them too
    if not (out.isatty() and _rich_table(heading, columns, rows, out)):
        print(f"\n{heading}", file=out)
        if rows:
            print(format_table(columns, rows), file=out)
    out.flush()
    return rows


def _rich_table(heading: str, columns: list[str], rows: list[Any], out: TextIO) -> bool:
    cells = [[_cell(v) for v in row] for row in rows]
    needed = sum(max([len(c), *(len(r[i]) for r in cells)]) + 3 for i, c in enumerate(columns))
    width = max(needed, len(heading), shutil.get_terminal_size((120, 24)).columns)
    console = Console(file=out, width=width, highlight=False, soft_wrap=False)
    table = Table(title=heading, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False)
    for i, name in enumerate(columns):
        numeric = bool(rows) and all(isinstance(r[i], int | float) or r[i] is None for r in rows)
        table.add_column(name, justify="right" if numeric else "left", no_wrap=True)
    for row in cells:
        table.add_row(*row)
    console.print()
    console.print(table)
    return True


def json_value(value: Any) -> Any:
    """A cell as JSON: timestamps as ISO 8601 in UTC, bytes as hex, rows and maps as objects."""
    if isinstance(value, datetime.datetime):
        # pyspark gives a naive local time for a TimestampType; astimezone reads it so
        return value.astimezone(datetime.UTC).isoformat()
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, bytes | bytearray):
        return bytes(value).hex()
    if isinstance(value, Mapping):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        if hasattr(value, "asDict"):  # a Row
            return json_value(value.asDict())
        return [json_value(v) for v in value]
    return value


def json_rows(df: AnyTable, limit: int | None = None) -> list[dict[str, Any]]:
    """The rows of ``df`` (the first ``limit`` when given) as JSON objects, keys in column
    order."""
    rows = _take(df, limit)
    return [{k: json_value(v) for k, v in row.asDict().items()} for row in rows]


def write_json(path: Path, document: Any) -> None:
    """Write ``document`` to ``path`` as indented JSON (creating the directory)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")


def write_tables(tables: Mapping[str, AnyTable], out: str, fmt: str) -> list[str]:
    """Write each table to ``out/<name>`` (a Spark output directory) as Parquet or CSV with a
    header, or to the one file ``out/<name>.json`` (a JSON array of row objects, collected on
    the driver), replacing what was there; returns the paths written."""
    if fmt not in OUT_FORMATS:
        raise ValueError(f"unknown output format {fmt!r} (one of {', '.join(OUT_FORMATS)})")
    written = []
    for name, df in tables.items():
        target = f"{out.rstrip('/')}/{name}"
        if fmt == "json":
            write_json(Path(f"{target}.json"), json_rows(df))
            written.append(f"{target}.json")
            continue
        frame = df.frame() if isinstance(df, Collected) else df
        writer = frame.write.mode("overwrite")
        if fmt == "csv":
            writer.option("header", "true").csv(target)
        else:
            writer.parquet(target)
        written.append(target)
    return written
