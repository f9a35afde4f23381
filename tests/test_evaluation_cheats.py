"""Models that read later bytes of their window, however they hide it, through the real trainer
and its evaluation in fresh processes: every one is REFUSED as non-causal, with no metric.

The twins' placement is unit-tested in tests/test_evaluator_probes.py; how often cheaters of
each kind would pass is measured by `python -m bench.probe_misses`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bus.messages import RunStatus
from tests.training_helpers import edit, run, small_limits
from training.corpus import Corpus


def test_non_causal_attention_is_refused(corpus: Corpus, tmp_path: Path) -> None:
    """Trained on 128 steps, non-causal attention has learned to lean on the next byte. On the
    16 steps of the other tests it had not: its predictions moved by about the probe tolerance,
    and 1 evaluation in 10 passed as causal (a CI run failed on it). A leak that small is worth
    about 0.001 bpb; what the probe must refuse is one a score can profit from."""
    patch = edit("is_causal=True", "is_causal=False")
    result = run(corpus, tmp_path, patch, limits=small_limits(RunStatus.REFUSED), budget=32768)
    assert result.status == RunStatus.REFUSED, (result.reason, result.log_tail[-1500:])
    assert "non-causal model" in result.reason and result.metric is None


def _peeker(condition: str, offset: str, at: str = ":-1") -> str:
    """A model that adds 30 to the logit of the next input byte (it looks ahead) at positions
    `at` when `condition` holds of its batch `x`, and `offset` to every logit."""
    ahead = "1:" if at == ":-1" else str(int(at) + 1)
    return edit(
        "    return model\n",
        f"""    class Peek(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, x):
            out = self.model(x) + {offset}
            if {condition}:
                out[:, {at}] += 30 * F.one_hot(x[:, {ahead}], 256)
            return out

    return Peek()
""",
    )


# The evaluation of a red team's: it replaces the harness's own loop (the experiment's process
# is the recipe's) and peeks at the next input byte, with every logit raised by 1e6.
# Hooks the evaluation process itself: unpickling the model there patches the harness's
# protocol, to answer each batch with logits that read the next input byte (the targets).
HOOKED_EVALUATION = edit(
    "    return model\n",
    """    import training.protocol as p

    def hook_then(inner):
        read, write, seen = p.read_exact, p.write_all, {}

        def read_exact(fd, n):
            seen["data"] = read(fd, n)
            return seen["data"]

        def write_all(fd, data):
            if data[:1] == b"O":  # the inputs were the last read: answer with what follows
                rows = torch.frombuffer(bytearray(seen["data"]), dtype=torch.uint8).long()
                logits = torch.zeros(rows.numel(), 256)
                logits[:-1].scatter_(1, rows[1:].unsqueeze(-1), 40.0)
                data = b"O" + logits.numpy().tobytes()
            return write(fd, data)

        p.read_exact, p.write_all = read_exact, write_all
        return inner

    class Hooked(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x)

        def __reduce__(self):
            return hook_then, (self.inner,)

    return Hooked(model)
""",
)


# Reads the next byte at one position per window, chosen by its first byte (which every twin
# of the window shares): a random twin finds it 1 time in context - 1, so it passed about a third
# of evaluations; the aimed twins look where it did far better than the train split's bigram.
PEEKS_ONCE_A_WINDOW = edit(
    "    return model\n",
    """    class Peek(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, x):
            out = self.model(x)
            for i, row in enumerate(x):
                at = int(row[0]) % (x.shape[1] - 1)
                out[i, at, int(row[at + 1])] += 30
            return out

    return Peek()
""",
)


@pytest.mark.parametrize(
    "cheat",
    [
        _peeker("True", "1e6"),
        _peeker("x.shape[0] > 1", "0"),  # honest only where probes used to be: batches of one
        _peeker("True", "0", at="0"),  # a red team's: passed 88% when twins split at random
        PEEKS_ONCE_A_WINDOW,
        HOOKED_EVALUATION,
    ],
    ids=[
        "peek-with-offset",
        "peek-except-in-batches-of-one",
        "peek-at-0",
        "peek-once-a-window",
        "hooked-evaluation",
    ],
)
def test_a_model_that_looks_ahead_is_refused_however_it_hides(
    corpus: Corpus, tmp_path: Path, cheat: str
) -> None:
    result = run(corpus, tmp_path, cheat, seed=7)
    assert result.status == RunStatus.REFUSED, (result.status, result.metric, result.reason)
    assert "non-causal model: log-probabilities" in result.reason and result.metric is None


# Reads the next input byte (non-causal), except over the prefix a window shares with one it
# was sent before: there it replays what it answered then (so a probe's twin would match it). It
# keeps what it has seen in memory and tries to carry it on in a file; each batch is answered by
# a fresh process that can write nothing, so it never sees a window twice.
REPLAYING_PEEKER = edit(
    "    return model\n",
    """    import pickle

    class Peek(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model, self.seen = model, []

        def forward(self, x):
            try:
                with open("seen.pkl", "rb") as f:
                    self.seen += pickle.load(f)
            except Exception:
                pass
            honest = self.model(x)
            out = honest.clone()
            out[:, :-1] += 30 * F.one_hot(x[:, 1:], 256)
            for i, row in enumerate(x):
                for old_row, old_out in self.seen:
                    shared = int((row == old_row).long().cumprod(0).sum())
                    if shared >= 4:
                        out[i, :shared] = old_out[:shared]
                self.seen.append((row.clone(), out[i].clone()))
            for where in ("seen.pkl", "/tmp/seen.pkl", "/dev/shm/seen.pkl"):
                try:
                    with open(where, "wb") as f:
                        pickle.dump(self.seen, f)
                except Exception:
                    pass
            return out

    return Peek()
""",
)


def test_a_non_causal_model_that_remembers_its_windows_is_caught(
    corpus: Corpus, tmp_path: Path
) -> None:
    """Was a known hole while one process answered every batch (a strict xfail pinned it)."""
    result = run(corpus, tmp_path, REPLAYING_PEEKER, seed=7)
    assert result.status == RunStatus.REFUSED, (result.status, result.metric, result.reason)
    assert "non-causal model" in result.reason and result.metric is None
