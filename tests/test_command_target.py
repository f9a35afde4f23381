"""The `command` target on a small project written here, and `swarm run` as users call it."""

from __future__ import annotations

import difflib
from dataclasses import replace
from pathlib import Path

import pytest

from bus.messages import BudgetKind, RunResult, RunSpec, RunStatus, new_id
from tests.conftest import run_swarm
from tests.training_helpers import TINY_LADDER
from training.command_io import MetricReader
from training.runner import RunLimits
from training.sandbox import Limits
from training.spec_recipe import patched_or_refused
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


def run(
    project: Path,
    command: str,
    patch: str = "",
    limit: float = 30,
    quota: Limits | None = None,
    run_spec: RunSpec | None = None,
) -> RunResult:
    target = CommandTarget(project, "train.py", command, MetricReader("val_loss"))
    run_spec = run_spec or spec(patch)
    recipe = patched_or_refused(run_spec, target.initial_source(), "train.py", "cpu", "test")
    if isinstance(recipe, RunResult):
        return recipe
    return target.run(
        run_spec,
        recipe,
        RunLimits(time_limit_s=limit, limits=quota or Limits()),
        project.parent / "s",
        "cpu",
        "test",
        None,
    )


def test_metric_is_parsed_and_patches_apply(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_API_KEY", "secret")
    result = run(project, "python3 train.py")
    assert result.status == RunStatus.OK and result.metric == pytest.approx(6.005)
    assert "secret visible: False" in result.log_tail
    patched = run(project, "python3 train.py", diff(TRAIN, TRAIN.replace("2.0", "1.0")))
    assert patched.metric == pytest.approx(3.005)
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
    assert result.status == status, result.log_tail
    assert reason in result.reason
    assert not Path("/tmp/swarm-command-escape").exists()


def test_patch_touching_another_file_is_refused(project: Path) -> None:
    bad = "--- a/README\n+++ b/README\n@@ -1 +1 @@\n-not copied into the metric\n+x\n"
    result = run(project, "python3 train.py", bad)
    assert result.status == RunStatus.REFUSED


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


# Small limits keep the attacks quick: a few MiB of disk, a few dozen files.
SMALL_DISK = Limits(file_size_bytes=4 * 2**20, disk_bytes=8 * 2**20, disk_files=50)


def test_a_command_cannot_rewrite_what_it_printed(project: Path) -> None:
    """Its output goes through a pipe into a log beside its folder, unlinked: truncating or
    seeking its stdout fails, and no file in reach is the log."""
    rewrite = (
        "import glob, os\n"
        "print('printed first', flush=True)\n"
        "for how in (lambda: os.ftruncate(1, 0), lambda: os.lseek(1, 0, 0)):\n"
        "    try:\n        how(); print('REWROTE', flush=True)\n"
        "    except OSError as exc:\n        print('refused', exc.errno, flush=True)\n"
        "print('logs in reach:', glob.glob('**/*.log', recursive=True) + glob.glob('../*'))\n"
        "print('val_loss: 1')\n"
    )
    (project / "rewrite.py").write_text(rewrite)
    result = run(project, "python3 rewrite.py", limit=10)
    assert result.status == RunStatus.OK and result.metric == 1.0, (result.reason, result.log_tail)
    assert "REWROTE" not in result.log_tail and result.log_tail.count("refused") == 2
    assert result.log_tail.index("printed first") < result.log_tail.index("refused")
    assert "logs in reach: []" in result.log_tail, result.log_tail
    assert list((project.parent / "s").iterdir()) == []


@pytest.mark.parametrize(
    "fill",
    [
        # doubled braces: a run command's {name} is a placeholder (training/command_io.py)
        "for i in itertools.count(): open(f'x{{i}}', 'wb').write(bytes(2**20)); time.sleep(0.01)",
        "for i in itertools.count(): open(f'f{{i}}', 'w').close(); time.sleep(0.001)",
    ],
    ids=["bytes", "files"],
)
def test_a_disk_fill_is_stopped_at_the_quota(project: Path, fill: str) -> None:
    command = f'python3 -c "import itertools, time\n{fill}"'
    result = run(project, command, limit=30, quota=SMALL_DISK)
    assert result.status == RunStatus.CRASH, (result.reason, result.log_tail)
    assert "disk quota exceeded" in result.reason and "copy of the project" in result.reason
    assert result.metric is None
    assert list((project.parent / "s").iterdir()) == []  # the scratch copy is removed


def test_the_project_copy_does_not_count_against_the_quota(project: Path) -> None:
    """Only what the run adds is its quota's: a project with data of its own still runs."""
    (project / "data.bin").write_bytes(bytes(16 * 2**20))  # twice the quota
    for i in range(60):  # more files than the quota allows
        (project / f"part{i}.txt").write_text("x")
    result = run(project, "sleep 1; python3 train.py", quota=SMALL_DISK)
    assert result.status == RunStatus.OK, (result.reason, result.log_tail)


def test_deep_directories_are_stopped_and_removed(project: Path) -> None:
    """Thousands of nested directories (closed with chmod) would make a recursive removal raise
    in the trainer; the run is stopped, and its copy removed however deep it goes."""
    deep = "import os, time\nfor _ in range(3000): os.mkdir('d'); os.chdir('d')\n"
    deep += "os.chmod(os.path.join(os.environ['HOME'], 'd'), 0)\ntime.sleep(30)"
    result = run(project, f'python3 -c "{deep}"', limit=20)
    assert result.status == RunStatus.CRASH, (result.reason, result.log_tail)
    # Root walks it and finds it too deep; another user finds it closed.
    assert "the scratch directory cannot be checked" in result.reason
    assert list((project.parent / "s").iterdir()) == []


# An absolute run id is tried on a directory of the test's own, never on "/": if the check ever
# broke, this test would delete what it names (an earlier version of it deleted /etc).
@pytest.mark.parametrize("run_id", ["../x", "<absolute>", "..", ".hidden", "a/b"])
def test_a_run_id_that_is_not_a_plain_name_is_refused(project: Path, run_id: str) -> None:
    """The run id names the copy of the project, removed afterwards: `..` would remove all."""
    victim = project.parent / "victim"
    victim.mkdir()
    (victim / "keep").write_text("x")
    run_id = str(victim) if run_id == "<absolute>" else run_id
    result = run(project, "python3 train.py", run_spec=replace(spec(), run_id=run_id))
    assert result.status == RunStatus.REFUSED and "not a plain name" in result.reason
    assert (project / "train.py").exists() and not (project.parent / "x").exists()
    assert (victim / "keep").exists()


def test_capabilities_are_dropped(project: Path) -> None:
    """Even under a trainer run by root, the command (after exec) keeps no capability."""
    result = run(project, "grep -E '^Cap(Prm|Eff)' /proc/self/status; python3 train.py")
    assert result.status == RunStatus.OK, (result.reason, result.log_tail)
    assert "CapPrm:\t0000000000000000\nCapEff:\t0000000000000000" in result.log_tail


def test_an_editable_file_missing_from_the_project_is_named_with_where_it_came_from(
    tmp_path: Path,
) -> None:
    """The name comes from swarm.toml's target.edit as often as from --edit: the error says
    both, not only the flag a user never typed."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text("print('val_loss: 1.0')\n")
    config = tmp_path / "swarm.toml"
    config.write_text(
        f'[target]\nkind = "command"\nproject = "{project}"\nedit = "trian.py"\n'
        'run = "python train.py"\nmetric = "val_loss"\n'
    )
    done = run_swarm(tmp_path / "ws", "--config", str(config), "run", "--tier", "0")
    assert done.returncode == 2
    assert "the editable file 'trian.py' (target.edit in swarm.toml, or --edit)" in done.stderr
    assert f"no such file in {project}" in done.stderr and "Traceback" not in done.stderr
