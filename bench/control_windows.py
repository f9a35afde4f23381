"""Control windows at tier 0 of the shipped ladder: honest ideas and a recipe that carries the
held-out windows, each paired with the champion on the same seeds, and what the control
windows cost the evaluation.

    python -m bench.control_windows --seeds 11,12,13

For each idea: its paired gain on the held-out text (val_bpb, the mean) and on the control
windows (the median window), the shortfall (held-out gain - control gain), and whether the
ladder's rule (scale_ladder/held_out_gain.py) would let it be promoted had it cleared the
gates. Then the median evaluation seconds of the champion with and without control windows,
alternated in one run.
"""

from __future__ import annotations

import argparse
import base64
import lzma
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bus.messages import BudgetKind, RunResult, RunSpec, RunStatus, new_id
from recipes.constants import with_values
from scale_ladder.held_out_gain import not_on_control
from training import control_windows
from training.corpus import Corpus, load_corpus
from training.runner import RunLimits, run_bytelm
from training.targets import RECIPE

TIER0 = {"depth": 2, "width": 64, "context": 64}  # configs/ladder.toml's t0
BUDGET, EVAL_TOKENS = 600_000, 16_384

# The seventh red team's recall model (docs/reliability.md): the GPT, plus the bytes it was
# told about. At each position its guess is the spread of next bytes over the remembered
# windows whose prefix matches this one so far, which is causal: no probe fires.
RECALL = """

_MEM = {memory!r}


class Recall(nn.Module):
    def __init__(self, gpt, ctx):
        super().__init__()
        import base64, lzma
        self.gpt = gpt
        raw = lzma.decompress(base64.b85decode(_MEM))
        self.register_buffer("mem", torch.frombuffer(bytearray(raw), dtype=torch.uint8)
                             .view(-1, ctx + 1).long())

    def forward(self, idx):
        b, t = idx.shape
        honest = F.softmax(self.gpt(idx).float(), dim=-1)
        match = torch.cumprod((idx[:, None, :] == self.mem[None, :, :t]).long(), dim=2).float()
        counts = torch.einsum("bnt,ntv->btv", match, F.one_hot(self.mem[:, 1 : t + 1], 256).float())
        total = counts.sum(-1, keepdim=True)
        p = torch.where(total > 0, 0.9999 * counts / total.clamp(min=1) + 0.0001 * honest, honest)
        return torch.log(p.clamp(min=1e-30))

"""


def carried_windows_recipe(source: str, corpus: Corpus, context: int, eval_tokens: int) -> str:
    """`source` carrying the held-out windows a tier of `context` scores, as the red team
    carried them (lzma, base85), its model wrapped in Recall."""
    val = bytes(corpus.val.numpy())
    n, span = eval_tokens // context, context + 1
    stride = (len(val) - span) // n
    windows = b"".join(val[i * stride : i * stride + span] for i in range(n))
    memory = base64.b85encode(lzma.compress(windows, preset=9)).decode()
    carried = source.replace("\ndef train(ctx):", RECALL.format(memory=memory) + "def train(ctx):")
    carried = carried.replace("    return model\n", '    return Recall(model, dials["context"])\n')
    if "Recall(model" not in carried:
        raise ValueError("the recipe has no `return model` line to wrap")
    return carried


def ideas(corpus: Corpus) -> dict[str, str]:
    base = RECIPE.read_text()
    return {
        "LEARNING_RATE x2": with_values(base, {"LEARNING_RATE": 6e-3}),
        "LEARNING_RATE x0.5": with_values(base, {"LEARNING_RATE": 1.5e-3}),
        "WEIGHT_DECAY 0.3": with_values(base, {"WEIGHT_DECAY": 0.3}),
        "MLP_RATIO 2": with_values(base, {"MLP_RATIO": 2}),
        "BATCH_SIZE 8": with_values(base, {"BATCH_SIZE": 8}),
        "carried held-out windows": carried_windows_recipe(
            base, corpus, TIER0["context"], EVAL_TOKENS
        ),
    }


def run_one(source: str, seed: int, corpus: Corpus) -> RunResult:
    spec = RunSpec(
        run_id=new_id("run"),
        tier=0,
        seed=seed,
        champion_version=1,
        budget_kind=BudgetKind.TOKENS,
        budget=BUDGET,
        patch="",
        dials=dict(TIER0),
    )
    limits = RunLimits(time_limit_s=300, eval_tokens=EVAL_TOKENS)
    with tempfile.TemporaryDirectory() as scratch:
        result = run_bytelm(spec, source, corpus, limits, Path(scratch))
    if result.status is not RunStatus.OK:
        raise SystemExit(f"seed {seed}: {result.status.value}: {result.reason}")
    return result


def gains_table(corpus: Corpus, seeds: list[int]) -> None:
    sources = {"champion": RECIPE.read_text(), **ideas(corpus)}
    jobs = [(name, seed) for seed in seeds for name in sources]
    with ThreadPoolExecutor(2) as pool:  # two experiments at a time, as two trainers would
        done = list(pool.map(lambda job: run_one(sources[job[0]], job[1], corpus), jobs))
    results = dict(zip(jobs, done, strict=True))
    print(f"tier 0, seeds {seeds}; gains paired with the champion (positive: better)")
    print(f"{'idea':26s} {'held-out gain':>14s} {'control gain':>13s} {'shortfall':>10s}  rule")
    for name in sources:
        if name == "champion":
            continue
        pairs = [(results[("champion", s)], results[(name, s)]) for s in seeds]
        held_out = [_number(b.metric) - _number(r.metric) for b, r in pairs]
        on_control = [_number(b.control_metric) - _number(r.control_metric) for b, r in pairs]
        scale = statistics.fmean(_number(b.control_metric) for b, _ in pairs)
        held, control = statistics.fmean(held_out), statistics.fmean(on_control)
        if held <= 0:
            verdict = "no gain to judge"
        elif not_on_control(held_out, on_control, scale) is None:
            verdict = "passes"
        else:
            verdict = "REJECTED"
        print(f"{name:26s} {held:+14.4f} {control:+13.4f} {held - control:+10.4f}  {verdict}")


def _number(value: float | None) -> float:
    if value is None:
        raise SystemExit("a run has no control metric: is the training split too small?")
    return value


def eval_cost(corpus: Corpus, seeds: list[int], rounds: int) -> None:
    """The champion's evaluation seconds with and without control windows, alternated."""
    source, share = RECIPE.read_text(), control_windows.CONTROL_SHARE
    seconds: dict[bool, list[float]] = {True: [], False: []}
    for i in range(rounds):
        for with_control in (True, False):
            control_windows.CONTROL_SHARE = share if with_control else 0.0
            result = run_one(source, seeds[i % len(seeds)], corpus)
            seconds[with_control].append(result.eval_seconds)
    control_windows.CONTROL_SHARE = share
    on, off = statistics.median(seconds[True]), statistics.median(seconds[False])
    print(
        f"evaluation, median of {rounds} runs each, one at a time: {on:.2f} s with control "
        f"windows, {off:.2f} s without ({on / off:.2f}x)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="11,12,13")
    parser.add_argument("--rounds", type=int, default=5, help="evaluation-cost runs of each")
    parser.add_argument("--corpus", type=Path, default=Path(tempfile.gettempdir()) / "bench-corpus")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    corpus = load_corpus(args.corpus)
    started = time.monotonic()
    gains_table(corpus, seeds)
    eval_cost(corpus, seeds, args.rounds)
    print(f"{time.monotonic() - started:.0f} s in all")


if __name__ == "__main__":
    main()
