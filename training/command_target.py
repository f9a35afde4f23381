"""The `command` target: any project, one editable file, a run command, a printed metric.

One stage (the default): the run command trains and prints the metric. The patched file runs
in that process, so it can print any metric it likes: the score is as honest as the recipe.

Two stages (`eval` set): the run command trains in a copy of the project with the patched
file and leaves its checkpoint in that copy; then the evaluation command, from a fresh copy of
the project that no patch touched, runs in its own process, reads the checkpoint (its folder is
`{train_dir}`, also SWARM_TRAIN_DIR) and prints the metric. Only the evaluation's output is
read. Files declared held out (`held_out`) are left out of the training copy and made
unreadable to the training process and everything it starts (Landlock; see held_out). Links
the training left in its folder that lead out of it are removed before the evaluation reads
it (a checkpoint linked to another run's is not this run's). The checkpoint is the
experiment's output and untrusted: the evaluation must load it as data
(`torch.load(..., weights_only=True)`, torch's default since 2.6), never unpickle code.

Every stage runs under the same confinement as every experiment: the hard wall-clock limit
(each stage its own), rlimits, a scrubbed environment, writes only into the stage's own copy
and its own temp folder (TMPDIR, short: command_stage.TEMP_ROOT), no read of the workspace
(the bus passwords, other runs' logs) or of the scratch folder (other runs' copies), each
stage's full log kept in logs/runs/. Training has no network (Landlock bars
TCP, seccomp every socket but Unix ones). Not confined (see README, "One stage or two"): file
metadata outside the copy (chmod, utime: Landlock does not cover them), processes that leave
the run's process group, and SysV IPC.
"""

from __future__ import annotations

import os
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

from bus.messages import RunResult, RunSpec, RunStatus
from training.command_io import CommandError, MetricReader
from training.command_stage import (
    EVAL_SUFFIX,
    Reach,
    RunContext,
    Stage,
    run_stage,
)
from training.held_out import hidden_from_training
from training.process_outcome import remove_tree, result_fields
from training.run_limits import PLAIN_NAME, RunLimits

COPY_IGNORED = (".git", ".venv", "venv", "__pycache__", "swarm-workspace", "node_modules")


@dataclass
class CommandTarget:
    project: Path
    editable: str
    command: str
    metric: MetricReader
    lower_is_better: bool = True
    name: str = "command"
    own_python: bool = True  # the swarm's interpreter first on the command's PATH
    skip: tuple[Path, ...] = ()  # folders inside the project never copied (the workspace)
    eval_command: str = ""  # two stages: the metric is this command's output, not training's
    held_out: tuple[str, ...] = ()  # globs in the project only the evaluation may read

    @property
    def metric_name(self) -> str:
        return self.metric.name

    def initial_source(self) -> str:
        return (self.project / self.editable).read_text()

    def data_hash(self) -> str:
        return ""  # the project reads its own data

    def run(
        self,
        spec: RunSpec,
        source: str,
        limits: RunLimits,
        scratch: Path,
        device: str,
        trainer: str,
        log_dir: Path | None,
        cancel: threading.Event | None = None,
    ) -> RunResult:
        base = result_fields(
            spec, device, trainer, metric_name=self.metric_name, unconfined=limits.unsafe_no_sandbox
        )
        if not PLAIN_NAME.fullmatch(spec.run_id):  # it names the copies, then removed
            why = f"run id {spec.run_id[:200]!r} is not a plain name"
            return RunResult(**base, status=RunStatus.REFUSED, reason=why)
        patched = source  # the whole editable file to run (training/spec_recipe.py)
        try:
            held_out = hidden_from_training(self.project, self.held_out, bool(self.eval_command))
        except CommandError as exc:
            return RunResult(**base, status=RunStatus.REFUSED, reason=str(exc))
        run = RunContext(spec, limits, device, cancel, self.own_python)
        work, checked = scratch / spec.run_id, scratch / f"{spec.run_id}{EVAL_SUFFIX}"
        scratch.mkdir(parents=True, exist_ok=True)
        # The workspace (the bus passwords, other runs' logs) and the scratch folder (other
        # runs' copies, the evaluations' held-out files among them) are out of every stage's
        # reach; training's, the held-out files too.
        swarm_own = (*self.skip, Path(os.path.realpath(scratch)))
        strict = bool(held_out)  # no Landlock, no run: the files would not be hidden
        trains = Reach((*swarm_own, *held_out), (), strict, no_network=True)
        two_stage = bool(self.eval_command)
        evaluation: Stage | None = None
        try:
            remove_tree(work)
            remove_tree(checked)
            self._copy(work, trains.hidden)
            (work / self.editable).write_text(patched)
            role = "training" if two_stage else ""
            training, tail = run_stage(run, self.command, work, trains, {}, log_dir, role)
            if two_stage and training.status is RunStatus.OK:
                drop_links_out(work)
                self._copy(checked, swarm_own)
                given = {"train_dir": str(work)}
                evaluates = Reach(swarm_own, (work,), strict, no_network=False)
                evaluation, checked_tail = run_stage(
                    run, self.eval_command, checked, evaluates, given, log_dir, "evaluation"
                )
                tail = f"{tail}\n{checked_tail}"
        finally:
            remove_tree(work)
            remove_tree(checked)
        status, reason, metric = self._score(training, evaluation)
        return RunResult(
            **base,
            status=status,
            reason=reason,
            metric=metric,
            train_seconds=round(training.seconds, 3),
            eval_seconds=round(evaluation.seconds, 3) if evaluation else 0.0,
            log_tail=tail,
        )

    def _copy(self, to: Path, left_out: tuple[Path, ...]) -> None:
        """The project into `to`, without caches, environments, the swarm's own folders inside
        it (whatever their names: a workspace copied into each of its runs nests until the path
        is too long) and `left_out` (real paths). Links stay links (a `data -> /big` link is not
        copied per run; a loop is no loop)."""

        def ignored(folder: str, names: list[str]) -> set[str]:
            # realpath, not Path.resolve: a link loop in the project must not stop the copy
            out = {n for n in names if Path(os.path.realpath(Path(folder) / n)) in left_out}
            return out | set(shutil.ignore_patterns(*COPY_IGNORED)(folder, names))

        shutil.copytree(self.project, to, ignore=ignored, symlinks=True)

    def _score(
        self, training: Stage, evaluation: Stage | None
    ) -> tuple[RunStatus, str, float | None]:
        if training.status is not RunStatus.OK:
            return training.status, training.reason, None
        scored = training
        if evaluation is not None:
            if evaluation.status is not RunStatus.OK:
                return evaluation.status, f"evaluation: {evaluation.reason}", None
            scored = evaluation
        metric = self.metric.read(scored.output)
        if metric is None:
            where = " in the evaluation's output" if evaluation is not None else ""
            return RunStatus.CRASH, f"{self.metric.expected()}{where}", None
        return RunStatus.OK, "", metric


def drop_links_out(folder: Path) -> None:
    """Remove the links in `folder` that lead out of it, before the evaluation reads it: a
    checkpoint that is a link to another run's, or to a held-out file, is not this run's."""
    inside = os.path.realpath(folder)
    for parent, dirs, files in os.walk(folder):
        for name in (*dirs, *files):
            path = os.path.join(parent, name)
            if os.path.islink(path):
                target = os.path.realpath(path)
                if os.path.commonpath([inside, target]) != inside:
                    os.unlink(path)
