"""A two-stage command target: the edited training script cannot touch the metric or read the
held-out files; only the unpatched evaluation reads them and prints the score. Each case is an
experiment written the way a cheating or careless recipe would be, run through CommandTarget on
the nanoGPT-style project (tests/nanogpt_project.py) with real torch in real processes."""

from __future__ import annotations

import difflib
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from bus.messages import BudgetKind, RunResult, RunSpec, RunStatus, new_id
from scale_ladder.tiers import load_tiers
from swarm.config import ConfigError, SwarmConfig, TargetConfig, WorkspaceConfig
from swarm.config_files import ladder_path, with_defaults
from swarm.ladder_process import check_command
from tests.nanogpt_project import write_project
from training.command_io import MetricReader
from training.command_target import CommandTarget
from training.held_out import readable_except
from training.runner import RunLimits
from training.sandbox import landlock_abi
from training.spec_recipe import patched_or_refused

pytestmark = pytest.mark.skipif(landlock_abi() < 1, reason="held-out files need Landlock")

TRAIN = "python train.py --seed={seed} --max_iters={budget}"
EVAL = "python eval.py --ckpt={train_dir}/out/ckpt.pt"
TEST_LOSS = MetricReader("test_loss", "regex", r"test loss ([0-9.]+)")
AFTER_SAVE = "torch.save({'model': model.state_dict(), 'model_args': model_args}"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return write_project(tmp_path / "project")


def target(project: Path, **given: object) -> CommandTarget:
    options: dict[str, object] = {"eval_command": EVAL, "held_out": ("data/*/test.bin",)}
    return CommandTarget(project, "train.py", TRAIN, TEST_LOSS, **(options | given))  # type: ignore[arg-type]


def run(t: CommandTarget, workspace: Path, patch: str = "", seed: int = 3) -> RunResult:
    spec = RunSpec(
        run_id=new_id("run"),
        tier=0,
        seed=seed,
        champion_version=1,
        budget_kind=BudgetKind.UNITS,
        budget=20,
        patch=patch,
    )
    recipe = patched_or_refused(spec, t.initial_source(), t.editable, "cpu", "test")
    assert isinstance(recipe, str), recipe
    return t.run(
        spec,
        recipe,
        RunLimits(time_limit_s=120),
        workspace / "scratch",
        "cpu",
        "test",
        workspace / "logs" / "runs",
        threading.Event(),
    )


def training_patch(project: Path, code: str, before: str = "torch.manual_seed(seed)") -> str:
    """A patch to train.py running `code` at the line `before`."""
    source = (project / "train.py").read_text()
    assert before in source
    changed = source.replace(before, f"{code}\n{before}", 1)
    lines = difflib.unified_diff(
        source.splitlines(True), changed.splitlines(True), "a/train.py", "b/train.py"
    )
    return "".join(lines)


def test_the_metric_is_the_evaluations_and_both_logs_are_kept(
    project: Path, tmp_path: Path
) -> None:
    # the training prints a score of its own: it is not the one read
    fake = training_patch(project, "print('test loss 0.0001')")
    result = run(target(project), tmp_path / "ws", fake)
    assert result.status == RunStatus.OK, result.reason + result.log_tail
    assert result.metric is not None and result.metric > 0.5
    assert "--- training ---" in result.log_tail and "--- evaluation ---" in result.log_tail
    assert result.eval_seconds > 0
    logs = tmp_path / "ws" / "logs" / "runs"
    assert f"test loss {result.metric:.4f}" in (logs / f"{result.run_id}.eval.log").read_text()
    assert "test loss 0.0001" in (logs / f"{result.run_id}.log").read_text()
    assert not list((tmp_path / "ws" / "scratch").iterdir())  # both copies removed


def test_the_held_out_file_is_not_in_the_training_copy(project: Path, tmp_path: Path) -> None:
    peek = training_patch(project, "open('data/tiny/test.bin', 'rb').read()")
    result = run(target(project), tmp_path / "ws", peek)
    assert result.status == RunStatus.CRASH
    assert "FileNotFoundError" in result.log_tail


