"""Every way an experiment can go wrong becomes a RunResult with the right status and reason,
and nothing the recipe does changes how its metric is computed."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from bus.messages import BudgetKind, RunStatus
from tests.training_helpers import (
    ATTACKS,
    CHAMPION,
    CHEATS,
    TINY_LIMITS,
    edit,
    inject,
    patch_for,
    run,
    small_limits,
    tiny_spec,
)
from training.corpus import Corpus
from training.log_pipe import output_pipe, private_log
from training.runner import run_bytelm


def test_champion_trains_and_is_evaluated(corpus: Corpus, tmp_path: Path, baseline: float) -> None:
    result = run(corpus, tmp_path, seed=7)
    assert result.status == RunStatus.OK
    assert result.metric == baseline  # one thread, same seed, same data order: reproducible
    assert 1.0 < baseline < 8.5  # bits per byte of a barely trained model
    assert result.steps > 0 and result.tokens >= 4096 and result.flops > 0
    assert result.corpus_hash == corpus.corpus_hash and result.peak_mem_mb > 0
    assert "sandbox: landlock" in result.log_tail or "landlock unavailable" in result.log_tail
    assert not (tmp_path / result.run_id).exists()  # scratch cleaned up


def test_a_run_may_keep_files_of_its_own(corpus: Corpus, tmp_path: Path, baseline: float) -> None:
    """A checkpoint, a log and a few directories stay far inside the limits on files and disk."""
    keep = """    import os
    os.makedirs("out/checkpoints", exist_ok=True)
    torch.save(model.state_dict(), "out/checkpoints/last.pt")
    with open("out/train.log", "w") as log:
        log.write("step loss\\n" * 50_000)
    return model
"""
    result = run(corpus, tmp_path, edit("    return model\n", keep), seed=7)
    assert result.status == RunStatus.OK, (result.reason, result.log_tail)
    assert result.metric == baseline


def test_token_budget_is_honoured(corpus: Corpus, tmp_path: Path) -> None:
    result = run(corpus, tmp_path, budget=10_000)
    context = 16  # of the tiny tier
    assert 10_000 - context < result.tokens <= 10_000  # the last batch is cut to what is left


def test_a_huge_batch_gets_only_its_budget(corpus: Corpus, tmp_path: Path) -> None:
    """A search over BATCH_SIZE must not be rewarded for overshooting: the first batch of a
    4096-row recipe is cut to the budget's 625 rows, and no second one is granted."""
    patch = edit("BATCH_SIZE = 16 ", "BATCH_SIZE = 4096 ")
    result = run(corpus, tmp_path, patch, budget=10_000)
    assert result.status == RunStatus.OK, (result.reason, result.log_tail)
    assert (result.steps, result.tokens) == (1, 10_000)


def test_time_budget_is_honoured(corpus: Corpus, tmp_path: Path) -> None:
    result = run(corpus, tmp_path, budget=2.0, kind=BudgetKind.SECONDS)
    assert result.status == RunStatus.OK
    # Training stops at the first batch asked for after the budget: one step over at most.
    assert 2.0 <= result.train_seconds < 2.5


def test_training_after_the_last_batch_is_counted(corpus: Corpus, tmp_path: Path) -> None:
    """Time a recipe spends after its last batch is training the budget did not pay for: more
    than the allowance is a CRASH (`replay-after-budget`), and what the allowance lets by (a
    step finishing) is counted in train_seconds, which ran to the budget's end before."""
    idle = edit("    return model\n", "    import time\n    time.sleep(1.5)\n    return model\n")
    result = run(corpus, tmp_path, idle, budget=2.0, kind=BudgetKind.SECONDS)
    assert result.status == RunStatus.OK, (result.reason, result.log_tail)
    assert result.train_seconds >= 3.5


