"""The DuckDB file: opening it safely, writing batches of events, exporting snapshots.

Only the ledger process opens the file for writing. The database is opened with external access
off and its configuration locked, so no SQL — ours or a user's — can read or write other files,
reach the network, attach databases or load extensions. Snapshots are written by pyarrow,
outside SQL, for the same reason.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from bus.dead_letters import dead_letter
from bus.messages import DeadLetter, Message, event_key
from ledger.migrations import migrate
from ledger.schema import TABLES, Column, Table, run_stats_upsert

log = logging.getLogger(__name__)

SAFE_CONFIG: dict[str, Any] = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "lock_configuration": True,
    # DuckDB's default is 80% of the machine's memory, for caching as much as queries: a
    # long-running ledger (and a heavy user query) stays within this instead.
    "memory_limit": "2GB",
}

# Errors that mean "this row is bad", not "the database is broken": the row becomes a dead letter.
ROW_ERRORS = (
    duckdb.ConstraintException,
    duckdb.ConversionException,
    duckdb.InvalidInputException,
    duckdb.OutOfRangeException,
    pa.ArrowException,
    ValueError,
    TypeError,
    OverflowError,
)


class LedgerLocked(RuntimeError):
    pass


def open_database(path: Path, read_only: bool) -> duckdb.DuckDBPyConnection:
    try:
        return duckdb.connect(str(path), read_only=read_only, config=dict(SAFE_CONFIG))
    except duckdb.IOException as exc:
        if "lock" in str(exc).lower():
            raise LedgerLocked(f"{path} is in use by another process (a running ledger)") from None
        raise


class LedgerStore:
    """The writer: `write_batch` commits a batch of events in one transaction, idempotently."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.con = open_database(path, read_only=False)
        for name in migrate(self.con):
            log.info("ledger migration applied: %s", name)
        self._rebuild_run_stats_if_missing()
        self._changed = {t.name for t in TABLES.values()}
        self._changed_lock = threading.Lock()  # snapshots run on their own thread
        self._newer: dict[tuple[str, str], tuple[int, dict[str, Any]]] = {}

    def close(self) -> None:
        self.con.close()

    def write_batch(
        self,
        messages: Sequence[Message],
        seqs: Sequence[int | None] = (),
        newer: Mapping[tuple[str, str], tuple[int, dict[str, Any]]] | None = None,
    ) -> list[DeadLetter]:
        """Store all messages in one transaction, each with its stream sequence if known (`seqs`,
        parallel to `messages`), and with the fields of a newer schema version each carried
        (`newer`: (kind, event id) -> (minor version, fields)). If the batch fails on bad data,
        store the good ones one by one and return a dead letter for each that cannot be stored."""
        numbered = list(zip(messages, seqs or [None] * len(messages), strict=True))
        self._newer = dict(newer or {})
        try:
            self._write(numbered)
            return []
        except ROW_ERRORS as exc:
            log.warning("batch of %d failed (%s); storing one by one", len(messages), exc)
        refused: list[DeadLetter] = []
        for message, seq in numbered:
            try:
                self._write([(message, seq)])
            except ROW_ERRORS as exc:
                raw = json.dumps(_row(message, TABLES[message.KIND].columns), default=str)
                key = event_key(message.KIND, message.event_id)
                subject = f"ledger/{message.KIND}"
                reason = f"cannot store: {exc}"
                refused.append(dead_letter(subject, raw.encode(), reason, "ledger", key=key))
        if refused:
            self._write([(letter, None) for letter in refused])
        return refused

    def keep(self, events: Sequence[tuple[int, str, bytes, str]]) -> None:
        """Keep events as the stream held them: (stream seq, subject, bytes, why)."""
        if events:
            self.con.executemany(
                "INSERT INTO kept_events VALUES (?, ?, ?, ?, now()) ON CONFLICT DO NOTHING",
                [list(e) for e in events],
            )

    def _write(self, messages: Iterable[tuple[Message, int | None]]) -> None:
        by_kind: dict[str, dict[str, tuple[Message, int | None]]] = {}
        for message, seq in messages:
            # Keep the first copy of an id within a batch: later copies are redeliveries.
            by_kind.setdefault(message.KIND, {}).setdefault(message.event_id, (message, seq))
        ingested_at = int(time.time() * 1e6)
        self.con.execute("BEGIN TRANSACTION")
        try:
            newer = self._newer_rows(by_kind, ingested_at)  # before the rows they go with
            for kind, unique in by_kind.items():
                table = TABLES[kind]
                name = table.name
                batch = _arrow_batch(table, unique.values(), ingested_at)
                self.con.register("incoming_batch", batch)
                try:
                    if name == "runs":
                        self._insert_runs()
                    else:
                        self.con.execute(
                            f"INSERT INTO {name} BY NAME SELECT * FROM incoming_batch "
                            "ON CONFLICT DO NOTHING"
                        )
                finally:
                    self.con.unregister("incoming_batch")
            if newer:
                self.con.executemany(
                    "INSERT INTO newer_fields "
                    "(table_name, row_key, schema_minor, fields, ingested_at) "
                    "VALUES (?, ?, ?, ?, make_timestamp(?)) ON CONFLICT DO NOTHING",
                    newer,
                )
            self.con.execute("COMMIT")
        except BaseException:
            self.con.execute("ROLLBACK")
            raise
        with self._changed_lock:
            self._changed.update(TABLES[kind].name for kind in by_kind)

    def _newer_rows(
        self, by_kind: Mapping[str, Mapping[str, tuple[Message, int | None]]], ingested_at: int
    ) -> list[tuple[object, ...]]:
        """The newer-version fields (migrations.py) of the batch's events whose rows are new:
        a copy of an event already stored (a redelivery, or another sender's forgery under
        its id) adds nothing to it."""
        rows: list[tuple[object, ...]] = []
        for (kind, event_id), (minor, fields) in self._newer.items():
            stored = by_kind.get(kind, {}).get(event_id)
            if stored is None:
                continue
            table = TABLES[kind]
            key = getattr(stored[0], table.key)
            exists = self.con.execute(
                f"SELECT 1 FROM {table.name} WHERE {table.key} = ?", [key]
            ).fetchall()
            if not exists:
                text = json.dumps(fields, sort_keys=True)
                rows.append((table.name, str(key), minor, text, ingested_at))
        return rows

    def _insert_runs(self) -> None:
        """Insert new results and add them, and only them, to the run_stats totals."""
        self.con.execute(
            "CREATE OR REPLACE TEMP TABLE new_runs AS SELECT * FROM incoming_batch b "
            "WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.run_id = b.run_id)"
        )
        self.con.execute("INSERT INTO runs BY NAME SELECT * FROM new_runs")
        self.con.execute(run_stats_upsert("new_runs"))
        self.con.execute("DROP TABLE new_runs")

    def _rebuild_run_stats_if_missing(self) -> None:
        empty = self.con.execute("SELECT count(*) = 0 FROM run_stats").fetchall()[0][0]
        if empty and self.count("runs"):
            log.info("rebuilding run_stats from runs")
            self.con.execute(run_stats_upsert("runs"))

    def count(self, table: str) -> int:
        row = self.con.cursor().execute(f"SELECT count(*) FROM {table}").fetchone()
        return int(row[0]) if row else 0

    def snapshot(self, folder: Path) -> list[str]:
        """Write a Parquet copy of each table changed since the last snapshot (atomic rename)."""
        folder.mkdir(parents=True, exist_ok=True)
        with self._changed_lock:
            changed, self._changed = self._changed, set()
        for name in sorted(changed):
            table = self.con.cursor().sql(f"SELECT * FROM {name}").to_arrow_table()
            tmp = folder / f".{name}.parquet.tmp"
            pq.write_table(table, tmp)
            os.replace(tmp, folder / f"{name}.parquet")
        return sorted(changed)


