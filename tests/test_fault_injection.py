"""kill -9 at random moments: a trainer, the ledger, the ladder, the agents host, the embedded
nats-server and the whole `swarm start`, each restarted or resumed. Afterwards the audit finds
every RunSpec with exactly one RunResult, nothing duplicated, the champion's lineage whole and
the ladder's state equal to a replay of the ledger. (The long form: `python bench/faults.py`.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.faults import VICTIMS, run_faults


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "seconds",
    [8, pytest.param(25, marks=pytest.mark.slow)],  # each kind once; the long form: more of each
)
def test_kill_9_anything_loses_and_duplicates_nothing(tmp_path: Path, seconds: float) -> None:
    report = run_faults(tmp_path, seconds=seconds, seed=7, every=(1.0, 2.5))
    print(report.line())
    print(report.audit_output)
    assert set(report.faults) == set(VICTIMS), report.line()  # every kind of fault, at least once
    assert report.audit_code == 0, report.audit_output
    counts = report.audit_output.splitlines()[0]
    assert "unfinished 0" in counts and "duplicated 0" in counts and "orphans 0" in counts
    specs = int(counts.split()[1])
    assert specs >= 10 + seconds, counts  # the swarm did real work between the faults
