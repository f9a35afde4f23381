"""/proc/stat is out of an experiment's reach, and it still counts the machine's CPUs.

The file's `processes` line counts every process and thread the machine ever started, so a
process that starts N threads can say N to whichever process reads it next: a red team's
channel between evaluation processes (docs/reliability.md, the fourth red team). Nothing a run
needs reads it: glibc counts CPUs from /sys/devices/system/cpu/online, which stays granted.
Both stages are checked in one real sandboxed run through the real trainer."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bus.messages import RunStatus
from tests.training_helpers import CHAMPION, patch_for, run
from training.corpus import Corpus
from training.sandbox import landlock_abi

pytestmark = pytest.mark.skipif(landlock_abi() < 1, reason="the grant is Landlock's")

# Run first in train(): says whether /proc/stat opens and how many CPUs the process sees.
PROBE = """    import os

    def probe():
        try:
            open("/proc/stat").close()
            stat = "readable"
        except OSError as exc:
            stat = f"{type(exc).__name__} {exc.errno}"
        return f"PROC_STAT {stat} CPUS {os.cpu_count()} {len(os.sched_getaffinity(0))}"

    print(probe(), flush=True)
"""
# The trained model probes again in the evaluation process as it is loaded, and fails there so
# that what it found is the run's reason (a load error is the one thing of it that is kept).
PROBES_WHEN_LOADED = """    class Prober(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def __setstate__(self, state):
            raise ValueError(probe())

        def forward(self, x):
            return self.model(x)

    return Prober()
"""
RECIPE = CHAMPION.replace("def train(ctx):\n", "def train(ctx):\n" + PROBE, 1).replace(
    "    return model\n", PROBES_WHEN_LOADED, 1
)


def test_neither_stage_reads_proc_stat_and_both_count_the_cpus(
    corpus: Corpus, tmp_path: Path
) -> None:
    result = run(corpus, tmp_path, patch_for(RECIPE), seed=7)
    # EACCES from Landlock; the CPU count is the unconfined one, read from what is granted.
    expected = f"PROC_STAT PermissionError 13 CPUS {os.cpu_count()} {len(os.sched_getaffinity(0))}"
    assert expected in result.log_tail, result.log_tail[-1500:]  # the training process
    assert result.status == RunStatus.CRASH, (result.reason, result.log_tail[-1500:])
    assert result.reason.endswith(f"ValueError: {expected}"), result.reason  # an evaluation one
