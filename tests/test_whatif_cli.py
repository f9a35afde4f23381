"""`swarm whatif` and `swarm calibrate` on a real swarm's workspace (issue 19, items 2 and 3):
a synthetic swarm runs, stops, and both commands answer from its ledger as a user runs them."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from ledger.duckdb_store import open_database
from scale_ladder.tiers import DEFAULT_LADDER, load_ladder
from swarm.report_data import file_query, load
from tests.conftest import run_swarm


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    ws = tmp_path_factory.mktemp("whatif") / "ws"
    common = ("start", "--target", "synthetic", "--agents", "4", "--minutes", "1.5")
    done = run_swarm(ws, *common, "--max-experiments", "240", timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    yield ws


def _same(out: str) -> tuple[int, int]:
    found = re.search(r"(\d+) of (\d+) recorded verdicts the same", out)
    assert found, out
    return int(found[1]), int(found[2])


def test_whatif_replays_the_recorded_settings_and_sweeps_others(
    workspace: Path, tmp_path: Path
) -> None:
    out = tmp_path / "whatif.parquet"
    done = run_swarm(workspace, "whatif", "--sweep", "sigmas=2,3", "--out", str(out), timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    same, decided = _same(done.stdout)
    assert decided > 10 and same == decided, done.stdout  # the replay is the record
    for label in ("ladder.toml with sigmas=2", "ladder.toml with sigmas=3", "== side by side"):
        assert label in done.stdout
    rows = duckdb.sql(
        "select setting, sum(recorded) filter (where kind = 'tier') as recorded, "
        "count(*) filter (where kind = 'changed') as changed "
        f"from read_parquet('{out}') group by setting order by setting"
    ).fetchall()
    assert [r[0] for r in rows] == ["ladder.toml with sigmas=2", "ladder.toml with sigmas=3"]
    assert rows[0][1] == rows[1][1] > 0  # the record is the same for both
    assert rows[0][2] == 0  # sigmas=2 is the swarm's own setting: nothing changes


def test_a_ladder_that_changes_what_a_run_is_is_refused_by_name(
    workspace: Path, tmp_path: Path
) -> None:
    text = DEFAULT_LADDER.read_text()
    other = tmp_path / "other.toml"
    other.write_text(text.replace("budget = 600000", "budget = 300000", 1))
    done = run_swarm(workspace, "whatif", "--ladder", str(other))
    assert done.returncode == 2
    assert "tier 0 (t0) has another budget" in done.stderr
    bad = run_swarm(workspace, "whatif", "--sweep", "sigma=1,2")
    assert bad.returncode == 2 and "KEY one of" in bad.stderr


def test_calibrate_writes_a_ladder_file_that_loads_and_checks_it(
    workspace: Path, tmp_path: Path
) -> None:
    out = tmp_path / "calibrated.toml"
    done = run_swarm(workspace, "calibrate", "--out", str(out), timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    proposed = load_ladder(out, "synthetic")
    assert len(proposed.tiers) == 3
    assert "σ_d" in done.stdout and "checked against the recorded history" in done.stdout
    assert "# calibrated (swarm calibrate)" in out.read_text()
    assert "# The scale ladder" in out.read_text()  # the file's own comments are kept
    _same(done.stdout)


def test_outputs_never_overwrite_what_the_swarm_keeps(workspace: Path, tmp_path: Path) -> None:
    ladder = workspace / "run" / "ladder.toml"  # the ladder as it ran, copied at start
    assert ladder.read_text() == DEFAULT_LADDER.read_text()
    mine = tmp_path / "mine.toml"
    mine.write_text("[ladder]\n")
    for args, says in [
        (("whatif", "--sweep", "sigmas=2", "--out", str(workspace / "w.parquet")), "inside"),
        (
            ("whatif", "--sweep", "sigmas=2", "--out", str(tmp_path / "no" / "w.parquet")),
            "no folder",
        ),
        (("whatif", "--sweep", "sigmas=2", "--out", str(tmp_path / "w.csv")), ".parquet file"),
        (("calibrate", "--out", str(mine)), "no proposal of swarm calibrate"),
        (("calibrate", "--out", str(workspace / "ledger.toml")), "inside"),
    ]:
        done = run_swarm(workspace, *args)
        assert done.returncode == 2 and says in done.stderr, (args, done.stderr)
    assert mine.read_text() == "[ladder]\n"


def test_the_progress_plot_has_a_level_for_every_champion_at_every_tier(workspace: Path) -> None:
    """A stacked idea's runs are the new champion's at the tiers it ran on, so a version may
    have no baseline run of its own there: the plot's level must come from them too (it stayed
    at v1 on tiers 0 and 1 while the champion moved on)."""
    con = open_database(workspace / "ledger.duckdb", read_only=True)
    try:
        data = load(file_query(con))
        versions = {r[0] for r in con.execute("select version from champions").fetchall()}
    finally:
        con.close()
    for tier in {run.tier for run in data.runs}:
        ran = {r.champion_version for r in data.runs if r.tier == tier}
        assert ran <= {v for (t, v) in data.levels if t == tier} <= versions


def test_no_swarm_here_is_said_before_anything_starts(tmp_path: Path) -> None:
    for args in (("web",), ("whatif", "--sweep", "sigmas=2"), ("calibrate",)):
        done = run_swarm(tmp_path / "nothing", *args)
        assert done.returncode == 2 and "no swarm has run" in done.stderr, (args, done.stderr)
