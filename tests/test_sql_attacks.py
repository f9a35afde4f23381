"""SQL attacks on the ledger, end to end: through `swarm sql` (a subprocess, as people run it) and
straight over the bus to `swarm.sql`, against a running swarm; and through `swarm sql` on the file
a stopped swarm left. (The gate's rules alone are in test_sql_gate.py.) Every attack must be
refused, or interrupted, with an error that names the problem; every table must be as it was; the
ledger must go on answering and ingesting."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from nats.aio.client import Client
from nats.errors import MaxPayloadError

from bus.messages import new_id
from bus.nats_bus import BusSettings, connect
from bus.roles import Role
from bus.subjects import SQL_SUBJECT
from ledger.duckdb_store import LedgerStore
from ledger.sql_protocol import STATUS, SqlError
from swarm.sql_client import ask_ledger
from swarm.status import TABLES as STATUS_TABLES
from tests.conftest import (
    RunningSwarm,
    make_idea,
    make_result,
    run_swarm,
    swarm_cmd,
    wait_for_async,
)
from tests.helpers_process import publish_all

ROW_CAP = 1000
TIMEOUT_S = 1.0
MAX_PAYLOAD = 8 * 1024 * 1024  # the swarm's default bus.max_payload_bytes
CONFIG = f"""
[ledger]
sql_row_cap = {ROW_CAP}
sql_timeout_s = {TIMEOUT_S}
restart_delay_s = 0.2
[status]
interval_s = 1.0
[trainers]
count = 0
[agents]
count = 0
"""
TABLES = ("agents", *STATUS_TABLES, "run_stats", "llm_calls", "prompt_prefixes", "strategies")
COUNTS = "SELECT " + ", ".join(f"(SELECT count(*) FROM {t}) AS {t}" for t in TABLES)

# (what it tries, the SQL, what the error must say)
ATTACKS = [
    ("stacked statements", "select 1; drop table runs", "exactly one statement is allowed, got 2"),
    ("stacked after a comment", "select 1 -- x\n; delete from runs", "exactly one statement"),
    ("stacked behind a NUL", "select 1\x00; drop table runs", "exactly one statement"),
    ("read_csv", "select * from read_csv('/etc/passwd')", r"file access .* read_csv\(\)"),
    ("read_csv, quoted", "select * from \"read_csv\"('/etc/passwd')", r"file access .* read_csv"),
    ("read_csv, comment", "select * from read_csv/**/('/etc/passwd')", "file system operations"),
    ("a path as a table", "select * from '/etc/passwd'", "/etc/passwd does not exist"),
    ("read_parquet", "select * from read_parquet('runs.parquet')", r"read_parquet\(\)"),
    ("read_text", "select content from read_text('/etc/passwd')", r"read_text\(\)"),
    ("glob", "select * from glob('/etc/*')", r"glob\(\)"),
    ("copy to", "copy runs to 'stolen.csv'", "got COPY: file export is not allowed"),
    ("copy query to", "copy (select * from runs) to 'stolen.parquet'", "got COPY"),
    ("copy from", "copy runs from '/etc/passwd'", "got COPY"),
    ("export", "export database 'stolen'", "got EXPORT"),
    ("attach", "attach 'other.duckdb' as other", "got ATTACH: other databases cannot be attached"),
    ("install", "install httpfs", "got LOAD: extensions cannot be installed or loaded"),
    ("load", "load httpfs", "got LOAD"),
    ("set", "set enable_external_access = true", "got SET: settings cannot be changed"),
    ("reset", "reset threads", "got SET"),
    ("pragma", "pragma enable_profiling", "only read-only pragmas are allowed"),
    ("call", "call pragma_table_info('runs')", "got CALL"),
    ("checkpoint", "checkpoint", "got CALL"),
    ("insert", "insert into runs (run_id) values ('x')", "got INSERT"),
    ("delete", "delete from runs", "got DELETE"),
    ("update", "update runs set metric = 0", "got UPDATE"),
    ("create", "create table stolen as select * from runs", "got CREATE"),
    ("drop", "drop table runs", "got DROP"),
    ("alter", "alter table runs rename to gone", "got ALTER"),
    (
        "a write in a SELECT",
        "with x as (delete from runs returning *) select * from x",
        "read-only",
    ),
    ("a write through query()", "select * from query('delete from runs')", "single SELECT"),
    ("transaction control", "commit", "got TRANSACTION"),
    ("not SQL", "drop everything now please", "cannot parse the query"),
    ("empty", "   ", "empty query"),
]
# One or two of each kind through `swarm sql` too (each run is a Python start-up, ~1 s of CPU).
THROUGH_THE_CLI = {
    "stacked statements",
    "read_csv",
    "glob",
    "copy to",
    "attach",
    "install",
    "set",
    "pragma",
    "call",
    "delete",
    "create",
    "a write in a SELECT",
    "empty",
}


@dataclass
class Ledger:
    """The module's running swarm, and the row counts every attack must leave as they are."""

    swarm: RunningSwarm
    settings: BusSettings
    counts: dict[str, int]


