"""The exit summary's champion line: its gain is positive when the champion got better,
whichever way the metric points (as in the decisions and the report); and the runs a stop left
unfinished."""

from __future__ import annotations

from pathlib import Path

from bus.messages import BudgetKind, RunResult, RunSpec, RunStatus
from ledger.duckdb_store import LedgerStore
from swarm.config import SwarmConfig
from swarm.summary import champion_moves, summary_text
from swarm.workspace import Workspace


def baselines(first: list[float], last: list[float]) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for version, metrics in ((1, first), (2, last)):
        rows += [
            {"tier": 0, "version": version, "seed": s, "metric": m} for s, m in enumerate(metrics)
        ]
    return rows


def test_a_lower_metric_that_fell_is_a_positive_gain() -> None:
    (line,) = champion_moves(baselines([3.0, 3.2], [2.0, 2.4]), {})
    assert line.startswith("tier 0 champion: v1 3.1000 -> v2 2.2000 (gain +0.9000")


def test_a_higher_metric_that_rose_is_a_positive_gain() -> None:
    (line,) = champion_moves(baselines([0.5, 0.6], [0.7, 0.9]), {}, lower_is_better=False)
    assert line.startswith("tier 0 champion: v1 0.5500 -> v2 0.8000 (gain +0.2500")
    (worse,) = champion_moves(baselines([0.7, 0.9], [0.5, 0.6]), {}, lower_is_better=False)
    assert "-> v2 0.5500 (gain -0.2500" in worse


def test_champions_measured_on_different_seeds_show_both_means_unpaired() -> None:
    """v1's first seeds failed for good (a broken start), so v1 and v2 share no seed: the line
    said "no change measured" and showed v2 alone, which read as nothing found (a newcomer)."""
    rows = baselines([0.12, 0.08], [])
    rows += [{"tier": 0, "version": 2, "seed": s, "metric": m} for s, m in ((5, 0.01), (6, 0.02))]
    (line,) = champion_moves(rows, {})
    assert line.startswith("tier 0 champion: v1 0.1000 -> v2 0.0150 (means over different seeds")


def test_the_summary_names_the_runs_a_stop_left_unfinished(tmp_path: Path) -> None:
    """Runs cut short at the stop, or waiting their turn (a capped tier's wait in the ladder),
    are in the ledger with no result: the summary says how many, and where."""
    workspace = Workspace(tmp_path / "ws")
    workspace.create()
    specs = [
        RunSpec(f"run-{t}-{s}", t, s, 1, BudgetKind.TOKENS, 1000.0)
        for t, s in ((0, 1), (0, 2), (2, 1))
    ]
    done = RunResult(specs[0].run_id, 0, 1, 1, RunStatus.OK, metric=3.0)
    store = LedgerStore(workspace.ledger_path)
    try:
        store.write_batch([*specs, done])
    finally:
        store.close()
    text = summary_text(SwarmConfig(), workspace)
    assert "experiments run: 1 (OK 1)" in text
    assert "unfinished at the stop: 2 (tier 0 1, tier 2 1)" in text
