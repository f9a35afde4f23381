"""A user's own project, the way a new user meets the swarm: `swarm` installed from a wheel of
this checkout (not the checkout itself), run from a folder outside it, on a stock nanoGPT-style
training script (tests/nanogpt_project.py) with no wrapper and no renamed constants:
`swarm init --target command` then `swarm start`, and the mistakes such a user makes."""

from __future__ import annotations

import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.nanogpt_project import write_project
from training.sandbox import landlock_abi

REPO = Path(__file__).resolve().parents[1]
NOT_SOURCE = (".git", ".venv", "__pycache__", "*.egg-info", "build", "dist", "swarm-workspace")
PIP_WHEEL = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps"]  # as pip installs it
RUN = "python train.py --seed={seed} --max_iters={budget} --n_embd={n_embd}"


def init(run: str = RUN) -> list[str]:
    """The one `swarm init` a user types for this project."""
    metric = ["--metric", "val_loss", "--metric-regex", r"val loss ([0-9.]+)"]
    fixed = ["--fixed", "eval_*, log_interval"]  # how the metric is measured is not a dial
    return ["init", "--target", "command", "--edit", "train.py", "--run", run, *metric, *fixed]


# Two small tiers; n_embd is a tier dial the command passes, so no researcher may move it.
FAST_LADDER = """
[[tier]]
name = "small"
budget = 30
time_limit_s = 120
seeds = 2
[tier.dials]
n_embd = 16

[[tier]]
name = "larger"
budget = 60
time_limit_s = 120
seeds = 2
[tier.dials]
n_embd = 24
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A `swarm` program whose packages come from a wheel built from a copy of the checkout,
    unpacked in a folder of its own (first on sys.path: the checkout is never imported); the
    program is the script pip writes for the wheel's entry point."""
    root = tmp_path_factory.mktemp("installed")
    source = root / "source"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(*NOT_SOURCE))
    subprocess.run(
        [*PIP_WHEEL, "-w", str(root / "wheel"), str(source)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = (root / "wheel").glob("research_swarm-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(root / "site")
    launcher = root / "bin" / "swarm"
    launcher.parent.mkdir()
    site = root / "site"  # the script pip writes for the entry point, and the path it would have
    launcher.write_text(
        f"#!{sys.executable}\nimport os, sys\nsys.path.insert(0, {str(site)!r})\n"
        f"os.environ['PYTHONPATH'] = {str(site)!r}  # the swarm's child processes\n"
        "from swarm.cli import main\nsys.exit(main())\n"
    )
    launcher.chmod(0o755)
    return launcher


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    folder = write_project(tmp_path / "my-gpt")
    yield folder


def swarm(launcher: Path, project: Path, *args: str, timeout: float = 120) -> str:
    """`swarm ARGS` in `project` as a user runs it; its output (stdout and stderr)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = "/usr/bin:/bin"  # not on PATH: what `swarm` prints must still work
    done = subprocess.run(
        [str(launcher), *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    output = done.stdout + done.stderr
    if done.returncode != 0:
        raise AssertionError(f"swarm {' '.join(args)} exited {done.returncode}:\n{output}")
    return output


def test_the_launcher_imports_the_installed_copy(installed: Path, project: Path) -> None:
    where = subprocess.run(
        [sys.executable, "-c", "import configs, swarm; print(configs.__file__, swarm.__file__)"],
        cwd=project,
        env={"PYTHONPATH": str(installed.parent.parent / "site"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert str(REPO) not in where and str(installed.parent.parent / "site") in where


def added_lines(diff: str) -> list[str]:
    return [line for line in diff.splitlines() if line[:1] == "+" and line[:3] != "+++"]


def start_and_check(installed: Path, project: Path, experiments: int) -> str:
    """`swarm init`, one run by hand, then `swarm start` until `experiments` results; what every
    idea moved (lowercase constants only, none the command sets or --fixed names) and the logs
    kept. The start's output."""
    said = swarm(installed, project, *init())
    assert f"{installed} start" in said  # the follow-up, as it works when typed here
    (project / "ladder.toml").write_text(FAST_LADDER)

    one = swarm(installed, project, "run", "--tier", "0", "--seed", "1")
    assert "status: OK" in one and "steps: unknown" in one, one

    out = swarm(
        installed, project, "start", "--agents", "2", "--max-experiments", str(experiments),
        timeout=420,
    )  # fmt: skip
    assert f'{installed} sql "select * from leaderboard limit 10"' in out
    ideas = swarm(installed, project, "sql", "select patch from ideas", "--format", "json")
    patches = "".join(row["patch"] for row in json.loads(ideas))
    moved = {line[1:].split("=")[0].strip() for line in added_lines(patches)}
    assert moved and all(name.islower() for name in moved), patches
    assert not moved & {"seed", "max_iters", "n_embd"}, patches  # set by the command: fixed
    assert not moved & {"eval_interval", "eval_iters", "log_interval"}, patches  # by --fixed
    exported = swarm(installed, project, "champion", "export")
    assert re.fullmatch(r"wrote champion v\d+ to champion-v\d+\.py\n", exported), exported
    logs = list((project / "swarm-workspace" / "logs" / "runs").glob("*.log"))
    ok = "select count(*) from runs where status = 'OK'"
    runs = swarm(installed, project, "sql", ok, "--format", "csv")
    assert len(logs) >= int(runs.split()[-1]) > 0, runs
    return out


@pytest.mark.timeout(300)  # two trainers on a shared 2-core machine: ~40 s, slower when busy
def test_init_and_start_on_a_stock_training_script(installed: Path, project: Path) -> None:
    start_and_check(installed, project, experiments=8)


@pytest.mark.slow
@pytest.mark.timeout(480)
def test_a_stock_training_script_stacks_and_the_champion_reads_back(
    installed: Path, project: Path
) -> None:
    """The long form: enough experiments that an idea passes both tiers and is stacked."""
    out = start_and_check(installed, project, experiments=36)
    lineage = swarm(installed, project, "sql", "select version from lineage", "--format", "csv")
    assert "2" in lineage.split(), f"nothing was stacked:\n{out}"
    diff = swarm(installed, project, "champion", "diff", "1", "2")
    added = added_lines(diff)
    assert added and all(line[1:].split("=")[0].strip().islower() for line in added), diff
    latest = swarm(installed, project, "champion", "diff")  # the latest against its parent
    assert re.search(r"^\+\+\+ v\d+$", latest, re.MULTILINE), latest


def test_a_mistyped_placeholder_stops_the_start_naming_it(installed: Path, project: Path) -> None:
    said = swarm(installed, project, *init("python train.py --seed={sed}"))
    assert "swarm: warning: target.run: {sed} is neither" in said  # init says so at once
    with pytest.raises(AssertionError, match=r"exited 2:[\s\S]*\{sed\} is neither"):
        swarm(installed, project, "start", "--agents", "1", "--minutes", "1")
    assert not (project / "swarm-workspace" / "ledger.duckdb").exists()


def test_a_script_with_nothing_to_edit_stops_the_start(installed: Path, project: Path) -> None:
    (project / "train.py").write_text("import sys\nconfig = dict(lr=1e-3)\nprint('val loss 1.0')\n")
    swarm(installed, project, *init("python train.py --seed={seed}"))
    with pytest.raises(AssertionError, match=r"exited 2:[\s\S]*train.py.*could propose nothing"):
        swarm(installed, project, "start", "--agents", "1", "--minutes", "1")


@pytest.mark.timeout(300)  # two starts: the broken one, and a minute with the fix
def test_a_champion_that_cannot_run_stops_the_swarm(installed: Path, project: Path) -> None:
    """A typo in the run command: every run fails, so every idea would be judged against
    nothing. The swarm stops by itself, says why with the log, and exits non-zero."""
    swarm(installed, project, *init("python trian.py --seed={seed}"))
    with pytest.raises(AssertionError) as stopped:
        swarm(installed, project, "start", "--agents", "1", "--minutes", "3", timeout=150)
    said = str(stopped.value)
    assert "exited 2" in said and "the champion's own runs at tier 0 all failed" in said, said
    assert "can't open file" in said and "experiments run:" in said  # the log, the summary
    # The ideas that ran meanwhile failed as the champion did: none is rejected for the typo.
    started = (project / "swarm-workspace" / "logs" / "start.log").read_text()
    assert "stopping: the champion's own runs at tier 0 all failed" in started
    typo = "select count(*) from decisions where rule like '%trian.py%'"
    assert ask(installed, project, typo) == 0
    # The user fixes the typo and starts again on the same workspace: the last start's failures
    # do not stop this one (they stopped it at its first look, before any run).
    config = project / "swarm.toml"
    config.write_text(config.read_text().replace("trian.py", "train.py"))
    swarm(installed, project, "start", "--agents", "1", "--minutes", "1", timeout=150)
    assert ask(installed, project, "select count(*) from runs where status = 'OK'") > 0


def ask(installed: Path, project: Path, sql: str) -> int:
    """A count from the ledger, as `swarm sql --format json` gives it."""
    rows = json.loads(swarm(installed, project, "sql", sql, "--format", "json"))
    return int(next(iter(rows[0].values())))


TWO_STAGE = [
    *("--eval", "python eval.py --ckpt={train_dir}/out/ckpt.pt", "--held-out", "data/*/test.bin"),
    *("--metric", "test_loss", "--metric-regex", r"test loss ([0-9.]+)"),
]


def held_out_peek(project: Path) -> Path:
    """A patch a careless (or cheating) recipe would be: train.py reads the test split."""
    where = project.resolve() / "data" / "tiny" / "test.bin"
    source = (project / "train.py").read_text()
    line = "torch.manual_seed(seed)\n"
    peeked = source.replace(line, f"print(len(open({str(where)!r}, 'rb').read()))\n{line}", 1)
    diff = difflib.unified_diff(
        source.splitlines(True), peeked.splitlines(True), "a/train.py", "b/train.py"
    )
    patch = project.parent / "peek.diff"
    patch.write_text("".join(diff))
    return patch


@pytest.mark.skipif(landlock_abi() < 1, reason="held-out files need Landlock")
@pytest.mark.timeout(420)
def test_two_stages_score_with_the_unpatched_evaluation(installed: Path, project: Path) -> None:
    """`swarm init --eval ... --held-out ...`: the swarm runs and stacks on the evaluation's
    metric, and a patch that reads the held-out file fails in training."""
    swarm(installed, project, *init(), *TWO_STAGE)
    (project / "ladder.toml").write_text(FAST_LADDER)
    one = swarm(installed, project, "run", "--tier", "0", "--seed", "1")
    assert "status: OK" in one and re.search(r"test_loss: \d", one), one

    with pytest.raises(AssertionError) as refused:
        swarm(installed, project, "run", "--tier", "0", "--patch", str(held_out_peek(project)))
    said = str(refused.value)
    assert "exited 1" in said and "status: CRASH" in said and "PermissionError" in said, said

    swarm(installed, project, "start", "--agents", "1", "--max-experiments", "4", timeout=360)
    scored = "select distinct metric_name from runs where status = 'OK'"
    assert swarm(installed, project, "sql", scored, "--format", "csv").split()[-1] == "test_loss"
    evaluated = list((project / "swarm-workspace" / "logs" / "runs").glob("*.eval.log"))
    assert len(evaluated) >= 4, evaluated
