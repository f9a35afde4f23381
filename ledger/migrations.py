"""The ledger file across releases: its schema is brought up to date in place when it opens.

Every table is derived from its message type (schema.py), so most changes are additive: a field
added to a message (a new minor schema version, bus/messages.py) is a column an older ledger
lacks, and a new message type a table. `migrate` creates what is missing (old rows get NULL in a
new column, as the field's absence meant) and then runs each numbered migration of MIGRATIONS
not yet applied, in order, each in one transaction with its row in `schema_migrations`. So a
workspace written by an earlier release opens as it was, and `schema_migrations` says what was
done to it, by which release and when: `swarm sql "select * from schema_migrations"`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import duckdb

from bus.messages import SCHEMA_MINOR, SCHEMA_VERSION
from ledger.schema import ddl

MIGRATIONS_DDL = """CREATE TABLE IF NOT EXISTS schema_migrations (
    name VARCHAR PRIMARY KEY,
    schema_version VARCHAR,  -- the message schema of the release that applied it
    applied_at TIMESTAMP
)"""

# Fields of a newer minor schema version than the ledger's, kept until a release that knows
# them (bus/codec.py): nothing a newer host sends is lost.
NEWER_FIELDS_DDL = """CREATE TABLE IF NOT EXISTS newer_fields (
    table_name VARCHAR,  -- the table its row is in
    row_key VARCHAR,  -- that row's key (ideas.idea_id, runs.run_id, champions.version ...)
    schema_minor INTEGER,
    fields VARCHAR,  -- a JSON object: field name -> value
    ingested_at TIMESTAMP,
    PRIMARY KEY (table_name, row_key)
)"""

# Events whose rows do not give them back as they were (a value the table cannot hold: a NUL
# in a string, a timestamp past its range), kept as their stream bytes: retention purges events
# from the stream, and readers then read them back from the ledger (ledger/remote_events.py).
KEPT_EVENTS_DDL = """CREATE TABLE IF NOT EXISTS kept_events (
    stream_seq BIGINT PRIMARY KEY,
    subject VARCHAR,
    data BLOB,  -- the event as the stream held it
    reason VARCHAR,
    ingested_at TIMESTAMP
)"""

Migration = Callable[[duckdb.DuckDBPyConnection], None]


def _newer_fields(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(NEWER_FIELDS_DDL)


def _kept_events(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(KEPT_EVENTS_DDL)


# (name, what it does), in the order they apply; a name never changes once released.
MIGRATIONS: tuple[tuple[str, Migration], ...] = (
    ("0001-newer-fields", _newer_fields),
    ("0002-kept-events", _kept_events),
)


def migrate(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Bring the ledger's tables and views up to date, in one transaction (a kill leaves the
    file as it was, or migrated with every step recorded); the names of what was applied."""
    con.execute("BEGIN TRANSACTION")
    try:
        applied = _migrate(con)
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return applied


def _migrate(con: duckdb.DuckDBPyConnection) -> list[str]:
    con.execute(MIGRATIONS_DDL)
    before = _columns(con)
    for statement in ddl():
        con.execute(statement)
    applied: list[str] = []
    if before:  # an existing ledger: record what its file gained (a new one gained everything)
        for table, columns in sorted(_columns(con).items()):
            if table not in before:
                applied.append(f"add table {table}")
            else:
                applied += [f"add column {table}.{c}" for c in columns if c not in before[table]]
    done = {row[0] for row in con.execute("SELECT name FROM schema_migrations").fetchall()}
    for name, step in MIGRATIONS:
        if name not in done:
            step(con)
            applied.append(name)
    for name in applied:
        _record(con, name)
    return applied


def _columns(con: duckdb.DuckDBPyConnection) -> dict[str, list[str]]:
    """table -> its columns, for the tables the ledger keeps (not its own bookkeeping)."""
    rows = con.execute(
        "SELECT table_name, column_name FROM information_schema.columns "
        "WHERE table_schema = 'main' AND table_name <> 'schema_migrations' "
        "AND table_name IN (SELECT table_name FROM information_schema.tables "
        "WHERE table_type = 'BASE TABLE') ORDER BY table_name, ordinal_position"
    ).fetchall()
    columns: dict[str, list[str]] = {}
    for table, column in rows:
        columns.setdefault(table, []).append(column)
    return columns


def _record(con: duckdb.DuckDBPyConnection, name: str) -> None:
    con.execute(
        "INSERT INTO schema_migrations (name, schema_version, applied_at) "
        "VALUES (?, ?, make_timestamp(?)) ON CONFLICT DO NOTHING",
        [name, f"{SCHEMA_VERSION}.{SCHEMA_MINOR}", int(time.time() * 1e6)],
    )
