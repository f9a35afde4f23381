"""Small experiments for tests: a tiny model, a tiny budget, patches made from edits."""

from __future__ import annotations

import difflib
from pathlib import Path

from bus.messages import BudgetKind, RunResult, RunSpec, new_id
from training.corpus import Corpus
from training.runner import RunLimits, run_bytelm
from training.targets import RECIPE

TINY_DIALS = {"depth": 1, "width": 32, "context": 16}
TINY_LIMITS = RunLimits(time_limit_s=60, eval_tokens=512)
CHAMPION = RECIPE.read_text()


def patch_for(new_source: str, name: str = "recipe.py") -> str:
    return "".join(
        difflib.unified_diff(
            CHAMPION.splitlines(True), new_source.splitlines(True), f"a/{name}", f"b/{name}"
        )
    )


def edit(old: str, new: str) -> str:
    """A patch replacing `old` (which must occur in the champion) with `new`."""
    assert old in CHAMPION, old
    return patch_for(CHAMPION.replace(old, new, 1))


def inject(code: str) -> str:
    """A patch running `code` (indented for the body of train()) at the start of train()."""
    body = "".join(f"    {line}\n" for line in code.strip().splitlines())
    return edit("def train(ctx):\n", "def train(ctx):\n" + body)


def tiny_spec(
    patch: str = "", seed: int = 0, budget: float = 4096, kind: BudgetKind = BudgetKind.TOKENS
) -> RunSpec:
    return RunSpec(
        run_id=new_id("run"),
        tier=0,
        seed=seed,
        champion_version=1,
        budget_kind=kind,
        budget=budget,
        patch=patch,
        dials=dict(TINY_DIALS),
    )


def run(
    corpus: Corpus, scratch: Path, patch: str = "", limits: RunLimits = TINY_LIMITS, **spec: object
) -> RunResult:
    return run_bytelm(tiny_spec(patch, **spec), CHAMPION, corpus, limits, scratch)  # type: ignore[arg-type]


TINY_LADDER = """[[tier]]
name = "tiny"
depth = 1
width = 32
context = 16
budget_kind = "tokens"
budget = 4096
time_limit_s = 60
eval_tokens = 512
seeds = 1
"""
