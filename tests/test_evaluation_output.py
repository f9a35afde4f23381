"""What an evaluation process says, and where it goes: each batch is answered by a fresh
process (training/fresh_eval.py), and nothing it prints may carry its windows into a log,
through the real trainer."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from bus.messages import RunStatus
from tests.training_helpers import TINY_LIMITS, edit, run
from training.corpus import Corpus

# Prints every window it is sent (so a later run could read them in this one's log tail), and
# tries to leave them in a file; otherwise an honest model.
WINDOW_PRINTER = edit(
    "    return model\n",
    """    class Printer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, x):
            text = "WINDOW " + bytes(x.to(torch.uint8).flatten().tolist()).hex()
            for say in (lambda: print(text, flush=True), lambda: open("w.txt", "w").write(text)):
                try:
                    say()
                except Exception:
                    pass
            return self.model(x)

    return Printer()
""",
)


def test_what_a_model_prints_while_evaluated_reaches_no_one(
    corpus: Corpus, tmp_path: Path, baseline: float
) -> None:
    """The red team printed the eval windows into four runs' log tails and recalled them in a
    fifth: nothing an evaluation process prints is kept, and it can write no file."""
    result = run(corpus, tmp_path, WINDOW_PRINTER, seed=7, log_dir=tmp_path / "logs")
    assert result.status == RunStatus.OK and result.metric == baseline, result.reason
    # Printed once in training (_check_shape's dummy batch, all zeros): never a real window.
    kept = (tmp_path / "logs" / f"{result.run_id}.log").read_text()
    printed = [line for line in kept.splitlines() if line.startswith("WINDOW")]
    assert printed and all(set(line.split()[1]) == {"0"} for line in printed), printed
    assert "WINDOW" not in result.log_tail.replace(printed[0], "")
    assert not list(tmp_path.rglob("w.txt"))


def loads_saying(then: str) -> str:
    """A recipe whose model prints its evaluation process's pid as it is loaded, then runs
    `then`: a red team passed window bytes from one evaluation process to the next through the
    process-id counter, and the next printed them as it loaded, into the kept log."""
    return edit(
        "    return model\n",
        f"""    class Talker(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def __setstate__(self, state):
            import os
            print("LOADED", os.getpid(), flush=True)
            {then}
            super().__setstate__(state)

        def forward(self, x):
            return self.model(x)

    return Talker()
""",
    )


def test_what_an_evaluation_process_says_while_loading_is_kept_only_if_it_fails(
    corpus: Corpus, tmp_path: Path, baseline: float
) -> None:
    quiet = run(corpus, tmp_path, loads_saying("pass"), seed=7, log_dir=tmp_path / "logs")
    assert quiet.status == RunStatus.OK and quiet.metric == baseline, quiet.reason
    kept = (tmp_path / "logs" / f"{quiet.run_id}.log").read_text()
    assert "LOADED" not in kept and "LOADED" not in quiet.log_tail
    refused = run(corpus, tmp_path, loads_saying("raise ValueError('not here')"), seed=7)
    assert refused.status == RunStatus.CRASH
    assert refused.reason.startswith("the trained model could not be loaded"), refused.reason
    assert refused.reason.endswith("ValueError: not here"), refused.reason
    assert refused.log_tail.count("LOADED") == 1  # the first process failed: its words kept


def test_a_load_error_after_a_flood_of_output_is_still_the_reason(
    corpus: Corpus, tmp_path: Path
) -> None:
    """Past the log's room the pipe keeps a note and the output's end, where the error is: all
    of what a failing evaluation process said reaches the run's log, not its first bytes only."""
    limits = replace(TINY_LIMITS, limits=replace(TINY_LIMITS.limits, file_size_bytes=2**20))
    flood = loads_saying("print('x' * 2**21, flush=True); raise ValueError('not here')")
    result = run(corpus, tmp_path, flood, limits=limits, seed=7)
    assert result.status == RunStatus.CRASH
    assert result.reason.endswith("ValueError: not here"), result.reason
