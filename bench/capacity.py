"""Orchestration capacity: how many runs per second the swarm's own machinery decides.

Runs a real swarm (`swarm start`: embedded nats-server, ledger, ladder, trainers, researcher
agents) on the synthetic target, whose experiments cost nothing, so every second spent is the
bus, the ladder, the ledger and the agents. Then reads the ledger it left:

- runs/s: RunResults finished per second over the steady window (after the warm-up);
- decisions/s: ladder verdicts per second over the same window;
- dispatch latency: a RunSpec made by the ladder → picked up by a trainer (p50, p99);
- ledger lag: a RunResult finished → committed to DuckDB (p50, p99);
- the trainers' share of the window spent inside experiments (here: almost none, by design).

    python bench/capacity.py --agents 100 --seconds 60
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parents[1]
SWARM = Path(sys.executable).parent / "swarm"


def steady_config(folder: Path) -> Path:
    """The shipped ladder with approval required: top-tier winners are held, not stacked, so
    the champion stays put, as it does for long stretches of a real swarm."""
    ladder = folder / "ladder.toml"
    ladder.write_text("require_approval = true\n" + _without_approval(ROOT / "configs/ladder.toml"))
    config = folder / "swarm.toml"
    config.write_text(f'[ladder]\npath = "{ladder}"\n')
    return config


def _without_approval(path: Path) -> str:
    lines = path.read_text().splitlines()
    return "\n".join(line for line in lines if not line.startswith("require_approval")) + "\n"


def run_swarm(
    workspace: Path, agents: int, seconds: float, trainers: int, config: Path | None, brain: str
) -> float:
    """Run the swarm for `seconds`; the wall time `swarm start` took, stop included."""
    command = [str(SWARM), "--workspace", str(workspace)]
    command += ["--config", str(config)] if config else []
    command += [
        "start",
        "--target",
        "synthetic",
        "--agents",
        str(agents),
        "--brain",
        brain,
        "--minutes",
        f"{seconds / 60:.4f}",
    ]
    if trainers:
        command += ["--trainers", str(trainers)]
    started = time.monotonic()
    log = workspace.parent / "swarm-start.log"
    with open(log, "w") as out:
        code = subprocess.call(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    if code != 0:
        sys.exit(f"swarm start failed ({code}); see {log}")
    return time.monotonic() - started


FIGURES = """
with bounds as (
    select min(started_at) + to_microseconds(cast(? * 1e6 as bigint)) as t0,
           max(finished_at) as t1
    from runs
),
steady as (select * from runs, bounds where finished_at between t0 and t1)
select
    (select count(*) from steady) / (select epoch(t1 - t0) from bounds) as runs_per_s,
    (select count(*) from steady where status = 'OK') / (select epoch(t1 - t0) from bounds),
    (select count(*) from decisions, bounds where created_at between t0 and t1)
        / (select epoch(t1 - t0) from bounds) as decisions_per_s,
    (select quantile_cont(epoch(r.started_at - s.created_at), [0.5, 0.99])
        from steady r join run_specs s using (run_id)) as dispatch_s,
    (select quantile_cont(epoch(ingested_at - finished_at), [0.5, 0.99]) from steady) as lag_s,
    (select sum(train_seconds) from steady) / (select epoch(t1 - t0) from bounds) as busy,
    (select count(*) from runs) as runs,
    (select count(*) from ideas) as ideas,
    (select max(version) from champions) as champion,
    (select epoch(t1 - t0) from bounds) as window_s
"""


def figures(ledger: Path, warmup_s: float) -> dict[str, float]:
    con = duckdb.connect(str(ledger), read_only=True)
    try:
        row = con.execute(FIGURES, [warmup_s]).fetchone()
    finally:
        con.close()
    assert row is not None
    runs_s, ok_s, dec_s, dispatch, lag, busy, runs, ideas, champion, window = row
    return {
        "runs/s": runs_s,
        "ok runs/s": ok_s,
        "decisions/s": dec_s,
        "dispatch p50 ms": dispatch[0] * 1e3,
        "dispatch p99 ms": dispatch[1] * 1e3,
        "ledger lag p50 ms": lag[0] * 1e3,
        "ledger lag p99 ms": lag[1] * 1e3,
        "trainer time in experiments": busy,
        "runs": runs,
        "ideas": ideas,
        "champion version": champion,
        "window s": window,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--warmup", type=float, default=10.0, help="seconds left out at start")
    parser.add_argument("--trainers", type=int, default=0, help="0: one per core")
    parser.add_argument(
        "--brain",
        default="heuristic",
        help="researchers' brain; heuristic (the default here) keeps the figures comparable with "
        "earlier sessions and measures the machinery, not a model's cost per proposal",
    )
    parser.add_argument("--keep", type=Path, help="keep the workspace here")
    parser.add_argument(
        "--steady", action="store_true", help="hold top-tier winners: the champion never moves"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="swarm-capacity-") as tmp:
        workspace = args.keep or Path(tmp) / "ws"
        workspace.parent.mkdir(parents=True, exist_ok=True)
        config = steady_config(Path(tmp)) if args.steady else None
        wall = run_swarm(workspace, args.agents, args.seconds, args.trainers, config, args.brain)
        found = figures(workspace / "ledger.duckdb", args.warmup)
    print(
        f"capacity{' (steady champion)' if args.steady else ''}: {args.agents} agents, "
        f"{args.trainers or os.cpu_count()} trainers, "
        f"{args.seconds:g} s (swarm start took {wall:.0f} s), {os.cpu_count()} cores"
    )
    for name, value in found.items():
        print(
            f"  {name:30s} {value:12.3f}"
            if isinstance(value, float)
            else f"  {name:30s} {value:12}"
        )


if __name__ == "__main__":
    main()
