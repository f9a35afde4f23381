"""What a ladder stacks that does nothing, and what it stacks that helps.

    python -m bench.search.false_stacks --sigmas 2,2,2 0,0,2
    python -m bench.search.false_stacks 2,2,2 --looks [--plain-looks]

For each setting of the tiers' noise gates (the shipped `configs/ladder.toml` otherwise, its
top-tier rules as the loader makes them), the real `Ladder` meets:
- `--swarms` swarms of `--nulls` ideas that change nothing (4 in flight at a time): how many
  were stacked, and how many reached the top tier;
- `--trials` swarms of 30 such ideas and then one idea that truly helps by `--gain` at every
  tier: how often it was stacked.
The metric is lower-is-better, seed-paired (noise every recipe on a seed shares, which pairing
removes) plus noise of each recipe's own; the per-tier levels below give a σ_d of about 0.018,
0.042 and 0.085, of the order of bytelm's tiers (README "Training"). Used to weigh screening
tiers (`sigmas = 0`) against a noise gate at every tier (README "Screening tiers").

`--looks` sends every rejected idea a second look one tier up, and every rejected look another,
up to the top (scale_ladder/second_look.py): far more than researchers do, who look only at
their nearest miss once their brain runs dry. The ladder judges a look at its entry tier at a
gate as strict as the gates it skipped and its own together; `--plain-looks` judges every look
at its tier's own gate instead, and `--free-first-looks` only the first look at an idea (the
rule until 2026-11-28: a look at a look met the stricter gate, a first look skipped a gate for
free), to show what the stricter gate holds back; `--no-chains` sends no look at a look, as the
ladder refused them before 2026-11-28.
"""

from __future__ import annotations

import argparse
import difflib
import random
import re
import tempfile
import zlib
from pathlib import Path

from bench.search.swarm_method import spec_result
from bus.messages import ChampionChange, ChangeKind, Decision, Idea, RunResult, RunSpec, RunStatus
from scale_ladder.admission import patched_source
from scale_ladder.ladder import Ladder
from scale_ladder.promotion import Promotion, rejected_at
from scale_ladder.tiers import DEFAULT_LADDER, Tier, load_tiers

RECIPE = 'TAG = "base"\nEFFECT = 0.0\n'
LEVEL = (3.1, 3.2, 2.9)
SHARED = (0.03, 0.06, 0.05)  # seed noise every recipe shares
OWN = (0.0125, 0.03, 0.06)  # each recipe's own, per seed: σ_d = √2 × this


def metric(source: str, tier: int, seed: int) -> float:
    tag = re.search(r'^TAG = "(.*)"', source, re.M).group(1)  # type: ignore[union-attr]
    effect = float(re.search(r"^EFFECT = (\S+)", source, re.M).group(1))  # type: ignore[union-attr]
    shared = random.Random(f"{tier}:{seed}").gauss(0, SHARED[tier])
    own = random.Random(zlib.crc32(f"{tier}:{seed}:{tag}".encode())).gauss(0, OWN[tier])
    return LEVEL[tier] + effect + shared + own


def tiers_with(sigmas: tuple[float, ...]) -> list[Tier]:
    """The shipped ladder with each tier's `sigmas`, loaded as a user's file would be."""
    parts = DEFAULT_LADDER.read_text().split("[[tier]]")
    assert len(parts) - 1 == len(sigmas), f"the shipped ladder has {len(parts) - 1} tiers"
    out = [parts[0]] + [
        re.sub(r"^sigmas = .*$", f"sigmas = {s!r}", p, flags=re.M)
        for s, p in zip(sigmas, parts[1:], strict=True)
    ]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "ladder.toml"
        path.write_text("[[tier]]".join(out))
        return load_tiers(path)


