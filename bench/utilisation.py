"""Trainer utilisation with real experiments: a default swarm (bytelm, real torch runs) for N
minutes, then its figures: busy fraction of the trainers, idle gaps between a trainer's runs.

    python bench/utilisation.py --minutes 10 --workspace /tmp/swarm-util
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SWARM = Path(sys.executable).parent / "swarm"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--workspace", type=Path, required=True, help="a fresh folder")
    args = parser.parse_args()
    if (args.workspace / "ledger.duckdb").exists():
        sys.exit(f"{args.workspace} already holds a swarm: give a fresh folder")
    log = args.workspace.parent / f"{args.workspace.name}-start.log"
    args.workspace.parent.mkdir(parents=True, exist_ok=True)
    command = [str(SWARM), "--workspace", str(args.workspace), "start"]
    command += ["--agents", str(args.agents), "--minutes", f"{args.minutes:g}"]
    with open(log, "w") as out:
        if subprocess.call(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT) != 0:
            sys.exit(f"swarm start failed; see {log}")
    print(f"utilisation: {args.agents} agents, {args.minutes:g} min, default ladder and target")
    subprocess.check_call(
        [sys.executable, str(ROOT / "bench" / "swarm_figures.py"), str(args.workspace)]
    )


if __name__ == "__main__":
    main()