def _cell(column: Column, value: Any) -> Any:
    if value is None:
        return None
    if column.kind == "timestamp":
        return int(value * 1e6) if value else None
    if column.kind == "enum":
        return str(value.value)
    if column.kind == "json":
        return json.dumps(value, sort_keys=True)
    if column.kind == "list":
        return list(value)
    if isinstance(value, str) and "\x00" in value:
        return value.replace("\x00", "\\x00")  # DuckDB strings cannot hold NUL
    return value


def _row(message: Message, columns: Sequence[Column]) -> dict[str, Any]:
    return {c.name: _cell(c, getattr(message, c.name)) for c in columns}


def _arrow_batch(
    table: Table, numbered: Iterable[tuple[Message, int | None]], ingested_at: int
) -> pa.Table:
    """Column by column: one list per column is several times faster than one dict per row."""
    pairs = list(numbered)
    batch = [message for message, _ in pairs]
    columns: dict[str, list[Any]] = {}
    for column in table.columns:
        values = [getattr(m, column.name) for m in batch]
        if column.kind == "plain" and column.sql_type != "VARCHAR":
            columns[column.name] = values  # numbers and booleans go in as they are
        else:
            columns[column.name] = [_cell(column, v) for v in values]
    columns["ingested_at"] = [ingested_at] * len(batch)
    columns["stream_seq"] = [seq for _, seq in pairs]
    return pa.Table.from_pydict(columns, schema=table.arrow_schema())