@pytest.fixture(scope="module")
def ledger_swarm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ledger]:
    root = tmp_path_factory.mktemp("attacks")
    (root / "swarm.toml").write_text(CONFIG)
    swarm = RunningSwarm(root / "ws", root / "swarm.toml")
    try:
        settings = swarm.wait_ready(60)
        # Every result names an idea the ladder knows (see test_fuzz_bus.py: a result for an
        # unknown idea stops the ladder).
        ideas, results = [make_idea(i) for i in range(100)], [make_result(i) for i in range(300)]
        asyncio.run(publish_all(swarm.workspace.read_bus_settings(Role.RESEARCHER), ideas))  # type: ignore[arg-type]
        asyncio.run(publish_all(swarm.workspace.read_bus_settings(Role.TRAINER), results))  # type: ignore[arg-type]
        yield Ledger(swarm, settings, asyncio.run(settled_counts(settings)))
    finally:
        output = swarm.stop()
    assert "exited with code" not in output, output[-3000:]  # the ledger never restarted


async def settled_counts(settings: BusSettings) -> dict[str, int]:
    """The row counts once the seed is in and the ladder has done what it does at start."""
    nc = await connect(settings, "test-counts")
    try:
        last: dict[str, int] = {}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            counts = await table_counts(nc)
            if counts == last and counts["runs"] == 300:
                return counts
            last = counts
            await asyncio.sleep(1.0)
        raise AssertionError(f"the ledger did not settle: {last}")
    finally:
        await nc.close()


async def table_counts(nc: Client) -> dict[str, int]:
    row = (await ask_ledger(nc, COUNTS, 10)).table.to_pylist()[0]
    return {name: int(n) for name, n in row.items()}


@pytest.fixture
async def bus(ledger_swarm: Ledger) -> AsyncIterator[Client]:
    nc = await connect(ledger_swarm.settings, "attacker")
    yield nc
    await intact_and_ingesting(nc, ledger_swarm)
    await nc.close()


async def intact_and_ingesting(nc: Client, ledger: Ledger) -> None:
    """Every table as it was; a new event still goes in (and becomes the new normal)."""
    assert await table_counts(nc) == ledger.counts
    setting = await ask_ledger(nc, "select current_setting('enable_external_access') as on", 10)
    assert setting.table.to_pylist() == [{"on": False}]
    trainer = ledger.swarm.workspace.read_bus_settings(Role.TRAINER)
    assert trainer is not None  # the attacker (`cli`) may not publish results: a trainer does
    await publish_all(trainer, [make_result(0, run_id=new_id("after-attack"))])

    async def ingested() -> bool:
        return (await table_counts(nc))["runs"] == ledger.counts["runs"] + 1

    await wait_for_async(ingested, 20, 0.2)
    ledger.counts = await table_counts(nc)


# --- over the bus -----------------------------------------------------------------------------


@pytest.mark.parametrize(("what", "sql", "reason"), ATTACKS, ids=[a[0] for a in ATTACKS])
async def test_attack_over_the_bus_is_refused(
    bus: Client, what: str, sql: str, reason: str
) -> None:
    with pytest.raises(SqlError, match=reason):
        await ask_ledger(bus, sql, 10)


async def test_long_queries_are_interrupted_and_the_ledger_keeps_serving(bus: Client) -> None:
    slow = [
        "select count(*) from range(1000000000000) t",
        "select count(*) from range(1000000) a, range(1000000) b",
        "select sum(hash(range)) from range(1000000000000) t",
    ]
    started = time.monotonic()
    # More at once than the ledger has reader threads: the last waits, then is interrupted too.
    outcomes = await asyncio.gather(
        *(ask_ledger(bus, sql, 30) for sql in slow), return_exceptions=True
    )
    elapsed = time.monotonic() - started
    for outcome in outcomes:
        assert isinstance(outcome, SqlError), outcome
        assert f"query interrupted after the {TIMEOUT_S:g}s time limit" in str(outcome)
    assert elapsed < 3 * TIMEOUT_S + 5  # two reader threads: at most two rounds of the limit
    answer = await ask_ledger(bus, "select count(*) as n from runs", 5)
    assert answer.table.to_pylist()[0]["n"] > 0


