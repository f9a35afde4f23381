"""The champion versions (stacked ideas, a person's reverts), and what a new one does to the
ideas in play and to their runs.

Evidence carries over, because a run is its recipe, tier and seed (a token budget makes a seed's
run reproducible; time-budget tiers are re-run, since load on the machine leaks into their
metric: LADDER-NOTES, baseline drift):
- when an idea is stacked, its runs at each tier become the new champion's baseline on those
  seeds, and only the missing seeds are run;
- an idea in play whose recipe the new champion leaves as it was (a model brain's proposal sets
  every constant it searches, so it is carried over by value and runs the same recipe) keeps
  its runs: it is judged against the new champion from tier 0 on them, and runs only what is
  missing. Before, such an idea became STALE however far it had climbed.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bus.messages import BudgetKind, ChampionChange, ChangeKind, RunResult, RunStatus, Verdict
from recipes.identity import recipe_sha
from recipes.patch import make_patch
from scale_ladder.admission import NotAdmitted, patched_source, rebase
from scale_ladder.idea_state import IdeaState, LadderRefusal, Phase
from scale_ladder.intake import is_duplicate

if TYPE_CHECKING:
    from scale_ladder.ladder import Ladder


@dataclass
class Lineage:
    champions: dict[int, ChampionChange] = field(default_factory=dict)
    # (idea id, version) -> the newer version it was carried to with its recipe unchanged
    moved: dict[tuple[str, int], int] = field(default_factory=dict)
    # (idea id, version, tier) -> seeds whose runs came from an earlier version (not run here)
    carried: dict[tuple[str, int, int], set[int]] = field(default_factory=lambda: defaultdict(set))

    @property
    def current(self) -> int:
        return max(self.champions, default=0)


# --- folding events in ----------------------------------------------------------------------


def observe_champion(ladder: Ladder, change: ChampionChange) -> None:
    own = ladder.lineage
    own.champions[change.version] = change
    if change.idea_id in ladder.ideas and change.kind is ChangeKind.STACK:
        ladder.ideas[change.idea_id].phase = Phase.DONE
        for (index, seed), run in carried_runs(ladder, change.idea_id, change.parent_version):
            ladder.runs.stacked(change.version, index, seed, run)
            ladder.noise.touch("", change.version, index, own.current)
    if change.version == own.current and change.parent_version in own.champions:
        _carry_ideas(ladder, change)
    if change.version == own.current:
        ladder.wake()


def _carry_ideas(ladder: Ladder, change: ChampionChange) -> None:
    """Move every idea in play on the parent whose recipe the new champion leaves as it was
    onto the new champion at tier 0, with its runs (see the module's docstring)."""
    old, editable = ladder.lineage.champions[change.parent_version].source, ladder.editable
    for idea_id, state in ladder.ideas.items():
        if state.phase in (Phase.NEW, Phase.DONE) or state.version != change.parent_version:
            continue
        try:
            recipe = patched_source(old, state.patch, editable)
            patch = rebase(state.patch, old, change.source, editable)
            if patched_source(change.source, patch, editable) != recipe:
                continue  # a different recipe now: carry_over tests it from scratch
        except NotAdmitted:
            continue  # carry_over marks it STALE
        ladder.lineage.moved[(idea_id, change.parent_version)] = change.version
        state.carried(change.version, patch)
        ladder.intake.tried_on(change, idea_id, recipe)
        for (tier, _), run in carried_runs(ladder, idea_id, change.parent_version):
            carry_run(ladder, idea_id, change.version, tier, run)
        if ladder.runs.requested[(idea_id, change.version, 0)]:
            ladder.tested(idea_id, change.version, 0)


def observe_result(ladder: Ladder, result: RunResult) -> None:
    """An idea's result: if it finished after its idea was carried over, it counts there too."""
    newer = ladder.lineage.moved.get((result.idea_id, result.champion_version))
    if newer is not None:
        carry_run(ladder, result.idea_id, newer, result.tier, result)


def carry_run(ladder: Ladder, idea_id: str, version: int, tier: int, run: RunResult) -> None:
    """An idea's successful run on an earlier version, as its run on `version`: the same
    recipe on the same seed (token-budget tiers only)."""
    if not _reusable(ladder, tier, run):
        return
    key, runs = (idea_id, version, tier), ladder.runs
    if runs.carry(key, run):
        ladder.noise.touch(idea_id, version, tier, ladder.current)
        ladder.lineage.carried[key].add(run.seed)
        if idea_id in runs.tested_at.get((version, tier), {}):
            ladder.baselines.need(version, tier, {run.seed})
        ladder.dirty[idea_id] = None
        if tier == 0 or idea_id in runs.tested_at[(version, tier)]:
            ladder.baselines_dirty = True
    newer = ladder.lineage.moved.get((idea_id, version))
    if newer is not None:  # carried on again since
        carry_run(ladder, idea_id, newer, tier, run)


def carried_runs(
    ladder: Ladder, idea_id: str, version: int
) -> list[tuple[tuple[int, int], RunResult]]:
    """((tier, seed), run) of an idea's successful runs on `version` at token-budget tiers:
    once it is stacked onto `version`, runs of the new champion's recipe."""
    carried = []
    for tier in ladder.tiers:
        for seed, run in sorted(
            ladder.runs.results.get((idea_id, version, tier.index), {}).items()
        ):
            if _reusable(ladder, tier.index, run):
                carried.append(((tier.index, seed), run))
    return carried


def _reusable(ladder: Ladder, tier: int, run: RunResult) -> bool:
    """A run that stands for its recipe on its seed wherever that recipe is tested: it
    succeeded, on a token budget (a seed's run is reproducible)."""
    ok = run.status is RunStatus.OK and run.metric is not None
    return ok and ladder.tiers[tier].budget_kind is BudgetKind.TOKENS


# --- acting ---------------------------------------------------------------------------------


def start(ladder: Ladder) -> None:
    """Champion v1, the initial recipe, when there is none yet."""
    if not ladder.lineage.champions:
        source = ladder.initial_source
        ladder.emit(
            ChampionChange(
                1, 0, ChangeKind.INITIAL, recipe_sha(source), reason="initial", source=source
            )
        )


def carry_over(ladder: Ladder, state: IdeaState) -> None:
    """The champion moved on: test the idea again on it from tier 0, or mark it STALE."""
    current = ladder.current
    try:
        old, new = (
            ladder.lineage.champions[state.version].source,
            ladder.lineage.champions[current].source,
        )
        patch = rebase(state.patch, old, new, ladder.editable)
    except NotAdmitted as exc:
        why = f"champion moved from v{state.version} to v{current}: {exc}"
        spent = ladder.runs.made((state.idea.idea_id, state.version, state.tier))
        ladder.decide(state, Verdict.STALE, why, version=current, runs=spent)
        return
    if not is_duplicate(ladder, state, patch):
        ladder.request(state.idea.idea_id, current, 0, patch, 1)


def stack(ladder: Ladder, state: IdeaState) -> None:
    current = ladder.lineage.champions[ladder.current]
    source = ladder.recipe_of(current.version, state.patch)
    reason = f"stacked {state.idea.idea_id}: {state.idea.hypothesis}"[:2000]
    ladder.emit(
        ChampionChange(
            current.version + 1,
            current.version,
            ChangeKind.STACK,
            recipe_sha(source),
            idea_id=state.idea.idea_id,
            patch=state.patch,
            reason=reason,
            source=source,
            carried_runs=len(carried_runs(ladder, state.idea.idea_id, current.version)),
        )
    )


def revert(ladder: Ladder, version: int, who: str) -> None:
    """A person's request: a new champion version with the recipe of `version`."""
    champions = ladder.lineage.champions
    if version not in champions:
        raise LadderRefusal(f"no champion v{version} (versions 1..{ladder.current})")
    current = champions[ladder.current]
    source = champions[version].source
    if source == current.source:
        raise LadderRefusal(f"v{version} is the same recipe as the current v{current.version}")
    ladder.emit(
        ChampionChange(
            current.version + 1,
            current.version,
            ChangeKind.REVERT,
            recipe_sha(source),
            patch=make_patch(current.source, source, ladder.editable),
            reason=f"reverted to v{version} by {who}",
            source=source,
        )
    )
