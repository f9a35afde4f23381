"""Every way an experiment can go wrong becomes a RunResult with the right status and reason,
and nothing the recipe does changes how its metric is computed."""

from __future__ import annotations

from pathlib import Path

import pytest

from bus.messages import BudgetKind, RunStatus
from tests.training_helpers import edit, inject, patch_for, run
from training.corpus import Corpus
from training.runner import RunLimits
from training.sandbox import Limits


@pytest.fixture(scope="module")
def baseline(corpus: Corpus, tmp_path_factory: pytest.TempPathFactory) -> float:
    result = run(corpus, tmp_path_factory.mktemp("scratch"), seed=7)
    assert result.status == RunStatus.OK, result.reason + result.log_tail
    assert result.metric is not None
    return result.metric


def test_champion_trains_and_is_evaluated(corpus: Corpus, tmp_path: Path, baseline: float) -> None:
    result = run(corpus, tmp_path, seed=7)
    assert result.status == RunStatus.OK
    assert result.metric == baseline  # one thread, same seed, same data order: reproducible
    assert 1.0 < baseline < 8.5  # bits per byte of a barely trained model
    assert result.steps > 0 and result.tokens >= 4096 and result.flops > 0
    assert result.corpus_hash == corpus.corpus_hash and result.peak_mem_mb > 0
    assert "sandbox: landlock" in result.log_tail or "landlock unavailable" in result.log_tail
    assert not (tmp_path / result.run_id).exists()  # scratch cleaned up


def test_token_budget_is_honoured(corpus: Corpus, tmp_path: Path) -> None:
    result = run(corpus, tmp_path, budget=10_000)
    batch = 16 * 16  # BATCH_SIZE x context of the tiny tier
    assert 10_000 <= result.tokens < 10_000 + batch  # at most one batch over


def test_time_budget_is_honoured(corpus: Corpus, tmp_path: Path) -> None:
    result = run(corpus, tmp_path, budget=2.0, kind=BudgetKind.SECONDS)
    assert result.status == RunStatus.OK
    # Training stops at the first batch asked for after the budget: one step over at most.
    assert 2.0 <= result.train_seconds < 2.5


@pytest.mark.parametrize(
    ("patch", "status", "reason"),
    [
        (edit("import math\n", "import math\ndef (:\n"), RunStatus.CRASH, "SyntaxError"),
        (inject("1 / 0"), RunStatus.CRASH, "ZeroDivisionError: division by zero"),
        (inject("while True:\n    pass"), RunStatus.TIMEOUT, "wall-clock limit of 8s"),
        (inject("hog = bytearray(64 * 1024**3)"), RunStatus.OOM, "out of memory"),
        (inject("hog = [bytearray(2**26) for _ in range(1000)]"), RunStatus.OOM, "out of memory"),
        (inject("import os\nos.fork()"), RunStatus.CRASH, "Operation not permitted"),
        (
            inject("import subprocess\nsubprocess.run(['ls'])"),
            RunStatus.CRASH,
            "Operation not permitted",
        ),
        (
            inject("import socket\nsocket.create_connection(('127.0.0.1', 4222), 2)"),
            RunStatus.CRASH,
            "Permission",
        ),
        (
            inject("open('/tmp/swarm-escape.txt', 'w').write('x')"),
            RunStatus.CRASH,
            "PermissionError",
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
            "model returned (16, 4096), expected (16, 16, 256)",
        ),
        (inject("import sys\nsys.exit(0)"), RunStatus.CRASH, "exited before its evaluation"),
        (patch_for("x = 1\n", "harness.py"), RunStatus.REFUSED, "only 'recipe.py' may change"),
        (
            "--- a/recipe.py\n+++ b/recipe.py\n@@ -3,1 +3,1 @@\n-no such line\n+x\n",
            RunStatus.REFUSED,
            "hunk at line 3 does not apply",
        ),
        (edit("is_causal=True", "is_causal=False"), RunStatus.REFUSED, "non-causal model"),
    ],
    ids=[
        "syntax",
        "exception",
        "hang",
        "huge-alloc",
        "memory-creep",
        "fork",
        "exec",
        "network",
        "write-outside",
        "nan",
        "not-a-model",
        "wrong-shape",
        "early-exit",
        "other-file",
        "does-not-apply",
        "non-causal",
    ],
)
def test_bad_experiments_become_results(
    corpus: Corpus, tmp_path: Path, patch: str, status: RunStatus, reason: str
) -> None:
    # A smaller address space keeps the memory tests quick (4 GiB of zeroed pages takes long).
    memory = Limits(address_space_bytes=3 * 1024**3)
    limits = RunLimits(
        time_limit_s=8 if "while True" in patch else 60, eval_tokens=512, limits=memory
    )
    result = run(corpus, tmp_path, patch, limits=limits)
    assert result.status == status, (result.reason, result.log_tail[-1500:])
    assert reason in result.reason, (result.reason, result.log_tail[-1500:])
    assert result.metric is None
    assert not Path("/tmp/swarm-escape.txt").exists()


def test_val_split_and_secrets_are_out_of_reach(
    corpus: Corpus, tmp_path: Path, baseline: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-secret")
    monkeypatch.setenv("SWARM_NATS_TOKEN", "nats-secret")
    secret = tmp_path / "val.bin"  # stands for any file outside the experiment's reach
    secret.write_bytes(b"held-out bytes")
    probe = f"""
import os, sysconfig
print("ENV", sorted(os.environ))
for path in [sysconfig.get_paths()["stdlib"] + "/idlelib/run.py", "/proc/1/environ",
             {str(secret)!r}]:
    try:
        open(path, "rb").read(1)
        print("LEAKED", path)
    except OSError as exc:
        print("DENIED", path, type(exc).__name__)
"""
    result = run(corpus, tmp_path, inject(probe), seed=7)
    assert result.status == RunStatus.OK, result.log_tail
    assert "LEAKED" not in result.log_tail and result.log_tail.count("DENIED") == 3
    assert "API_KEY" not in result.log_tail and "NATS" not in result.log_tail
    assert result.metric == baseline


@pytest.mark.parametrize(
    "cheat",
    [
        # Tampering with the evaluator or the protocol inside the experiment process.
        "import training.evaluator as e\ne.Evaluation.finish = lambda self: 0.0",
        "import training.protocol as p\np.VOCAB = 2",
        # Claiming a metric in the output.
        "print('val_bpb: 0.0001')",
        # Walking up the stack to find and change the harness's state.
        "import sys\nf = sys._getframe(1)\nf.f_globals['EXIT_RECIPE_ERROR'] = 0",
    ],
    ids=["monkeypatch-evaluator", "monkeypatch-protocol", "fake-metric", "frame-inspection"],
)
def test_the_metric_cannot_be_faked(
    corpus: Corpus, tmp_path: Path, baseline: float, cheat: str
) -> None:
    result = run(corpus, tmp_path, inject(cheat), seed=7)
    # Either the cheat has no effect on the metric, or it breaks the run: never a better score.
    if "protocol" in cheat:
        assert result.status == RunStatus.CRASH and result.metric is None
    else:
        assert result.status == RunStatus.OK, result.log_tail
        assert result.metric == baseline


def test_rlimits_apply(corpus: Corpus, tmp_path: Path) -> None:
    probe = "import resource\nprint('AS', resource.getrlimit(resource.RLIMIT_AS)[0])"
    result = run(corpus, tmp_path, inject(probe))
    assert f"AS {4 * 1024**3}" in result.log_tail
