"""Untrusted code does not run unconfined unless the user says so (issue 16, deliverable 2).

A kernel without Landlock is made for real: the test runs `swarm` under a seccomp filter that
answers Landlock's three system calls with ENOSYS, as a kernel built without it does. Then
`swarm run` refuses to start, naming what is missing and the flag; with `--unsafe-no-sandbox`
it runs and its result says `unconfined`; and a run that reaches the experiment anyway (a
trainer whose own check was passed) is REFUSED before any of the recipe runs.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import swarm_cmd
from tests.training_helpers import TINY_LADDER

# Installs the filter on itself (it survives exec), then runs what it is given.
NO_LANDLOCK = """
import ctypes, os, struct, sys
ld, jeq, ret = 0x20, 0x15, 0x06
enosys, allow = 0x00050000 | 38, 0x7FFF0000
prog = [(ld, 0, 0, 0)]
for number in (444, 445, 446):  # landlock_create_ruleset, _add_rule, _restrict_self
    prog += [(jeq, 0, 1, number), (ret, 0, 0, enosys)]
prog += [(ret, 0, 0, allow)]
raw = b"".join(struct.pack("<HBBI", *ins) for ins in prog)
buffer = ctypes.create_string_buffer(raw)
fprog = struct.pack("<HxxxxxxQ", len(prog), ctypes.addressof(buffer))
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
assert libc.prctl(22, 2, ctypes.c_char_p(fprog), 0, 0) == 0  # PR_SET_SECCOMP, FILTER
os.execv(sys.argv[1], sys.argv[1:])
"""


def without_landlock(*command: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", NO_LANDLOCK, *command],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_without_landlock_swarm_run_refuses_unless_told_and_says_so(tmp_path: Path) -> None:
    (tmp_path / "ladder.toml").write_text(TINY_LADDER)
    config = tmp_path / "swarm.toml"
    config.write_text(f'[ladder]\npath = "{tmp_path / "ladder.toml"}"\n')
    run = [*swarm_cmd(tmp_path / "ws", "--config", str(config)), "run", "--tier", "0"]

    refused = without_landlock(*run)
    assert refused.returncode == 2, (refused.stdout, refused.stderr)
    assert "cannot confine experiments: it lacks Landlock" in refused.stderr
    assert "--unsafe-no-sandbox" in refused.stderr and "status:" not in refused.stdout

    told = without_landlock(*run, "--unsafe-no-sandbox")
    assert told.returncode == 0, (told.stdout, told.stderr)
    lines = dict(line.split(": ", 1) for line in told.stdout.splitlines() if ": " in line)
    assert lines["status"] == "OK" and lines["unconfined"].startswith("yes")
    assert "experiments run unconfined (no Landlock" in told.stderr


def test_an_experiment_that_cannot_be_confined_is_refused_before_the_recipe_runs(
    tmp_path: Path,
) -> None:
    """The runner's own check, behind the trainer's: the recipe is never imported."""
    script = f"""
import sys
sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
from pathlib import Path
from tests.training_helpers import inject, run
from training.corpus import load_corpus
corpus = load_corpus(Path({str(tmp_path / "corpus")!r}))
result = run(corpus, Path({str(tmp_path / "scratch")!r}), inject("print('RECIPE RAN')"))
print("STATUS", result.status.value, result.unconfined)
print("REASON", result.reason)
print("TAIL", result.log_tail)
"""
    done = without_landlock(sys.executable, "-c", script)
    assert done.returncode == 0, done.stderr
    assert "STATUS REFUSED False" in done.stdout, done.stdout
    assert "REASON refused: the sandbox could not be applied (landlock" in done.stdout
    assert "RECIPE RAN" not in done.stdout