class Swarm:
    def __init__(self, tiers: list[Tier], secret: bytes) -> None:
        self.ladder = Ladder(tiers, "recipe.py", RECIPE, seed_secret=secret)
        self.queue: list[RunSpec] = []
        self.stacked: list[str] = []
        self.reached_top: set[str] = set()
        self._act()
        self.run()

    def _act(self) -> None:
        for out in self.ladder.act():
            if isinstance(out, RunSpec):
                self.queue.append(out)
            elif isinstance(out, ChampionChange) and out.kind is ChangeKind.STACK:
                self.stacked.append(out.idea_id)
            elif isinstance(out, Decision) and out.tier == self.ladder.top and out.idea_id:
                self.reached_top.add(out.idea_id)

    def _feed(self, message: Idea | RunResult) -> None:
        self.ladder.observe(message)
        self._act()

    def propose(self, idea_id: str, tag: str, effect: float = 0.0) -> None:
        base = self.ladder.champions[self.ladder.current].source
        new = re.sub(r"^TAG = .*$", f'TAG = "{tag}"', base, flags=re.M)
        new = re.sub(r"^EFFECT = .*$", f"EFFECT = {effect!r}", new, flags=re.M)
        lines = difflib.unified_diff(
            base.splitlines(True), new.splitlines(True), "a/recipe.py", "b/recipe.py"
        )
        self._feed(Idea(idea_id, "bench", "try", "".join(lines), self.ladder.current))

    def look_again(self, chains: bool = True) -> None:
        """A second look at every idea the rules rejected below the top on the current
        champion, and (`chains`) at every look rejected where it entered, until none is left."""
        looked: set[str] = set()
        passed = self.ladder.promotion.passed_below
        while True:
            todo = []
            for idea_id in list(self.ladder.ideas):
                rejected = rejected_at(self.ladder, idea_id)
                if idea_id in looked or rejected is None:
                    continue
                version, tier, patch, by_rules = rejected
                chained = not passed(idea_id, version, tier)
                if chained and not chains:
                    continue
                if by_rules and version == self.ladder.current and tier < self.ladder.top:
                    todo.append((idea_id, tier, patch))
            if not todo:
                return
            for idea_id, tier, patch in todo:
                looked.add(idea_id)
                look = Idea(
                    f"{idea_id}+", "bench", "look", patch, self.ladder.current,
                    parent_ids=(idea_id,), entry_tier=tier + 1,
                )  # fmt: skip
                self._feed(look)
            self.run()

    def run(self) -> None:
        while self.queue:
            spec = self.queue.pop(0)
            status, value = RunStatus.OK, None
            if spec.champion_version < self.ladder.current:
                status = RunStatus.SKIPPED
            else:
                base = self.ladder.champions[spec.champion_version].source
                source = patched_source(base, spec.patch, "recipe.py") if spec.patch else base
                value = metric(source, spec.tier, spec.seed)
            self._feed(spec_result(spec, status, value))


def nulls(
    tiers: list[Tier], swarms: int, ideas: int, looks: bool = False, chains: bool = True
) -> tuple[int, int, int]:
    """Changes that do nothing stacked, swarms with one or more, and ideas at the top tier;
    with `looks`, each reject looked at again (and, with `chains`, each rejected look)."""
    stacked = hit = top = 0
    for k in range(swarms):
        swarm = Swarm(tiers, f"nulls-{k}".encode())
        for i in range(0, ideas, 4):
            for j in range(i, min(ideas, i + 4)):
                swarm.propose(f"null-{j}", f"n{j}")
            swarm.run()
            if looks:
                swarm.look_again(chains)
        stacked += len(swarm.stacked)
        hit += bool(swarm.stacked)
        top += len(swarm.reached_top)
    return stacked, hit, top


def power(
    tiers: list[Tier], trials: int, gain: float, looks: bool = False, chains: bool = True
) -> int:
    """Of `trials` swarms, those that stacked an idea truly better by `gain` at every tier."""
    stacked = 0
    for k in range(trials):
        swarm = Swarm(tiers, f"power-{k}".encode())
        for i in range(0, 30, 4):
            for j in range(i, min(30, i + 4)):
                swarm.propose(f"null-{j}", f"n{j}")
            swarm.run()
        swarm.propose("good", f"good{k}", -gain)
        swarm.run()
        if looks:
            swarm.look_again(chains)
        stacked += "good" in swarm.stacked
    return stacked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("settings", nargs="+", help="each tier's sigmas, e.g. 2,2,2 or 0,0,2")
    parser.add_argument("--swarms", type=int, default=60)
    parser.add_argument("--nulls", type=int, default=300, help="ideas per swarm")
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--gain", type=float, default=0.06, help="about 0.7 σ_d at the top")
    parser.add_argument("--looks", action="store_true", help="second looks at every reject")
    parser.add_argument("--plain-looks", action="store_true", help="every look: its own gate")
    parser.add_argument(
        "--free-first-looks", action="store_true", help="a first look: its own gate (as before)"
    )
    parser.add_argument("--no-chains", action="store_true", help="no look at a look (as before)")
    args = parser.parse_args()
    # what the stricter gate holds back (scale_ladder/second_look.py)
    if args.plain_looks:
        Promotion.looked_again = lambda self, state: False  # type: ignore[method-assign]
    elif args.free_first_looks:
        strict = Promotion.looked_again
        Promotion.looked_again = (  # type: ignore[method-assign]
            lambda self, state: strict(self, state) and self.chained(state)
        )
    print(
        f"{args.swarms} swarms of {args.nulls} ideas that do nothing; {args.trials} swarms with "
        f"one idea {args.gain:g} better at every tier"
    )
    print(
        f"  {'sigmas':>14s} {'null stacks':>12s} {'swarms hit':>11s} {'nulls at top':>13s} "
        f"{'good stacked':>13s}"
    )
    for setting in args.settings:
        sigmas = tuple(float(s) for s in setting.split(","))
        tiers = tiers_with(sigmas)  # as loaded: a top tier above a screen asks more (rules.py)
        chains = not args.no_chains
        stacked, hit, reached = nulls(tiers, args.swarms, args.nulls, args.looks, chains)
        good = power(tiers, args.trials, args.gain, args.looks, chains)
        label = ",".join(f"{s:g}" for s in sigmas)
        print(
            f"  {label:>14s} {stacked:>12d} {hit:>11d} {reached:>13d} {good:>6d} of {args.trials}"
        )


if __name__ == "__main__":
    main()
