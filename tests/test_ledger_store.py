"""Batches commit idempotently; rows that cannot be stored become dead letters."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import duckdb
import pyarrow.parquet as pq

from bus.messages import (
    AgentEvent,
    AgentEventKind,
    ChampionChange,
    ChangeKind,
    Decision,
    RunStatus,
    Verdict,
)
from ledger.duckdb_store import LedgerStore
from tests.conftest import make_idea, make_result


def test_redelivered_batch_adds_no_rows(tmp_path: Path) -> None:
    store = LedgerStore(tmp_path / "l.duckdb")
    batch = [make_result(i) for i in range(100)] + [make_idea(i) for i in range(10)]
    store.write_batch(batch)
    store.write_batch(batch)  # redelivery of the whole batch
    store.write_batch(batch[:10] + batch[:10])  # duplicates inside one batch
    assert store.count("runs") == 100
    assert store.count("ideas") == 10
    store.close()


def test_first_copy_of_an_event_wins(tmp_path: Path) -> None:
    store = LedgerStore(tmp_path / "l.duckdb")
    first = make_result(1, metric=1.5)
    store.write_batch([first, dataclasses.replace(first, metric=9.9)])
    store.write_batch([dataclasses.replace(first, metric=7.7)])
    row = store.con.execute("select metric from runs").fetchall()
    assert row == [(1.5,)]
    store.close()


def test_unstorable_row_becomes_dead_letter_and_the_rest_commit(tmp_path: Path) -> None:
    store = LedgerStore(tmp_path / "l.duckdb")
    bad = make_result(5, steps=2**70)  # valid JSON int, too big for BIGINT
    refused = store.write_batch([make_result(1), bad, make_result(2)])
    assert [r.dead_letter_id for r in refused] == ["dl-ledger-run_result-result-run-0000005"]
    assert store.count("runs") == 2
    reason, raw = store.con.execute("select reason, raw from dead_letters").fetchall()[0]
    assert reason.startswith("cannot store") and "run-0000005" in raw
    store.close()


def test_data_survives_reopen_and_views_answer(tmp_path: Path) -> None:
    path = tmp_path / "l.duckdb"
    store = LedgerStore(path)
    store.write_batch(
        [
            make_idea(1),
            make_result(1, tier=0),
            make_result(101, tier=0, idea_id="idea-001"),
            ChampionChange(version=1, parent_version=0, kind=ChangeKind.INITIAL, recipe_sha="abc"),
            AgentEvent("ev-1", "agent-0", AgentEventKind.JOINED, role="researcher"),
            AgentEvent("ev-2", "agent-0", AgentEventKind.HEARTBEAT),
        ]
    )
    store.close()
    store = LedgerStore(path)  # schema creation is idempotent on an existing file
    con = store.con
    board = con.execute("select idea_id, n_runs from leaderboard").fetchall()
    assert ("idea-001", 2) in board
    assert con.execute("select version, kind from lineage").fetchall() == [(1, "INITIAL")]
    assert con.execute("select agent_id, role, events, last_event from agents").fetchall() == [
        ("agent-0", "researcher", 2, "HEARTBEAT")
    ]
    store.close()


def test_snapshots_are_parquet_copies_of_changed_tables(tmp_path: Path) -> None:
    store = LedgerStore(tmp_path / "l.duckdb")
    store.write_batch([make_result(i) for i in range(20)])
    written = store.snapshot(tmp_path / "snap")
    assert "runs" in written
    assert pq.read_table(tmp_path / "snap" / "runs.parquet").num_rows == 20
    assert store.snapshot(tmp_path / "snap") == []  # nothing changed since
    store.write_batch([make_result(99)])
    assert store.snapshot(tmp_path / "snap") == ["runs"]
    store.close()
    # The ledger is a normal DuckDB file any client can open once the writer is gone.
    assert duckdb.connect(str(tmp_path / "l.duckdb")).sql("select count(*) from runs").fetchall()


LEADERBOARD_FROM_RUNS = """
    SELECT tier, champion_version, idea_id, avg(metric), stddev_samp(metric), min(metric), count(*)
    FROM runs WHERE status = 'OK' AND metric IS NOT NULL GROUP BY ALL ORDER BY ALL"""
LEADERBOARD_VIEW = """
    SELECT tier, champion_version, CASE WHEN idea_id = '(champion)' THEN '' ELSE idea_id END,
           mean_metric, std_metric, best_metric, n_runs
    FROM leaderboard ORDER BY ALL"""


def _close(a: list[tuple[object, ...]], b: list[tuple[object, ...]]) -> bool:
    def same(x: object, y: object) -> bool:
        if isinstance(x, float) and isinstance(y, float):
            return abs(x - y) < 1e-9
        return x == y

    return len(a) == len(b) and all(
        all(same(x, y) for x, y in zip(ra, rb, strict=True)) for ra, rb in zip(a, b, strict=True)
    )


def test_leaderboard_totals_equal_a_full_recount_despite_redelivery(tmp_path: Path) -> None:
    store = LedgerStore(tmp_path / "l.duckdb")
    results = [
        make_result(i, status=RunStatus.OK if i % 7 else RunStatus.CRASH, idea_id=f"i{i % 4}")
        for i in range(300)
    ]
    results += [make_result(1000 + i, idea_id="") for i in range(5)]  # champion baselines
    for start in range(0, 300, 40):
        store.write_batch(results[start : start + 60])  # overlapping: every batch redelivers some
    store.write_batch(results)
    expected = store.con.execute(LEADERBOARD_FROM_RUNS).fetchall()
    assert _close(store.con.execute(LEADERBOARD_VIEW).fetchall(), expected)
    # run_stats is derived data: dropped, it is rebuilt from runs at the next open.
    store.con.execute("DELETE FROM run_stats")
    store.close()
    store = LedgerStore(tmp_path / "l.duckdb")
    assert _close(store.con.execute(LEADERBOARD_VIEW).fetchall(), expected)
    store.close()


def test_a_ledger_from_an_older_release_gains_the_new_columns(tmp_path: Path) -> None:
    """Decisions now say what they cost (`runs`) and champion changes how many runs they kept
    (`carried_runs`); a ledger written before them is migrated in place, its rows kept."""
    path = tmp_path / "l.duckdb"
    store = LedgerStore(path)
    store.write_batch([make_idea(1)])
    store.con.execute("ALTER TABLE decisions DROP COLUMN runs")
    store.con.execute("ALTER TABLE champions DROP COLUMN carried_runs")
    store.close()
    store = LedgerStore(path)  # as the next release starts on the old workspace
    stack = ChampionChange(2, 1, ChangeKind.STACK, "sha", idea_id="idea-1", carried_runs=4)
    decision = Decision("dec-1", "idea-1", 0, Verdict.REJECT, 1, "behind", delta=-0.1, runs=1)
    store.write_batch([stack, decision])
    assert store.count("ideas") == 1
    assert store.con.execute("select runs from decisions").fetchall() == [(1,)]
    assert store.con.execute("select carried_runs from champions").fetchall() == [(4,)]
    store.close()