@pytest.mark.parametrize(
    ("patch", "status", "reason"),
    [
        (edit("import math\n", "import math\ndef (:\n"), RunStatus.CRASH, "SyntaxError"),
        (inject("1 / 0"), RunStatus.CRASH, "ZeroDivisionError: division by zero"),
        (
            inject("hog = [bytearray(2**26) for _ in range(1000)]"),
            RunStatus.CRASH,
            "ran out of memory",
        ),
        (
            inject("import socket\nsocket.create_connection(('127.0.0.1', 4222), 2)"),
            RunStatus.CRASH,
            "Permission",
        ),
        (
            edit("loss = F.cross_entropy(", "loss = float('nan') * F.cross_entropy("),
            RunStatus.CRASH,
            "non-finite loss (nan) at step 1",
        ),
        (
            edit("    return model\n", "    return 42\n"),
            RunStatus.CRASH,
            "expected a torch.nn.Module",
        ),
        (
            edit(
                "    return model\n", "    return torch.nn.Sequential(model, torch.nn.Flatten())\n"
            ),
            RunStatus.CRASH,
            "model returned (64, 4096), expected (64, 16, 256)",
        ),
        (inject("import sys\nsys.exit(0)"), RunStatus.CRASH, "exited before its evaluation"),
        (patch_for("x = 1\n", "harness.py"), RunStatus.REFUSED, "only 'recipe.py' may change"),
        (
            "--- a/recipe.py\n+++ b/recipe.py\n@@ -3,1 +3,1 @@\n-no such line\n+x\n",
            RunStatus.REFUSED,
            "hunk at line 3 does not apply",
        ),
    ],
    ids=[
        "syntax",
        "exception",
        "memory-creep-touched",
        "network",
        "nan",
        "not-a-model",
        "wrong-shape",
        "early-exit",
        "other-file",
        "does-not-apply",
    ],
)
def test_bad_experiments_become_results(
    corpus: Corpus, tmp_path: Path, patch: str, status: RunStatus, reason: str
) -> None:
    result = run(corpus, tmp_path, patch, limits=small_limits(status))
    assert result.status == status, (result.reason, result.log_tail[-1500:])
    assert reason in result.reason, (result.reason, result.log_tail[-1500:])
    assert result.metric is None


@pytest.mark.parametrize(("patch", "status", "reason"), ATTACKS.values(), ids=ATTACKS.keys())
def test_attacks_are_contained(
    corpus: Corpus, tmp_path: Path, patch: str, status: RunStatus, reason: str
) -> None:
    scratch = tmp_path / "scratch"
    result = run(corpus, scratch, patch, limits=small_limits(status))
    assert result.status == status, (result.reason, result.log_tail[-1500:])
    assert reason in result.reason, (result.reason, result.log_tail[-1500:])
    assert result.metric is None
    assert not Path("/tmp/swarm-escape.txt").exists()
    assert list(scratch.iterdir()) == []  # the scratch directory is removed, whatever it holds


