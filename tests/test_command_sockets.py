"""A command target's Unix sockets and temp folder (issue 16): its toolchain keeps its own
sockets (in a short temp folder of its own, hidden from every other run), and a service
outside its folder is out of reach where the kernel can say so (Landlock ABI 9, Linux 7.1:
`LANDLOCK_ACCESS_FS_RESOLVE_UNIX`). Through a real command stage, as a user's project runs."""

from __future__ import annotations

import shutil
import socket
import tempfile
import threading
from pathlib import Path

import pytest

from bus.messages import BudgetKind, RunResult, RunSpec, RunStatus, new_id
from training.command_io import MetricReader
from training.command_stage import TEMP_ROOT
from training.command_target import CommandTarget
from training.runner import RunLimits
from training.sandbox import landlock_abi
from training.spec_recipe import patched_or_refused


def run_script(tmp_path: Path, script: str) -> RunResult:
    """One stage, `python train.py` in a project holding `script`."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(script)
    target = CommandTarget(
        project, "train.py", "python train.py", MetricReader("val_loss"), skip=(tmp_path / "ws",)
    )
    spec = RunSpec(new_id("run"), 0, 3, 1, BudgetKind.UNITS, 20)
    recipe = patched_or_refused(spec, target.initial_source(), "train.py", "cpu", "test")
    assert isinstance(recipe, str), recipe
    workspace = tmp_path / "ws"
    return target.run(
        spec, recipe, RunLimits(time_limit_s=120), workspace / "scratch", "cpu", "test",
        workspace / "logs" / "runs", threading.Event(),
    )  # fmt: skip


def test_a_command_keeps_the_unix_sockets_it_makes(tmp_path: Path) -> None:
    """multiprocessing's forkserver (Python 3.14's default start method) listens on a pathname
    socket in TMPDIR and its children connect to it: a rule that denied connect to every Unix
    socket would break it. TMPDIR is a short folder of the stage's own: in its copy of the
    project, deep in a workspace (or in pytest's folders), the socket's path passed the 107
    bytes a Unix socket may have and the run failed ("AF_UNIX path too long")."""
    result = run_script(
        tmp_path,
        "import multiprocessing as mp, os, tempfile\n"
        "def child(end):\n    end.send(6.0)\n"
        "if __name__ == '__main__':\n"
        "    ours, theirs = mp.Pipe()\n"
        "    p = mp.get_context('forkserver').Process(target=child, args=(theirs,))\n"
        "    p.start()\n    print('val_loss:', ours.recv())\n    p.join()\n"
        "    print('temp', tempfile.gettempdir())\n",
    )
    assert result.status == RunStatus.OK, (result.reason, result.log_tail)
    assert result.metric == 6.0
    temp = next(line.split()[1] for line in result.log_tail.splitlines() if line.startswith("temp"))
    assert Path(temp).parent == TEMP_ROOT and not Path(temp).exists()  # removed after the stage


def test_a_command_reads_no_other_run_s_temp_folder(tmp_path: Path) -> None:
    TEMP_ROOT.mkdir(mode=0o700, exist_ok=True)  # as the first stage on this machine makes it
    other = Path(tempfile.mkdtemp(prefix="run-", dir=TEMP_ROOT))
    (other / "held.txt").write_text("another run's temp file")
    try:
        result = run_script(
            tmp_path,
            f"try:\n    print(open({str(other / 'held.txt')!r}).read())\n"
            "except OSError as e:\n    print('denied', e.errno)\n"
            "print('val_loss: 1.0')\n",
        )
    finally:
        shutil.rmtree(other)
    assert result.status == RunStatus.OK, (result.reason, result.log_tail)
    assert "denied 13" in result.log_tail and "another run" not in result.log_tail


def test_a_data_loader_with_workers_is_told_why_it_cannot_run(tmp_path: Path) -> None:
    """Its queues need a semaphore in /dev/shm, which no sandboxed run may write: the run is a
    CRASH whose reason says so and what to do, not a bare PermissionError."""
    result = run_script(
        tmp_path,
        "import torch\n"
        "loader = torch.utils.data.DataLoader(list(range(8)), batch_size=2, num_workers=2)\n"
        "print('val_loss:', float(sum(next(iter(loader)))))\n",
    )
    assert result.status == RunStatus.CRASH
    assert "PermissionError" in result.reason and "num_workers=0" in result.reason, result.reason


@pytest.mark.skipif(
    landlock_abi() < 9,
    reason=f"Landlock ABI {landlock_abi()}: no right covers a pathname Unix socket before ABI 9 "
    "(Linux 7.1); a command can reach one (docs/reliability.md, open)",
)
def test_a_command_reaches_no_unix_socket_outside_its_folder(tmp_path: Path) -> None:
    service = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    path = tmp_path / "service.sock"  # a local service, as the trainer's user could reach it
    service.bind(str(path))
    service.listen(1)
    try:
        result = run_script(
            tmp_path,
            "import socket\n"
            "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
            f"try:\n    s.connect({str(path)!r})\n    print('reached')\n"
            "except OSError as e:\n    print('refused', e.errno)\n"
            "print('val_loss: 1.0')\n",
        )
    finally:
        service.close()
    assert result.status == RunStatus.OK, (result.reason, result.log_tail)
    assert "refused 13" in result.log_tail and "reached" not in result.log_tail


def test_a_temp_root_someone_else_could_enter_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/tmp is everyone's: a folder there that others may enter (or another user made first)
    is no place for a run's temp files. The run is REFUSED, naming the folder."""
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    monkeypatch.setattr("training.command_stage.TEMP_ROOT", shared)
    result = run_script(tmp_path, "print('val_loss: 1.0')\n")
    assert result.status == RunStatus.REFUSED
    assert f"{shared} is not a private folder of this user" in result.reason
