"""Only one read-only statement runs; everything else is refused with a clear reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.duckdb_store import LedgerStore, open_database
from ledger.sql_gate import SqlRefused, run_query
from tests.conftest import make_result


@pytest.fixture
def store(tmp_path: Path) -> LedgerStore:
    store = LedgerStore(tmp_path / "ledger.duckdb")
    store.write_batch([make_result(i) for i in range(50)])
    yield store  # type: ignore[misc]
    store.close()


REFUSED = [
    ("", "empty query"),
    ("   ", "empty query"),
    ("select 1; select 2", "exactly one statement is allowed, got 2"),
    ("select 1; drop table runs", "exactly one statement is allowed, got 2"),
    ("drop table runs", "got DROP"),
    ("create table x (a int)", "got CREATE"),
    ("create view v as select 1", "got CREATE"),
    ("alter table runs add column z int", "got ALTER"),
    ("insert into runs (run_id) values ('x')", "got INSERT"),
    ("update runs set metric = 0", "got UPDATE"),
    ("delete from runs", "got DELETE"),
    ("copy runs to '/tmp/stolen.csv'", "got COPY: file export is not allowed"),
    ("copy runs from '/etc/passwd'", "got COPY"),
    ("export database '/tmp/x'", "got EXPORT"),
    ("attach '/tmp/other.duckdb' as o", "got ATTACH: other databases cannot be attached"),
    ("detach ledger", "got DETACH"),
    ("install httpfs", "got LOAD: extensions cannot be installed or loaded"),
    ("load httpfs", "got LOAD"),
    ("set threads = 1", "got SET: settings cannot be changed"),
    ("pragma enable_profiling", "got PRAGMA: only read-only pragmas"),
    ("checkpoint", "got CALL"),
    ("call pragma_version()", "got CALL"),
    ("select * from read_csv('/etc/passwd')", r"file access from SQL is not allowed: read_csv\(\)"),
    ("select * from read_csv_auto('/etc/passwd')", "read_csv_auto"),
    ("select * from read_parquet('x.parquet')", "read_parquet"),
    ("select * from READ_JSON_AUTO('x.json')", "READ_JSON_AUTO"),
    ("select * from read_text('/etc/hostname')", "read_text"),
    ("select * from read_blob('/etc/hostname')", "read_blob"),
    ("select * from glob('/etc/*')", "glob"),
    ("select * from parquet_scan('x')", "parquet_scan"),
    ("select * from '/etc/passwd'", "does not exist"),
    ("select * from 'https://example.com/x.csv'", "disabled by configuration"),
    ("selct 1", "cannot parse the query"),
    ("select * from no_such_table", "no_such_table does not exist"),
    # DuckDB's suggestion comes with its reason (a newcomer looked for the column by `describe`)
    ("select * from run", 'run does not exist! Did you mean "runs"'),
    ("select agent_id from agent_events", 'Candidate bindings: .*"agent"'),
]


@pytest.mark.parametrize(("sql", "reason"), REFUSED)
def test_refused_with_a_clear_reason(store: LedgerStore, sql: str, reason: str) -> None:
    with pytest.raises(SqlRefused, match=reason):
        run_query(store.con, sql, row_cap=100, timeout_s=5)
    assert store.count("runs") == 50  # nothing changed


ALLOWED = [
    "select count(*) from runs",
    "with t as (select tier from runs) select tier, count(*) from t group by tier",
    "from runs limit 3",
    "describe runs",
    "show tables",
    "summarize runs",
    "explain select * from runs",
    "pragma table_info('runs')",
    "select * from leaderboard",
    "select * from ladder",
    "select * from lineage",
    "select * from agents",
    "select * from unfinished_runs",
    "select 1;",
]


@pytest.mark.parametrize("sql", ALLOWED)
def test_read_only_queries_run(store: LedgerStore, sql: str) -> None:
    result = run_query(store.con, sql, row_cap=1000, timeout_s=5)
    assert result.table.num_columns >= 1


def test_row_cap_truncates_and_says_so(store: LedgerStore) -> None:
    result = run_query(store.con, "select * from runs order by run_id", row_cap=7, timeout_s=5)
    assert result.truncated and result.table.num_rows == 7
    assert result.table.column("run_id").to_pylist()[0] == "run-0000000"
    full = run_query(store.con, "select * from runs", row_cap=50, timeout_s=5)
    assert not full.truncated and full.table.num_rows == 50


def test_long_query_is_interrupted(store: LedgerStore) -> None:
    with pytest.raises(SqlRefused, match=r"interrupted after the 0\.3s time limit"):
        run_query(store.con, "select count(*) from range(10000000000) a", 10, timeout_s=0.3)
    # The connection is still usable afterwards.
    assert run_query(store.con, "select 1", 10, 5).table.num_rows == 1


def test_read_only_file_refuses_writes_even_past_the_gate(tmp_path: Path) -> None:
    store = LedgerStore(tmp_path / "l.duckdb")
    store.close()
    con = open_database(tmp_path / "l.duckdb", read_only=True)
    with pytest.raises(Exception, match=r"read-only|Permission"):
        con.execute("create table x (a int)")
    with pytest.raises(Exception, match="disabled by configuration"):
        con.execute("select * from read_text('/etc/hostname')")
    con.close()
