"""Views over the ledger's tables, on a real DuckDB database with the ledger's schema."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from bus.messages import (
    BudgetKind,
    ChampionChange,
    ChangeKind,
    Message,
    RunResult,
    RunSpec,
    RunStatus,
)
from ledger.duckdb_store import LedgerStore
from ledger.schema import ddl


def test_rank_correlation_compares_gains_over_the_baseline_between_adjacent_tiers() -> None:
    con = duckdb.connect()
    for statement in ddl():
        con.execute(statement)
    # Baselines: 2.0 at both tiers of champion v1, 3.0 at tier 0 of v2.
    con.execute(
        "INSERT INTO run_stats VALUES (0, 1, '', 'm', 2, 4.0, 8.0, 2.0), "
        "(1, 1, '', 'm', 2, 4.0, 8.0, 2.0), (0, 2, '', 'm', 1, 3.0, 9.0, 3.0)"
    )
    ideas = [(1.9, 1.8), (1.95, 1.9), (2.1, 2.2), (1.8, 1.7)]  # same order at both tiers
    for i, (low, high) in enumerate(ideas):
        con.execute(
            f"INSERT INTO run_stats VALUES (0, 1, 'i{i}', 'm', 1, {low}, 0, {low}), "
            f"(1, 1, 'i{i}', 'm', 1, {high}, 0, {high})"
        )
    con.execute("INSERT INTO run_stats VALUES (0, 2, 'only-low', 'm', 1, 2.5, 0, 2.5)")
    (row,) = con.execute("SELECT * FROM rank_correlation").fetchall()
    assert row[:3] == (0, 1, 4) and row[3] == pytest.approx(1.0)


def test_rank_correlation_is_null_below_three_ideas() -> None:
    con = duckdb.connect()
    for statement in ddl():
        con.execute(statement)
    con.execute(
        "INSERT INTO run_stats VALUES (0, 1, '', 'm', 1, 2.0, 4.0, 2.0), "
        "(1, 1, '', 'm', 1, 2.0, 4.0, 2.0), (0, 1, 'a', 'm', 1, 1.9, 0, 1.9), "
        "(1, 1, 'a', 'm', 1, 1.8, 0, 1.8)"
    )
    assert con.execute("SELECT ideas, spearman FROM rank_correlation").fetchall() == [(1, None)]


def test_a_stacked_ideas_token_tier_runs_count_as_the_new_champions_baseline(
    tmp_path: Path,
) -> None:
    """The ladder keeps them instead of running v2 again; the views show them as v2's."""
    store = LedgerStore(tmp_path / "l.duckdb")
    messages: list[Message] = []
    for tier, kind in ((0, BudgetKind.TOKENS), (1, BudgetKind.SECONDS)):
        for seed in (0, 1):
            run_id = f"run-good-t{tier}-s{seed}"
            spec = RunSpec(run_id, tier, seed, 1, kind, 100.0, idea_id="idea-good")
            result = RunResult(
                run_id, tier, seed, 1, RunStatus.OK, idea_id="idea-good", metric=2.0 + seed
            )
            messages += [spec, result]
    messages.append(
        ChampionChange(2, 1, ChangeKind.STACK, "sha", idea_id="idea-good", carried_runs=2)
    )
    # A stack by the previous release ran its baseline again (carried_runs 0 or NULL): its
    # idea's runs are not added to the champion's.
    old = RunSpec("run-old", 0, 0, 2, BudgetKind.TOKENS, 100.0, idea_id="idea-old")
    messages += [old, RunResult("run-old", 0, 0, 2, RunStatus.OK, idea_id="idea-old", metric=1.0)]
    messages.append(ChampionChange(3, 2, ChangeKind.STACK, "sha", idea_id="idea-old"))
    store.write_batch(messages)
    rows = store.con.execute(
        "SELECT tier, champion_version, seed, carried FROM champion_runs ORDER BY ALL"
    ).fetchall()
    # The seconds tier is run again; v3's stack (an older release's) carried nothing.
    assert rows == [(0, 2, 0, True), (0, 2, 1, True)]
    board = store.con.execute(
        "SELECT tier, mean_metric, n_runs FROM leaderboard "
        "WHERE champion_version = 2 AND idea_id = '(champion)'"
    ).fetchall()
    assert board == [(0, 2.5, 2)]
    store.close()


def test_runs_kept_from_before_the_parent_count_for_the_champion_they_became(
    tmp_path: Path,
) -> None:
    """An idea proposed on v1 that v2's stack left unchanged keeps its v1 runs (the same
    recipe on the same seeds); stacked as v3, those runs are v3's baseline, so the views show
    them as v3's though they ran on v1, not on v3's parent (found in a real swarm: ideas ran on
    v3 at tier 0 and the progress plot had no level for it)."""
    store = LedgerStore(tmp_path / "l.duckdb")
    messages: list[Message] = []
    for seed in (0, 1):
        run_id = f"run-kept-s{seed}"
        messages += [
            RunSpec(run_id, 0, seed, 1, BudgetKind.TOKENS, 100.0, idea_id="kept", recipe_sha="x"),
            RunResult(run_id, 0, seed, 1, RunStatus.OK, idea_id="kept", metric=2.0 + seed),
        ]
    other = RunSpec("run-other", 0, 5, 1, BudgetKind.TOKENS, 100.0, idea_id="other", recipe_sha="o")
    messages += [
        other,
        RunResult("run-other", 0, 5, 1, RunStatus.OK, idea_id="other", metric=1.0),
        ChampionChange(2, 1, ChangeKind.STACK, "o", idea_id="other", carried_runs=1),
        ChampionChange(3, 2, ChangeKind.STACK, "x", idea_id="kept", carried_runs=2),
    ]
    store.write_batch(messages)
    rows = store.con.execute(
        "SELECT champion_version, seed, carried FROM champion_runs ORDER BY ALL"
    ).fetchall()
    assert rows == [(2, 5, True), (3, 0, True), (3, 1, True)]
    board = store.con.execute(
        "SELECT champion_version, mean_metric, n_runs FROM leaderboard "
        "WHERE idea_id = '(champion)' ORDER BY ALL"
    ).fetchall()
    assert board == [(2, 1.0, 1), (3, 2.5, 2)]
    store.close()
