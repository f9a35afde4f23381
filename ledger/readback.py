"""Reading the ledger's rows back as the messages they were made from.

The inverse of `duckdb_store._cell`: timestamps become epoch seconds again, enum names their
enum, JSON text a dict, lists tuples. `swarm audit` folds these messages into a fresh ladder to
check that the live one decided what the ledger says it saw.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import types
import typing
from collections.abc import Iterator, Sequence
from typing import Any

import duckdb

from bus.messages import Message
from ledger.schema import TABLES, Table

_HINTS: dict[str, dict[str, Any]] = {}  # table -> its message type's hints (slow to make)

# The kinds a ladder folds, in the order it makes them within one instant (ties of old rows).
KIND_ORDER = ("champion_change", "idea", "run_spec", "run_result", "decision")


def read_messages(con: duckdb.DuckDBPyConnection, kinds: tuple[str, ...]) -> list[Message]:
    """Every row of the tables of `kinds`, as messages, in the event stream's order. Rows
    without a stream sequence (ledgers from before it was kept) follow, by creation time."""
    made: list[tuple[bool, int, float, int, Message]] = []
    for rank, kind in enumerate(kinds):
        for seq, message in _rows(con, TABLES[kind]):
            created = getattr(message, "created_at", 0.0) or getattr(message, "finished_at", 0.0)
            made.append((seq is None, seq or 0, created, rank, message))
    made.sort(key=lambda item: item[:4])
    return [item[4] for item in made]


def _rows(con: duckdb.DuckDBPyConnection, table: Table) -> Iterator[tuple[int | None, Message]]:
    cursor = con.cursor()
    cursor.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = ?", [table.name]
    )
    present = {row[0] for row in cursor.fetchall()}
    cursor.execute(f"SELECT {select_list(table, present)} FROM {table.name}")
    while batch := cursor.fetchmany(10_000):
        for *row, seq in batch:
            yield seq, to_message(table, row)


def select_list(table: Table, present: set[str]) -> str:
    """The columns of `table` as `to_message` reads them, then `stream_seq`. Timestamps are
    read as epoch microseconds: no time zone can shift them on the way back. A column the file
    lacks (a ledger no release since has opened for writing, so not yet migrated:
    ledger/migrations.py) reads as empty: the field's default."""
    selects = [
        ("NULL" if c.name not in present else f"epoch_us({c.name})")
        if c.kind == "timestamp"
        else (c.name if c.name in present else "NULL")
        for c in table.columns
    ]
    selects.append("stream_seq" if "stream_seq" in present else "NULL")
    return ", ".join(f"{expr} AS {name}" for expr, name in zip(selects, _names(table), strict=True))


def _names(table: Table) -> list[str]:
    return [c.name for c in table.columns] + ["stream_seq"]


def to_message(table: Table, row: Sequence[Any]) -> Message:
    """One row of `select_list`'s columns (without `stream_seq`) as its message."""
    hints = _HINTS.get(table.name) or _HINTS.setdefault(
        table.name, typing.get_type_hints(table.message_type)
    )
    fields = {f.name: f for f in dataclasses.fields(table.message_type)}
    values: dict[str, Any] = {}
    for column, cell in zip(table.columns, row, strict=True):
        value = _value(column.kind, hints[column.name], cell)
        if value is None and _has_default(fields[column.name]):
            continue  # an empty cell was the field's default (e.g. created_at 0)
        values[column.name] = value
    return table.message_type(**values)


def _value(kind: str, hint: Any, cell: Any) -> Any:
    if cell is None:
        return None
    if kind == "timestamp":
        return cell / 1e6
    if kind == "json":
        return json.loads(cell)
    if kind == "list":
        return tuple(cell)
    if kind == "enum":
        return _enum_type(hint)(cell)
    return cell


def _enum_type(hint: Any) -> type[enum.Enum]:
    if typing.get_origin(hint) in (types.UnionType, typing.Union):
        (hint,) = [a for a in typing.get_args(hint) if a is not type(None)]
    assert isinstance(hint, type) and issubclass(hint, enum.Enum)
    return hint


def _has_default(field: dataclasses.Field[Any]) -> bool:
    return (
        field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING
    )