def test_training_cannot_read_the_held_out_file_where_it_lives(
    project: Path, tmp_path: Path
) -> None:
    where = project.resolve() / "data" / "tiny" / "test.bin"
    peek = training_patch(project, f"open({str(where)!r}, 'rb').read()")
    result = run(target(project), tmp_path / "ws", peek)
    assert result.status == RunStatus.CRASH
    assert "PermissionError" in result.log_tail
    # nor through a link it makes to it, nor by a shell it starts
    link = training_patch(project, f"os.symlink({str(where)!r}, 'peek'); open('peek','rb').read()")
    assert "PermissionError" in run(target(project), tmp_path / "ws", link).log_tail
    shell = training_patch(project, f"assert os.system('cat {where} > stolen') != 0")
    assert run(target(project), tmp_path / "ws", shell).status == RunStatus.OK


def test_training_cannot_reach_into_the_scratch_folder(project: Path, tmp_path: Path) -> None:
    """Where the evaluation's copy of the held-out files will be: a process the training left
    behind must not read it later."""
    scratch = tmp_path / "ws" / "scratch"
    (scratch / "earlier.eval").mkdir(parents=True)
    (scratch / "earlier.eval" / "test.bin").write_bytes(b"held out")
    peek = training_patch(project, f"open({str(scratch / 'earlier.eval' / 'test.bin')!r}).read()")
    result = run(target(project), tmp_path / "ws", peek)
    assert "PermissionError" in result.log_tail


def test_the_evaluation_runs_the_unpatched_project(project: Path, tmp_path: Path) -> None:
    """Rewriting eval.py (or model.py) in the training copy changes nothing the score reads."""
    rewrite = training_patch(
        project, "open('eval.py', 'w').write(\"print('test loss 0.0001')\")", AFTER_SAVE
    )
    result = run(target(project), tmp_path / "ws", rewrite)
    assert result.status == RunStatus.OK, result.reason
    assert result.metric is not None and result.metric > 0.5


def test_a_training_that_leaves_no_checkpoint_fails_in_the_evaluation(
    project: Path, tmp_path: Path
) -> None:
    lost = training_patch(project, "out_dir = 'elsewhere'", "os.makedirs(out_dir, exist_ok=True)")
    result = run(target(project), tmp_path / "ws", lost)
    assert result.status == RunStatus.CRASH
    assert result.reason.startswith("evaluation: ")
    assert "--- evaluation ---" in result.log_tail and "ckpt.pt" in result.log_tail


def test_an_evaluation_without_the_metric_says_where_it_looked(
    project: Path, tmp_path: Path
) -> None:
    quiet = target(project, eval_command="python -c 'print(1)'")
    result = run(quiet, tmp_path / "ws")
    assert result.status == RunStatus.CRASH
    assert "in the evaluation's output" in result.reason


def test_the_same_recipe_scores_the_same_in_one_stage_and_two(
    project: Path, tmp_path: Path
) -> None:
    """The second stage adds no noise of its own: same seed, same checkpoint, same score."""
    first, second = run(target(project), tmp_path / "a"), run(target(project), tmp_path / "b")
    assert first.metric == second.metric
    other = run(target(project), tmp_path / "c", seed=4)
    assert other.metric != first.metric


def test_held_out_patterns_must_name_files_in_the_project(project: Path, tmp_path: Path) -> None:
    for patterns, why in (
        (("data/*/tset.bin",), "matches no file"),
        (("../elsewhere",), "inside the project"),
        ((str(project / "data"),), "inside the project"),
        (("*", "."), "whole project"),
    ):
        result = run(target(project, held_out=patterns), tmp_path / "ws")
        assert result.status == RunStatus.REFUSED and why in result.reason, result.reason
    alone = run(target(project, eval_command=""), tmp_path / "ws")
    assert alone.status == RunStatus.REFUSED and "needs target.eval" in alone.reason