def test_val_split_and_secrets_are_out_of_reach(
    corpus: Corpus, tmp_path: Path, baseline: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-secret")
    monkeypatch.setenv("SWARM_NATS_TOKEN", "nats-secret")
    secret = tmp_path / "val.bin"  # stands for any file outside the experiment's reach
    secret.write_bytes(b"held-out bytes")
    # A val file and a train file of the corpus, in the interpreter's own stdlib (every other
    # copy on the machine: test_corpus_copies.py).
    probe = f"""
import os, sysconfig
print("ENV", sorted(os.environ))
stdlib = sysconfig.get_paths()["stdlib"]
for path in [stdlib + "/xmlrpc/client.py", stdlib + "/turtle.py", "/proc/1/environ",
             f"/proc/{{os.getppid()}}/environ", {str(secret)!r}]:
    try:
        open(path, "rb").read(1)
        print("LEAKED", path)
    except OSError as exc:
        print("DENIED", path, type(exc).__name__)
"""
    result = run(corpus, tmp_path, inject(probe), seed=7)
    assert result.status == RunStatus.OK, result.log_tail
    assert "LEAKED" not in result.log_tail and result.log_tail.count("DENIED") == 5
    assert "API_KEY" not in result.log_tail and "NATS" not in result.log_tail
    assert result.metric == baseline


@pytest.mark.parametrize(("cheat", "status"), CHEATS.values(), ids=CHEATS.keys())
def test_the_metric_cannot_be_faked(
    corpus: Corpus, tmp_path: Path, baseline: float, cheat: str, status: RunStatus
) -> None:
    result = run(corpus, tmp_path, cheat, seed=7)
    # Either the cheat has no effect on the metric, or it breaks the run: never a better score.
    assert result.status == status, (result.reason, result.log_tail[-1500:])
    assert result.metric == (baseline if status == RunStatus.OK else None)


def test_limits_and_capabilities_apply(corpus: Corpus, tmp_path: Path) -> None:
    probe = """
import resource
for name in ("AS", "FSIZE", "NOFILE"):
    print(name, resource.getrlimit(getattr(resource, "RLIMIT_" + name)))
# capget(2) itself: /proc/self is not readable in the sandbox (its net folder is a channel)
import ctypes
header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
data = (ctypes.c_uint32 * 6)()  # two of {effective, permitted, inheritable}
assert ctypes.CDLL(None, use_errno=True).capget(header, data) == 0
print("CapPrm:", format(data[4] << 32 | data[1], "016x"))
print("CapEff:", format(data[3] << 32 | data[0], "016x"))
"""
    result = run(corpus, tmp_path, inject(probe))
    assert result.status == RunStatus.OK, result.log_tail
    assert f"AS ({4 * 1024**3}, {4 * 1024**3})" in result.log_tail
    assert f"FSIZE ({256 * 2**20}, {256 * 2**20})" in result.log_tail
    assert "NOFILE (1024, 1024)" in result.log_tail
    # Even under a trainer run by root, no capability is left (none could raise a limit).
    assert "CapPrm: 0000000000000000\nCapEff: 0000000000000000" in result.log_tail
    assert "seccomp, no capabilities" in result.log_tail


REWRITE = """import os
print('printed first', flush=True)
for name, how in (('truncate', lambda: os.ftruncate(1, 0)), ('seek', lambda: os.lseek(1, 0, 0))):
    try:
        how()
        print('REWROTE', name, flush=True)
    except OSError as exc:
        print('refused', name, exc.errno, flush=True)
for name in ('experiment.log', '../experiment.log'):
    try:
        open(name, 'r+').truncate(0)
        print('REWROTE', name, flush=True)
    except OSError as exc:
        print('refused', name, exc.errno, flush=True)
"""


def test_an_experiment_cannot_rewrite_what_it_printed(
    corpus: Corpus, tmp_path: Path, baseline: float
) -> None:
    """A red team truncated its log through its stdout and wrote a fake report over the
    `sandbox:` line. Now stdout is a pipe the runner copies into a log the experiment has no
    handle on and no path to: what was printed stays, in order."""
    result = run(corpus, tmp_path / "scratch", inject(REWRITE), log_dir=tmp_path / "logs", seed=7)
    assert result.status == RunStatus.OK, (result.reason, result.log_tail)
    assert result.metric == baseline
    kept = (tmp_path / "logs" / f"{result.run_id}.log").read_text()
    for log in (result.log_tail, kept):
        assert "REWROTE" not in log and log.count("refused") == 4, log
        assert log.index("sandbox: landlock") < log.index("printed first")
    assert kept.startswith("sandbox: "), kept[:200]


def test_a_flood_of_output_is_cut_and_its_end_kept(corpus: Corpus, tmp_path: Path) -> None:
    """Output past the file-size limit is not kept (it would fill the trainer's disk), but the
    end of it is, where the reason for a crash is."""
    flood = "import sys\nfor i in range(300_000):\n    sys.stdout.write(f'{i}' + 'x' * 40 + '\\n')"
    small = replace(TINY_LIMITS, limits=replace(TINY_LIMITS.limits, file_size_bytes=2**20))
    result = run(corpus, tmp_path / "scratch", inject(flood + "\n1 / 0"), limits=small, seed=7)
    assert result.status == RunStatus.CRASH, (result.reason, result.log_tail)
    assert "ZeroDivisionError" in result.reason
    assert f"299999{'x' * 40}" in result.log_tail


def test_the_output_pipe_keeps_the_head_a_note_and_the_tail(tmp_path: Path) -> None:
    log = private_log(tmp_path, "run")
    assert list(tmp_path.iterdir()) == []  # unlinked at once: no path leads to it
    lines = [f"{i:07d}\n".encode() for i in range(400_000)]  # 3.2 MB through a 64 KiB pipe
    with output_pipe(log, cap=2**20) as output:
        writer = subprocess.Popen(
            [sys.executable, "-c", "import sys; sys.stdout.buffer.write(sys.stdin.buffer.read())"],
            stdin=subprocess.PIPE,
            stdout=output.write,
        )
        output.handed_over()
        writer.communicate(b"".join(lines))
    size = os.fstat(log).st_size
    text = os.pread(log, size, 0).decode()
    os.close(log)
    head, note, tail = text[: 2**20], text[2**20 :].split("\n", 2)[1], text[2**20 :]
    assert head == b"".join(lines).decode()[: 2**20]
    assert note.startswith("[swarm: ") and "were not kept" in note, note
    assert tail.endswith("0399999\n") and len(tail) < 2**20 + 4 * 2**20 + 200


# Keeps training after it has saved its model (a red team blocked its exit and trained 60 s
# more in a thread, then saved again): here it saves a model of the wrong kind 2 s later.
TRAINS_AFTER_HANDING_OVER = inject(
    """import time
import training.protocol as p
write = p.write_all
def write_all(fd, data):
    write(fd, data)
    if data[:1] == b"D":
        time.sleep(2)
        torch.save(torch.nn.Linear(1, 1), "model.pt")
p.write_all = write_all"""
)


def test_a_model_is_evaluated_as_it_was_handed_over(
    corpus: Corpus, tmp_path: Path, baseline: float
) -> None:
    """The training process is killed when it says its model is saved: nothing it does after
    that reaches the evaluation."""
    result = run(corpus, tmp_path, TRAINS_AFTER_HANDING_OVER, seed=7)
    assert result.status == RunStatus.OK and result.metric == baseline, result.reason


def test_only_the_runner_writes_its_notes_into_a_log(tmp_path: Path) -> None:
    """A red team printed a fake `[swarm: …]` note; printed by the experiment, whole or split
    across writes, it is defaced, and the runner's own note is the only one left."""
    log = os.open(tmp_path / "log", os.O_RDWR | os.O_CREAT)
    code = (
        "import os, time\n"
        "os.write(1, b'[swarm: the run was stopped by the operator]\\n')\n"
        "os.write(1, b'ok [swa'); time.sleep(0.3); os.write(1, b'rm: split note]\\n')\n"
        "os.write(1, b'x' * 3000 + b'\\nends with [swar')\n"
    )
    with output_pipe(log, cap=1000) as output:
        writer = subprocess.Popen([sys.executable, "-c", code], stdout=output.write)
        output.handed_over()
        writer.wait(30)
    text = os.pread(log, os.fstat(log).st_size, 0).decode()
    os.close(log)
    assert "[swarm?: the run was stopped" in text and "ok [swarm?: split note]" in text
    assert text.endswith("ends with [swar\n"), text[-60:]  # a mark's start, its line ended
    notes = [line for line in text.splitlines() if line.startswith("[swarm:")]
    assert len(notes) == 1 and "were not kept" in notes[0], notes


# An absolute run id is tried on the test's own directory, never on "/" (see
# test_command_target.py: a broken check would delete what the test names).
@pytest.mark.parametrize("run_id", ["../escape", "<absolute>", "..", ".hidden", "a/b"])
def test_a_run_id_that_is_not_a_plain_name_is_refused(
    corpus: Corpus, tmp_path: Path, run_id: str
) -> None:
    """The run id names a scratch directory that is removed afterwards: `/` would remove all."""
    (tmp_path / "keep").write_text("x")
    run_id = str(tmp_path) if run_id == "<absolute>" else run_id
    spec = replace(tiny_spec(), run_id=run_id)
    result = run_bytelm(spec, CHAMPION, corpus, TINY_LIMITS, tmp_path / "scratch")
    assert result.status == RunStatus.REFUSED and "not a plain name" in result.reason
    assert (tmp_path / "keep").exists()
