"""Views over the ledger's tables, on a real DuckDB database with the ledger's schema."""

from __future__ import annotations

import duckdb
import pytest

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