def test_a_held_out_file_behind_a_link_is_hidden_where_it_lives(tmp_path: Path) -> None:
    """data -> /elsewhere/data: the copy keeps the link; the file is denied at its real path."""
    real = write_project(tmp_path / "real")
    project = tmp_path / "project"
    project.mkdir()
    for name in ("train.py", "model.py", "eval.py", "configurator.py"):
        (project / name).write_text((real / name).read_text())
    (project / "data").symlink_to(real / "data")
    peek = training_patch(project, "open('data/tiny/test.bin', 'rb').read()")
    result = run(target(project), tmp_path / "ws", peek)
    assert "PermissionError" in result.log_tail
    assert run(target(project), tmp_path / "ws").status == RunStatus.OK


def test_the_complement_holds_everything_but_the_hidden_paths(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    for name in ("a/b/secret", "a/b/beside", "a/other", "top"):
        (tmp_path / name).write_text(name)
    (tmp_path / "a" / "link").symlink_to(tmp_path / "a" / "b" / "secret")
    granted = set(readable_except([tmp_path / "a" / "b" / "secret"]))
    assert {tmp_path / "a" / "b" / "beside", tmp_path / "a" / "other", tmp_path / "top"} <= granted
    hidden_or_on_the_way = {tmp_path / "a" / "b" / "secret", tmp_path / "a" / "b", tmp_path}
    assert not hidden_or_on_the_way & granted
    assert tmp_path / "a" / "link" not in granted  # a link is judged where it leads


def config_for(project: Path, **target: str) -> SwarmConfig:
    given = {"kind": "command", "project": str(project), "edit": "train.py", "run": TRAIN}
    values = given | {"metric": "test_loss", "metric_from": "regex"} | target
    config = SwarmConfig(
        workspace=WorkspaceConfig(path=str(project.parent / "ws")),
        target=TargetConfig(metric_regex=r"test loss ([0-9.]+)", **values),
    )
    return with_defaults(config, project / "swarm.toml", project)


@pytest.mark.parametrize(
    ("given", "error"),
    [
        ({"held_out": "data/*/test.bin"}, "target.held_out needs target.eval"),
        ({"eval": EVAL, "held_out": "data/*/tset.bin"}, "matches no file"),
        ({"eval": "python eval.py --ckpt={chkpt}"}, "target.eval: {chkpt}"),
        ({"eval": "python eval.py --seed={seed}"}, ""),
        ({"eval": EVAL, "held_out": "data/*/test.bin"}, ""),
    ],
)
def test_start_checks_the_two_stage_settings(
    project: Path, given: dict[str, str], error: str
) -> None:
    config = config_for(project, **given)
    tiers = load_tiers(ladder_path(config), "command")
    if not error:
        check_command(config, tiers)
        return
    with pytest.raises(ConfigError, match=error.replace("{", r"\{").replace("}", r"\}")):
        check_command(config, tiers)


def test_the_run_command_does_not_get_the_evaluations_placeholder(project: Path) -> None:
    config = config_for(project, run="python train.py --out={train_dir}", eval=EVAL)
    with pytest.raises(ConfigError, match=r"target\.run"):
        check_command(config, load_tiers(ladder_path(config), "command"))
    assert os.environ.get("SWARM_TRAIN_DIR") is None


def test_a_checkpoint_linked_to_another_runs_is_not_scored(project: Path, tmp_path: Path) -> None:
    """A red team's find: training nothing and linking out/ckpt.pt to a concurrent run's
    checkpoint scored that run's result. Links out of the training folder are removed, and the
    evaluation cannot read other runs' folders anyway."""
    other = tmp_path / "ws" / "scratch" / "run-other"  # a concurrent run's training folder
    shutil.copytree(project, other)
    subprocess.run([sys.executable, "train.py", "--max_iters=5"], cwd=other, check=True)
    kept = other / "out"
    steal = training_patch(
        project,
        f"os.makedirs('out', exist_ok=True); os.symlink({str(kept / 'ckpt.pt')!r}, "
        "'out/ckpt.pt'); raise SystemExit(0)",
    )
    result = run(target(project), tmp_path / "ws", steal)
    assert result.status == RunStatus.CRASH and result.reason.startswith("evaluation: ")
    assert "No such file" in result.log_tail, result.log_tail


def run_script(tmp_path: Path, script: str) -> RunResult:
    """One stage, `python train.py` in a project holding `script`, that must end OK."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(script)
    reader = MetricReader("val_loss")
    one = CommandTarget(project, "train.py", "python train.py", reader, skip=(tmp_path / "ws",))
    result = run(one, tmp_path / "ws")
    assert result.status == RunStatus.OK, result.reason
    return result


def test_no_stage_reads_the_workspace_or_reaches_the_network(tmp_path: Path) -> None:
    """One stage, no held-out files: the bus passwords in the workspace stay unread and no
    packet leaves (Landlock bars TCP only; UDP was a red team's way out)."""
    secret = tmp_path / "ws" / "run" / "trainer.creds.json"
    secret.parent.mkdir(parents=True)
    secret.write_text('{"password": "hunter2"}')
    listener = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    listener.bind(("127.0.0.1", 0))
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    result = run_script(
        tmp_path,
        "import socket\n"
        f"try:\n    print(open({str(secret)!r}).read())\n"
        "except OSError as e:\n    print('read', e)\n"
        "try:\n    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        f"    s.sendto(b'out', ('127.0.0.1', {port}))\nexcept OSError as e:\n    print('udp', e)\n"
        "print('val_loss: 1.0')\n",
    )
    assert "hunter2" not in result.log_tail and "read [Errno 13]" in result.log_tail
    assert "udp [Errno 1]" in result.log_tail, result.log_tail
    with pytest.raises(TimeoutError):
        listener.recv(16)
    listener.close()


def test_a_command_makes_no_namespace_no_shared_memory_and_no_one_else_s_limits(
    tmp_path: Path,
) -> None:
    """A command target may fork and exec, but not `unshare` (a user namespace holds every
    capability) nor `prlimit` another process (a red team killed one with a 1 s CPU limit)."""
    outside = subprocess.Popen(["sleep", "60"])
    try:
        result = run_script(
            tmp_path,
            "import subprocess\n"
            "for cmd in (['unshare', '--user', 'true'],\n"
            f"            ['prlimit', '--pid', '{outside.pid}', '--cpu=1:1']):\n"
            "    done = subprocess.run(cmd, capture_output=True, text=True)\n"
            "    print(cmd[0], done.returncode, done.stderr.strip())\n"
            "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "print('shmget', libc.shmget(0, 1 << 20, 0o1000 | 0o600), ctypes.get_errno())\n"
            "print('mq_open', libc.mq_open(b'/probe', 0o102, 0o600, None), ctypes.get_errno())\n"
            "print('val_loss: 1.0')\n",
        )
        lines = result.log_tail.splitlines()
        assert any(line.startswith("unshare 1 ") for line in lines), result.log_tail
        assert any(line.startswith("prlimit 1 ") for line in lines), result.log_tail
        assert "Operation not permitted" in result.log_tail
        assert "shmget -1 1" in result.log_tail  # EPERM: no SysV segment outlives the run
        assert "mq_open -1 1" in result.log_tail  # nor a POSIX message queue
        limits = Path(f"/proc/{outside.pid}/limits").read_text()
        assert "Max cpu time              unlimited" in limits
        assert outside.poll() is None  # still running
    finally:
        outside.kill()
        outside.wait()


def test_nothing_a_command_starts_outlives_its_run(tmp_path: Path) -> None:
    """A descendant that leaves the process group (`setsid`, here twice removed) is adopted by
    the trainer and killed with the stage: a red team kept one running after its run."""
    result = run_script(
        tmp_path,
        "import subprocess, sys\n"
        "daemon = 'import os, time\\nif os.fork() == 0:\\n    os.setsid()\\n"
        '    print("DAEMON", os.getpid(), flush=True)\\n    time.sleep(60)\\n\'\n'
        "subprocess.run([sys.executable, '-c', daemon])\n"
        "print('val_loss: 1.0')\n",
    )
    (daemon,) = [int(line.split()[1]) for line in result.log_tail.splitlines() if "DAEMON" in line]
    assert not Path(f"/proc/{daemon}").exists(), "the daemon outlived its run"
