"""Figures of a finished swarm run, from its ledger: what the README's half-hour run reports.

    swarm start --agents 4 --minutes 30 --workspace /tmp/ws30
    python bench/swarm_figures.py /tmp/ws30

Prints experiments per hour, the trainers' busy fraction (seconds inside experiments over
trainers × wall time, from each result's start and finish), idle gaps between a trainer's runs,
verdicts per tier, and the champion's change at each tier against its noise band.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ledger.duckdb_store import open_database  # noqa: E402
from swarm.summary import BASELINES_SQL, SIGMA_SQL, champion_moves  # noqa: E402

RUNS = """SELECT trainer, epoch(started_at) AS start, epoch(finished_at) AS finish, status
    FROM runs WHERE started_at IS NOT NULL ORDER BY trainer, start"""
VERDICTS = "SELECT tier, verdict, count(*) AS n FROM decisions GROUP BY ALL ORDER BY ALL"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workspace", type=Path)
    args = parser.parse_args()
    con = open_database(args.workspace / "ledger.duckdb", read_only=True)
    runs = con.execute(RUNS).fetchall()
    if not runs:
        print("no runs in this ledger")
        return
    first, last = min(r[1] for r in runs), max(r[2] for r in runs)
    wall = last - first
    trainers = sorted({r[0] for r in runs})
    busy = sum(r[2] - r[1] for r in runs)
    gaps: list[float] = []
    for trainer in trainers:
        mine = [r for r in runs if r[0] == trainer]
        gaps += [b[1] - a[2] for a, b in itertools.pairwise(mine)]
    print(f"runs: {len(runs)} over {wall / 60:.1f} min on {len(trainers)} trainers")
    print(f"experiments per hour: {len(runs) / wall * 3600:.0f}")
    print(f"trainer busy fraction: {busy / (len(trainers) * wall):.1%}")
    if gaps:
        gaps.sort()
        p95 = gaps[min(len(gaps) - 1, int(0.95 * len(gaps)))]
        print(f"idle gap between runs: median {statistics.median(gaps):.2f} s, p95 {p95:.2f} s")
    for tier, verdict, n in con.execute(VERDICTS).fetchall():
        print(f"tier {tier}: {verdict} {n}")
    columns = ["tier", "version", "seed", "metric"]
    baselines = [dict(zip(columns, r, strict=True)) for r in con.execute(BASELINES_SQL).fetchall()]
    sigmas = {int(t): float(s) for t, s in con.execute(SIGMA_SQL).fetchall()}
    for line in champion_moves(baselines, sigmas):
        print(line)


if __name__ == "__main__":
    main()
