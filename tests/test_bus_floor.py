"""bench/bus_floor.py runs end to end on a real nats-server and prints every step's cost (the
figures themselves are never asserted)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_bus_floor_measures_every_step_and_prints_a_floor() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench/bus_floor.py"), "--messages", "300"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert done.returncode == 0, done.stderr
    steps = re.findall(r"^  (publish|replay|ledger|job put|job take) .*?([\d.]+) +([\d.]+)$",
                       done.stdout, re.MULTILINE)  # fmt: skip
    assert [s[0] for s in steps] == ["publish", "replay", "ledger", "job put", "job take"]
    assert all(float(client) > 0 for _, client, _ in steps)
    assert re.search(r"floor: at most [\d,]+ runs/s on \d+ cores", done.stdout)
