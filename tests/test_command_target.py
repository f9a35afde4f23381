"""The `command` target on a small project written here, and `swarm run` as users call it."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from bus.messages import BudgetKind, RunSpec, RunStatus, new_id
from tests.conftest import run_swarm
from tests.training_helpers import TINY_LADDER
from training.runner import RunLimits
from training.targets import CommandTarget

TRAIN = """import json, os
SCALE = 2.0  # the knob ideas turn
budget = float(os.environ["SWARM_BUDGET"])
dials = json.loads(os.environ["SWARM_DIALS"])
print("secret visible:", any("API_KEY" in k for k in os.environ))
print(f"val_loss: {SCALE * dials['depth'] + budget / 1000}")
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "train.py").write_text(TRAIN)
    (folder / "README").write_text("not copied into the metric")
    return folder


def spec(patch: str = "") -> RunSpec:
    return RunSpec(
        run_id=new_id("run"),
        tier=0,
        seed=1,
        champion_version=1,
        budget_kind=BudgetKind.SECONDS,
        budget=5,
        patch=patch,
        dials={"depth": 3},
    )


def diff(old: str, new: str) -> str:
    return "".join(
        difflib.unified_diff(old.splitlines(True), new.splitlines(True), "a/train.py", "b/train.py")
    )


def run(project: Path, command: str, patch: str = "", limit: float = 30) -> object:
    target = CommandTarget(project, "train.py", command, "val_loss")
    source = target.initial_source()
    return target.run(
        spec(patch),
        source,
        RunLimits(time_limit_s=limit),
        project.parent / "s",
        "cpu",
        "test",
        None,
    )


def test_metric_is_parsed_and_patches_apply(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_API_KEY", "secret")
    result = run(project, "python3 train.py")
    assert result.status == RunStatus.OK and result.metric == pytest.approx(6.005)  # type: ignore[attr-defined]
    assert "secret visible: False" in result.log_tail  # type: ignore[attr-defined]
    patched = run(project, "python3 train.py", diff(TRAIN, TRAIN.replace("2.0", "1.0")))
    assert patched.metric == pytest.approx(3.005)  # type: ignore[attr-defined]
    assert "SCALE = 2.0" in (project / "train.py").read_text()  # the project itself is untouched


@pytest.mark.parametrize(
    ("command", "status", "reason"),
    [
        ("echo no metric", RunStatus.CRASH, "no `val_loss: <number>` line"),
        ("python3 -c 'raise SystemExit(3)'", RunStatus.CRASH, "exit code 3"),
        ("sleep 30", RunStatus.TIMEOUT, "wall-clock limit of 2s"),
        ("echo x > /tmp/swarm-command-escape && echo 'val_loss: 1'", RunStatus.CRASH, "exit code"),
    ],
)
def test_failures_become_results(
    project: Path, command: str, status: RunStatus, reason: str
) -> None:
    result = run(project, command, limit=2)
    assert result.status == status, result.log_tail  # type: ignore[attr-defined]
    assert reason in result.reason  # type: ignore[attr-defined]
    assert not Path("/tmp/swarm-command-escape").exists()


def test_patch_touching_another_file_is_refused(project: Path) -> None:
    bad = "--- a/README\n+++ b/README\n@@ -1 +1 @@\n-not copied into the metric\n+x\n"
    result = run(project, "python3 train.py", bad)
    assert result.status == RunStatus.REFUSED  # type: ignore[attr-defined]


def test_swarm_run_prints_a_greppable_summary(tmp_path: Path) -> None:
    (tmp_path / "ladder.toml").write_text(TINY_LADDER)
    config = tmp_path / "swarm.toml"
    config.write_text(f'[ladder]\npath = "{tmp_path / "ladder.toml"}"\n')
    done = run_swarm(
        tmp_path / "ws", "--config", str(config), "run", "--tier", "0", "--seed", "3", timeout=120
    )
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(": ", 1) for line in done.stdout.splitlines())
    assert lines["status"] == "OK" and float(lines["val_bpb"]) > 1
    assert {"steps", "tokens", "train_seconds", "flops", "peak_mem_mb", "device"} <= set(lines)
    patch = tmp_path / "idea.diff"
    patch.write_text("--- a/recipe.py\n+++ b/recipe.py\n@@ -1 +1 @@\n-nope\n+x\n")
    refused = run_swarm(
        tmp_path / "ws",
        "--config",
        str(config),
        "run",
        "--tier",
        "0",
        "--patch",
        str(patch),
        timeout=120,
    )
    assert refused.returncode == 1 and "status: REFUSED" in refused.stdout
    wrong = run_swarm(tmp_path / "ws", "--config", str(config), "run", "--tier", "5")
    assert wrong.returncode == 2 and "the ladder has tiers 0..0" in wrong.stderr
