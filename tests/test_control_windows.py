"""Control windows: training text each run is scored on but never sent (training/control_windows
.py), and the ladder's rule that an idea's gain must show there too (scale_ladder/
held_out_gain.py). The attack is the seventh red team's: the held-out text is public, so a
recipe can carry the windows it is scored on in its patch and recall them, causally."""

from __future__ import annotations

import random
import re
from dataclasses import replace
from pathlib import Path

import torch

from bench.control_windows import carried_windows_recipe
from bus.messages import Idea, RunResult, RunSpec, RunStatus, Verdict
from scale_ladder.ladder import Ladder
from scale_ladder.tiers import load_tiers
from tests.ladder_sim import RECIPE, Runner, Sim, decisions, make_ladder, metric, ok_result
from tests.training_helpers import CHAMPION, TINY_DIALS, edit, patch_for, run
from training.control_windows import overlapping, run_control
from training.corpus import Corpus
from training.runner import RunLimits, run_bytelm

EVAL_TOKENS = 512  # of TINY_LIMITS: 32 held-out windows of the tiny tier's 16 bytes, 16 control

ONE_TIER = """
[[tier]]
name = "tiny"
depth = {depth}
width = {width}
context = {context}
budget_kind = "tokens"
budget = 4096
time_limit_s = 120
eval_tokens = {eval_tokens}
seeds = 2
max_seeds = 2
"""


def real_runner(corpus: Corpus, scratch: Path) -> Runner:
    def runner(spec: RunSpec, source: str) -> RunResult:
        limits = RunLimits(time_limit_s=120, eval_tokens=spec.eval_tokens or EVAL_TOKENS)
        return run_bytelm(spec, source, corpus, limits, scratch)

    return runner


def test_an_idea_carrying_the_held_out_windows_is_rejected_on_its_control_gain(
    corpus: Corpus, tmp_path: Path
) -> None:
    """Through the real runner and the real ladder: the carried windows score far below the
    champion on the held-out text (the attack works there), gain nothing on the control
    windows, and the idea is rejected for it, its gain recorded as the control one. Without the
    rule its held-out gain (over 1 bit per byte) would be promoted at once."""
    path = tmp_path / "ladder.toml"
    path.write_text(ONE_TIER.format(**TINY_DIALS, eval_tokens=EVAL_TOKENS))
    ladder = Ladder(load_tiers(path), "recipe.py", CHAMPION)
    sim = Sim(ladder, real_runner(corpus, tmp_path))
    sim.step()
    sim.run_all()
    attack = carried_windows_recipe(CHAMPION, corpus, TINY_DIALS["context"], EVAL_TOKENS)
    sim.feed(Idea("idea-carried", "tester", "recall the held-out windows", patch_for(attack), 1))
    sim.run_all()
    results = [m for m in sim.log if isinstance(m, RunResult)]
    ours = [r for r in results if r.idea_id == "idea-carried"]
    champion = {r.seed: r for r in results if not r.idea_id}
    assert ours and all(r.status is RunStatus.OK for r in ours), [r.reason for r in ours]
    for r in ours:
        base = champion[r.seed]
        assert r.metric is not None and base.metric is not None
        assert r.control_metric is not None and base.control_metric is not None
        assert base.metric - r.metric > 1.0  # the carried windows are recalled
        assert base.control_metric - r.control_metric < 0.1  # and nothing else is
    (decision,) = decisions(sim, "idea-carried")
    assert decision.verdict is Verdict.REJECT, decision.rule
    assert "not on training text its runs were never sent" in decision.rule
    assert decision.delta is not None and decision.delta < 0.1


def test_no_training_batch_holds_a_control_window(tmp_path: Path) -> None:
    """The rows a recipe is sent, found in a training split of random bytes (each row at one
    place), never touch the control windows its evaluation scores; with 16 of them in 256 KiB,
    4,096 rows drawn at random would touch about 8."""
    rng = random.Random(5)
    train, val = rng.randbytes(256 * 1024), rng.randbytes(64 * 1024)
    corpus = Corpus(
        torch.frombuffer(bytearray(train), dtype=torch.uint8),
        torch.frombuffer(bytearray(val), dtype=torch.uint8),
        "random",
        "test",
    )
    loop = "    for x, y in ctx.batches(BATCH_SIZE):\n"
    show = "        print('ROWS', bytes(torch.cat([x[:, :1], y], 1).flatten().tolist()).hex())\n"
    result = run(
        corpus, tmp_path / "s", edit(loop, loop + show), budget=65536, seed=3, log_dir=tmp_path
    )
    assert result.status is RunStatus.OK, (result.reason, result.log_tail)
    log = (tmp_path / f"{result.run_id}.log").read_text()
    span = TINY_DIALS["context"] + 1
    sent = bytes.fromhex("".join(re.findall(r"^ROWS ([0-9a-f]+)$", log, re.M)))
    rows = [sent[i : i + span] for i in range(0, len(sent), span)]
    assert len(rows) * (span - 1) == result.tokens == 65536
    starts = torch.tensor([train.index(row) for row in rows])
    control = run_control(3, span - 1, EVAL_TOKENS, len(train))
    assert len(control) == 16
    assert not overlapping(control, starts, span, span).any()
    assert result.control_metric is not None and result.metric is not None


def test_the_rule_passes_a_gain_that_shows_on_control_text(tmp_path: Path) -> None:
    """On the ladder alone: the same held-out gain (LR 1 -> 3 in the simulated recipe) is
    promoted when 90% of it shows on the control windows, and rejected when 10% does."""

    def runner(share: float) -> Runner:
        def run_one(spec: RunSpec, source: str) -> RunResult:
            value = metric(source, spec.seed)
            gain = metric(RECIPE, spec.seed) - value
            control = value + 1.0 + (1.0 - share) * gain  # the champion's: its value + 1
            return replace(ok_result(spec, value), control_metric=control)

        return run_one

    for share, verdict in ((0.9, Verdict.PROMOTE), (0.1, Verdict.REJECT)):
        sim = Sim(make_ladder(tmp_path), runner(share))
        sim.step()
        sim.run_all()
        sim.propose("idea-lr", "LR = 1.0->LR = 3.0")
        sim.run_all()
        (first, *_) = decisions(sim, "idea-lr")
        assert first.verdict is verdict, (share, first.rule)
