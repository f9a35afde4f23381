"""`swarm report` against a real DuckDB ledger: both files written, the page self-contained."""

from __future__ import annotations

import html
from pathlib import Path

import pytest

from bus.messages import (
    ChampionChange,
    ChangeKind,
    Decision,
    Idea,
    Message,
    RunResult,
    RunStatus,
    Verdict,
)
from ledger.duckdb_store import LedgerStore, open_database
from swarm.report import file_query, spearman, write_report

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
WINNER_PATCH = (
    "--- a/recipe.py\n+++ b/recipe.py\n@@ -1 +1 @@\n-WARMUP = 0\n+WARMUP = 100 # <fast>\n"
)
WINNER_HYPOTHESIS = "Warmup & a longer cosine tail help the small models"


def _idea(n: int, hypothesis: str, patch: str = "", version: int = 1) -> Idea:
    return Idea(f"idea-{n}", f"agent-{n % 2}", hypothesis, patch or f"patch {n}", version)


def _run(
    run: str, tier: int, version: int, metric: float | None, idea: str = "", t: float = 0.0
) -> RunResult:
    status = RunStatus.OK if metric is not None else RunStatus.CRASH
    return RunResult(
        run, tier, 0, version, status, idea_id=idea, metric=metric, finished_at=1000.0 + t
    )


def _ledger() -> list[Message]:
    ideas = [
        _idea(1, WINNER_HYPOTHESIS, WINNER_PATCH),
        _idea(2, "Larger batch"),
        _idea(3, "Tied embeddings"),
        _idea(4, "RMSNorm everywhere", version=2),
    ]
    runs: list[Message] = []
    t = 0.0
    # (tier, version, idea, metrics): baselines interleaved with idea runs.
    plan = [
        (0, 1, "", [2.00, 2.02]),
        (0, 1, "idea-1", [1.90, 1.92]),
        (0, 1, "idea-2", [1.95]),
        (0, 1, "idea-3", [2.05]),
        (1, 1, "", [1.80]),
        (1, 1, "idea-1", [1.70]),
        (1, 1, "idea-2", [1.75]),
        (1, 1, "idea-3", [1.85]),
        (0, 2, "", [1.91, 1.90]),
        (0, 2, "idea-4", [1.88]),
        (1, 2, "", [1.71]),
    ]
    for tier, version, idea, metrics in plan:
        for metric in metrics:
            t += 1
            runs.append(_run(f"run-{int(t):03d}", tier, version, metric, idea, t))
    runs.append(_run("run-crash", 1, 2, None, "idea-4", t + 1))
    decisions = [
        Decision("d-1", "idea-1", 0, Verdict.PROMOTE, 1, "welch"),
        Decision("d-2", "idea-3", 0, Verdict.REJECT, 1, "welch"),
        Decision("d-3", "idea-1", 1, Verdict.PROMOTE, 1, "welch"),
    ]
    champions = [
        ChampionChange(1, 0, ChangeKind.INITIAL, "sha-1", source="WARMUP = 0\n"),
        ChampionChange(
            2,
            1,
            ChangeKind.STACK,
            "sha-2",
            "idea-1",
            WINNER_PATCH,
            "passed tier 1",
            source="WARMUP = 100\n",
        ),
    ]
    return [*ideas, *runs, *decisions, *champions]


def _report(tmp_path: Path, messages: list[Message]) -> tuple[bytes, str]:
    path = tmp_path / "ledger.duckdb"
    store = LedgerStore(path)
    store.write_batch(messages)
    store.close()
    con = open_database(path, read_only=True)
    try:
        files = write_report(file_query(con), tmp_path / "report", title="test <swarm>")
    finally:
        con.close()
    assert files.png == tmp_path / "report" / "progress.png"
    assert files.html == tmp_path / "report" / "report.html"
    return files.png.read_bytes(), files.html.read_text(encoding="utf-8")


def test_report_from_a_ledger_file(tmp_path: Path) -> None:
    png, page = _report(tmp_path, _ledger())
    assert png.startswith(PNG_SIGNATURE) and len(png) > 1024
    assert "data:image/png;base64," in page
    assert html.escape(WINNER_HYPOTHESIS) in page and "idea-1 (→ v2)" in page
    assert html.escape("+WARMUP = 100 # <fast>") in page and "<fast>" not in page
    assert "test &lt;swarm&gt;" in page
    assert "0 → 1" in page and "+1.000" in page  # the three ideas rank alike on both tiers
    assert "CRASH" in page and "PROMOTE" in page
    assert "<script" not in page and "http://" not in page and "https://" not in page
    assert not list((tmp_path / "report").glob(".*.tmp"))


def test_empty_ledger_still_writes_both_files(tmp_path: Path) -> None:
    png, page = _report(tmp_path, [])
    assert png.startswith(PNG_SIGNATURE)
    assert "no successful idea runs yet" in page
    assert "no champion yet" in page and "Rank correlation" in page


def test_tier_with_only_failed_runs(tmp_path: Path) -> None:
    png, page = _report(tmp_path, [_run("run-x", 0, 1, None, "idea-9"), _run("run-y", 1, 1, 1.5)])
    assert png.startswith(PNG_SIGNATURE) and len(png) > 1024
    assert "n/a" in page  # a tier pair with no common ideas


@pytest.mark.parametrize(
    ("xs", "ys", "expected"),
    [
        ([1, 2, 3, 4], [10, 20, 30, 40], 1.0),
        ([1, 2, 3, 4], [4, 3, 2, 1], -1.0),
        ([1, 2, 3], [1, 5, 100], 1.0),  # monotone, not linear
        ([1, 2, 2, 3], [1, 2, 3, 4], 0.9486832980505138),  # ties get averaged ranks
        ([1, 2, 3, 4, 5], [5, 6, 7, 8, 7], 0.8207826816681233),
    ],
)
def test_spearman(xs: list[float], ys: list[float], expected: float) -> None:
    assert spearman(xs, ys) == pytest.approx(expected)


def test_spearman_is_undefined_for_few_or_constant_values() -> None:
    assert spearman([1, 2], [2, 1]) is None
    assert spearman([], []) is None
    assert spearman([1, 1, 1], [1, 2, 3]) is None
    with pytest.raises(ValueError, match="pairs"):
        spearman([1, 2, 3], [1, 2])


def test_a_diverged_run_does_not_flatten_the_panel() -> None:
    """A newcomer's recipe that diverged to 8e150 (status OK) put every other point flat on
    zero: the axis keeps to where the runs are, and says how many it left out."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    from swarm.report_plot import _clip_outliers

    ax = Figure().add_subplot()
    runs = [0.10, 0.12, 0.09, 0.11, 0.15, 8.2e150]
    ax.scatter(range(len(runs)), runs)
    _clip_outliers(ax, runs, shown=[0.10, 0.12])
    low, high = ax.get_ylim()
    assert low < 0.09 and 0.15 < high < 1.0
    assert [t.get_text() for t in ax.texts] == ["1 run beyond the axis"]
