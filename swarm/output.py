"""Printing query results: an aligned table, CSV, JSON, or a Parquet file."""

from __future__ import annotations

import csv
import datetime
import io
import json
import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bus.untrusted import for_terminal

MAX_CELL_CHARS = 60


def _cell_text(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return f"{value:.6g}" if math.isfinite(value) else str(value)
    if isinstance(value, datetime.datetime):
        return value.isoformat(sep=" ", timespec="seconds")
    text = for_terminal(str(value), newlines=False)  # a cell may hold an experiment's text
    return text if len(text) <= MAX_CELL_CHARS else text[: MAX_CELL_CHARS - 1] + "…"


def _rows(table: pa.Table) -> list[tuple[Any, ...]]:
    """The rows by position: `to_pylist` makes dicts, which keep one of two columns named
    alike (`select 1 as a, 2 as a`) and misaligned every row after it."""
    return list(zip(*(column.to_pylist() for column in table.columns), strict=True))


def _unique(names: list[str]) -> list[str]:
    """Column names as JSON keys: a repeated name gets its position (`a`, `a_2`)."""
    seen: set[str] = set()
    out = []
    for i, name in enumerate(names, 1):
        key = name if name not in seen else f"{name}_{i}"
        seen.add(key)
        out.append(key)
    return out


def aligned(table: pa.Table) -> str:
    names = [for_terminal(n, newlines=False) for n in table.column_names]  # PIVOT: from data
    rows = [[_cell_text(v) for v in row] for row in _rows(table)]
    numeric = [
        pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)
        for t in table.schema.types
    ]
    widths = [max([len(n), *(len(r[i]) for r in rows)]) for i, n in enumerate(names)]

    def line(cells: list[str]) -> str:
        parts = [
            c.rjust(w) if right else c.ljust(w)
            for c, w, right in zip(cells, widths, numeric, strict=True)
        ]
        return "  ".join(parts).rstrip()

    out = [line(names), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in rows]
    out.append(f"({table.num_rows} row{'s' if table.num_rows != 1 else ''})")
    return "\n".join(out)


def to_csv(table: pa.Table) -> str:
    """CSV for reading or piping on: text cells have their control characters written as
    escapes like the table's (they came from experiments and agents, and this is printed to a
    terminal); `--out x.parquet` keeps every byte as stored."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([for_terminal(n) for n in table.column_names])
    for row in _rows(table):
        writer.writerow([_csv_cell(v) for v in row])
    return buffer.getvalue().rstrip("\n")


def _csv_cell(value: Any) -> Any:
    if value is None:
        return ""
    return for_terminal(value) if isinstance(value, str) else value


def to_json(table: pa.Table) -> str:
    names = _unique(table.column_names)
    rows = [dict(zip(names, row, strict=True)) for row in _rows(table)]
    return json.dumps(rows, default=_json_default, indent=1)


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime.datetime | datetime.date):
        return value.isoformat()
    return str(value)


def check_parquet_out(path: Path) -> None:
    """Before the query runs: `path` names a .parquet file in a folder that exists."""
    if path.suffix != ".parquet":
        raise ValueError(f"--out must name a .parquet file, got {path}")
    folder = path.resolve().parent
    if not folder.is_dir():
        raise ValueError(f"--out {path}: no folder {folder}")
    if path.is_dir():
        raise ValueError(f"--out {path} is a folder")


def write_parquet(table: pa.Table, path: Path) -> None:
    """Write `table` to `path`, which check_parquet_out passed before the query ran."""
    try:
        pq.write_table(table, path)
    except OSError as exc:  # not writable, disk full: say so, not a pyarrow traceback
        raise ValueError(f"--out {path}: could not write it: {exc}") from None


FORMATS = {"table": aligned, "csv": to_csv, "json": to_json}