async def test_huge_results_are_cut_with_a_note(bus: Client) -> None:
    many = await ask_ledger(bus, "select * from range(1000000) t", 10)
    assert many.truncated and many.table.num_rows == ROW_CAP
    asked = await ask_ledger(bus, "select * from range(1000000) t", 10, max_rows=10)
    assert asked.truncated and asked.table.num_rows == 10
    # Rows that fit the row cap but not one bus message: cut to what fits.
    wide = await ask_ledger(bus, "select repeat('x', 200000) as x from range(100) t", 20)
    assert wide.truncated and 0 < wide.table.num_rows < 100
    # One row larger than a bus message: nothing fits, and the error says so.
    with pytest.raises(SqlError, match="one row of the result is larger than a bus message"):
        await ask_ledger(bus, f"select repeat('x', {MAX_PAYLOAD + 1}) as x", 20)


async def test_bad_request_bodies_get_a_clear_error(bus: Client) -> None:
    bodies = [
        (b"", "empty body"),
        (b'{"sql": "select 1"', "not JSON"),
        (b'{"sql": "select \xff"}', "not UTF-8"),
        (json.dumps({"sql": "select '\ud800'"}).encode(), "not Unicode text: a lone surrogate"),
        (b"[" * 100_000, "not JSON"),
        (json.dumps({"query": "select 1"}).encode(), "unknown keys 'query'"),
        (json.dumps({"sql": "select 1", "max_rows": True}).encode(), "max_rows must be"),
        # Just under the bus limit: a query of one huge name. The reason quotes a little of it.
        (json.dumps({"sql": "select " + "y" * (MAX_PAYLOAD - 1000)}).encode(), "Binder Error"),
    ]
    for body, reason in bodies:
        reply = await bus.request(SQL_SUBJECT, body, timeout=20)
        assert reply.headers is not None and reply.headers[STATUS] == "error", body[:80]
        assert reason in reply.data.decode(), (body[:80], reply.data[:300])
        assert len(reply.data) < 4096
    # Over the limit: the bus itself refuses it, before it is sent; the client says so.
    with pytest.raises(MaxPayloadError):
        await bus.request(SQL_SUBJECT, b"x" * (MAX_PAYLOAD + 1), timeout=5)
    with pytest.raises(SqlError, match="larger than a bus message"):
        await ask_ledger(bus, "select " + "y" * MAX_PAYLOAD, 5)


# --- through `swarm sql` ----------------------------------------------------------------------


def swarm_sql(root: Path, sql: str | bytes) -> subprocess.CompletedProcess[str]:
    command: list[str | bytes] = [*swarm_cmd(root, "sql"), sql]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


async def test_attacks_through_swarm_sql_are_refused(bus: Client, ledger_swarm: Ledger) -> None:
    root = ledger_swarm.swarm.workspace.root
    attacks = [
        *(a for a in ATTACKS if a[0] in THROUGH_THE_CLI),
        ("not UTF-8", b"select '\xff'", "the query is not Unicode text"),
        ("too long", "select count(*) from range(1000000000000) t", "interrupted after the 1s"),
    ]
    with ThreadPoolExecutor(4) as pool:  # each `swarm sql` is a Python start-up: a few at once
        done = list(pool.map(lambda attack: swarm_sql(root, attack[1]), attacks))
    wrong = [
        f"{what}: rc {out.returncode}, {out.stderr.strip()[-300:]!r} !~ {reason!r}"
        for (what, _, reason), out in zip(attacks, done, strict=True)
        if out.returncode != 2 or not _says(out.stderr, reason) or out.stdout
    ]
    assert not wrong, "\n".join(wrong)
    truncated = swarm_sql(root, "select * from range(1000000) t")
    assert truncated.returncode == 0, truncated.stderr
    assert f"({ROW_CAP} rows)" in truncated.stdout
    assert f"swarm: result truncated to {ROW_CAP} rows" in truncated.stderr


def _says(stderr: str, reason: str) -> bool:
    return stderr.startswith("swarm: error: ") and re.search(reason, stderr) is not None


def test_attacks_on_a_stopped_swarms_file_are_refused(tmp_path: Path) -> None:
    """With no swarm running, `swarm sql` reads the ledger file itself, behind the same gate."""
    root = tmp_path / "ws"
    root.mkdir()
    store = LedgerStore(root / "ledger.duckdb")
    store.write_batch([make_idea(1), *(make_result(i) for i in range(10))])
    store.close()
    attacks = [a for a in ATTACKS if a[0] in {"stacked statements", "read_csv", "delete"}]
    attacks.append(("not UTF-8", b"select '\xff'", "the query is not Unicode text"))  # type: ignore[arg-type]
    for what, sql, reason in attacks:
        out = swarm_sql(root, sql)
        assert out.returncode == 2 and _says(out.stderr, reason), (what, out.stderr)
    counted = run_swarm(root, "sql", "select count(*) as n from runs", "--format", "csv")
    assert counted.stdout.split() == ["n", "10"], counted.stderr
