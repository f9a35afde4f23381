"""Read-only SQL for users: one statement, SELECT-like only, no file or network access.

The gate gives clear reasons up front; behind it, the database itself is opened with external
access off and a locked configuration (see duckdb_store), and queries run inside a READ ONLY
transaction, so whatever slips past the parser is still refused by DuckDB.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass

import duckdb
import pyarrow as pa

ALLOWED_TYPES = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}
READ_ONLY_PRAGMAS = {
    "table_info",
    "show_tables",
    "show_tables_expanded",
    "database_size",
    "version",
}
# A function may be called by its quoted name too ("read_csv"(...)); DuckDB itself refuses
# whatever the pattern misses (external access is off), with a less direct message.
FILE_FUNCTIONS = re.compile(
    r"\b(read_csv(_auto)?|read_parquet|parquet_scan|parquet_metadata|parquet_schema|"
    r"parquet_file_metadata|parquet_kv_metadata|read_json(_auto|_objects(_auto)?)?|"
    r"read_ndjson(_auto|_objects)?|read_text|read_blob|read_xlsx|glob|sniff_csv|delta_scan|"
    r'iceberg_scan|st_read|sqlite_scan|postgres_scan|mysql_scan)"?\s*\(',
    re.IGNORECASE,
)
HINTS = {
    "COPY": "file export is not allowed; use `swarm sql --out FILE.parquet` instead",
    "ATTACH": "other databases cannot be attached",
    "LOAD": "extensions cannot be installed or loaded",
    "SET": "settings cannot be changed",
    "VARIABLE_SET": "settings cannot be changed",
    "PRAGMA": "only read-only pragmas are allowed: " + ", ".join(sorted(READ_ONLY_PRAGMAS)),
}


class SqlRefused(ValueError):
    """A statement the ledger will not run; the message says why."""


@dataclass(frozen=True, slots=True)
class QueryResult:
    table: pa.Table
    truncated: bool


def check_read_only(con: duckdb.DuckDBPyConnection, sql: str) -> None:
    """Raise SqlRefused unless `sql` is exactly one read-only statement."""
    if not sql.strip():
        raise SqlRefused("empty query")
    try:
        sql.encode()
    except UnicodeEncodeError as exc:  # JSON can carry a lone surrogate; DuckDB cannot take it
        raise SqlRefused(
            f"the query is not Unicode text: a lone surrogate at character {exc.start}"
        ) from None
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as exc:
        raise SqlRefused(f"cannot parse the query: {_reason(exc)}") from None
    if len(statements) != 1:
        raise SqlRefused(f"exactly one statement is allowed, got {len(statements)}")
    kind = statements[0].type
    if kind == duckdb.StatementType.PRAGMA:
        name = re.match(r"\s*pragma\s+(\w+)", sql, re.IGNORECASE)
        if name and name.group(1).lower() in READ_ONLY_PRAGMAS:
            return
    if kind not in ALLOWED_TYPES:
        label = kind.name
        hint = HINTS.get(label, "the ledger is read-only from SQL")
        raise SqlRefused(f"only read-only queries (SELECT) are allowed, got {label}: {hint}")
    match = FILE_FUNCTIONS.search(sql)
    if match:
        raise SqlRefused(f"file access from SQL is not allowed: {match.group(1)}()")


def run_query(
    con: duckdb.DuckDBPyConnection, sql: str, row_cap: int, timeout_s: float
) -> QueryResult:
    """Check, then run on a fresh cursor in a READ ONLY transaction, interrupted at `timeout_s`,
    returning at most `row_cap` rows."""
    cursor = con.cursor()  # its own connection: the writer may be busy on `con`
    try:
        check_read_only(cursor, sql)
    except SqlRefused:
        cursor.close()
        raise
    timer = threading.Timer(timeout_s, cursor.interrupt)
    timer.start()
    try:
        cursor.execute("BEGIN TRANSACTION READ ONLY")
        relation = cursor.sql(sql)
        if relation is None:  # pragma: no cover - the gate only lets row-returning statements by
            raise SqlRefused("the statement returned no result")
        reader = relation.to_arrow_reader(min(row_cap + 1, 100_000))
        batches, rows = [], 0
        for batch in reader:
            batches.append(batch)
            rows += batch.num_rows
            if rows > row_cap:
                break
        table = pa.Table.from_batches(batches, schema=reader.schema)
    except duckdb.InterruptException:
        raise SqlRefused(f"query interrupted after the {timeout_s:g}s time limit") from None
    except duckdb.Error as exc:
        raise SqlRefused(_reason(exc)) from None
    finally:
        timer.cancel()
        cursor.close()
    if table.num_rows > row_cap:
        return QueryResult(table.slice(0, row_cap), truncated=True)
    return QueryResult(table, truncated=False)


HINT_LINES = ("Did you mean", "Candidate bindings")  # DuckDB's suggestions, kept with its reason


def _reason(exc: BaseException, max_chars: int = 500) -> str:
    """DuckDB's reason, short (its messages quote the query, however long), with its
    suggestion if it made one: a newcomer who typed `agent_id` learns the column is `agent`."""
    text = str(exc).strip()
    lines = text.splitlines() if text else [type(exc).__name__]
    kept = [lines[0], *(line for line in lines[1:] if line.startswith(HINT_LINES))]
    return " ".join(_shortened(line, max_chars) for line in kept)


def _shortened(line: str, max_chars: int) -> str:
    if len(line) <= max_chars:
        return line
    half = max_chars // 2
    return f"{line[:half]}… [{len(line) - 2 * half} chars] …{line[-half:]}"
