"""Admitting an idea onto the current champion: it is for this swarm's target, its patch makes
the recipe it names and moves nothing held fixed, and it is neither a duplicate nor a
near-duplicate of an idea tried on that champion; or it is a second look, admitted at its entry
tier (second_look.py). What a patch itself must be, and rebasing one: admission.py.

The duplicate checks look ideas up in indexes of the recipes tried on each champion, built in
the fold (an idea's first RunSpec on a champion, or its carrying over to one: lineage.py), so a
replay rebuilds them.
"""

from __future__ import annotations

import contextlib
import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bus.messages import ChampionChange, RunSpec, Verdict
from recipes.fixed import moved_fixed
from recipes.identity import fingerprint, recipe_sha
from scale_ladder import direct_entries
from scale_ladder.admission import MAX_HYPOTHESIS_CHARS, NotAdmitted, patched_source, rebase
from scale_ladder.idea_state import IdeaState, Phase
from scale_ladder.near_duplicates import PatchChange, nearest, patch_change
from scale_ladder.promotion import rejected_at
from scale_ladder.runs import BASELINE_NAME
from scale_ladder.second_look import second_look_refusal

if TYPE_CHECKING:
    from scale_ladder.ladder import Ladder


class Misnamed(NotAdmitted):
    """An idea that names another recipe than its patch makes: refused, whatever its champion."""


@dataclass
class Intake:
    fingerprints: dict[tuple[int, str], str] = field(default_factory=dict)  # -> first idea id
    # (version, the change's values) -> (idea id, normalised change) of each idea's first
    # RunSpec there, in spec order: near-duplicates share their values (near_duplicates.py), so
    # a new idea is compared with those only, not with every idea tried on the champion
    changes: dict[tuple[int, tuple[str, ...]], list[tuple[str, PatchChange]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    # (idea looked at again, version, entry tier) -> its second look admitted there
    looked: dict[tuple[str, int, int], str] = field(default_factory=dict)

    def tried_on(self, champion: ChampionChange, idea_id: str, recipe: str) -> None:
        """Index an idea's recipe on a champion, for the duplicate checks of later ideas."""
        self.fingerprints.setdefault((champion.version, fingerprint(recipe)), idea_id)
        change = patch_change(champion.source, recipe)
        if change:
            self.changes[(champion.version, change.values)].append((idea_id, change))


def observe_spec(ladder: Ladder, state: IdeaState, spec: RunSpec) -> None:
    """An idea's RunSpec on its version or a newer one, before the idea moves there: a new
    idea's (or a second look's) first, or one on a champion it was carried or rebased to."""
    if state.phase is Phase.NEW and state.idea.entry_tier and state.idea.parent_ids:
        looked_at = (state.idea.parent_ids[0], spec.champion_version, state.idea.entry_tier)
        ladder.intake.looked.setdefault(looked_at, spec.idea_id)
    if state.phase is Phase.NEW or spec.champion_version > state.version:
        champion = ladder.lineage.champions.get(spec.champion_version)
        if champion is not None:
            with contextlib.suppress(NotAdmitted):  # only the ladder's own specs count
                source = patched_source(champion.source, spec.patch, ladder.editable)
                ladder.intake.tried_on(champion, spec.idea_id, source)


# --- acting ---------------------------------------------------------------------------------


def admit(ladder: Ladder, state: IdeaState) -> None:
    idea, current = state.idea, ladder.current
    if idea.idea_id == BASELINE_NAME:  # its run ids would be the champion's (a red team)
        ladder.refuse(state, f"the idea id {BASELINE_NAME!r} names the champion's own runs")
        return
    if idea.target != ladder.target:
        ladder.refuse(
            state, f"idea is for target {idea.target!r}, the swarm runs {ladder.target!r}"
        )
        return
    base = ladder.lineage.champions.get(idea.champion_version)
    if base is None:
        ladder.refuse(state, f"no champion v{idea.champion_version} (current: v{current})")
        return
    if len(idea.hypothesis) > MAX_HYPOTHESIS_CHARS:  # shown in prompts, views and reports
        why = f"the hypothesis is {len(idea.hypothesis)} characters; at most "
        ladder.refuse(state, f"{why}{MAX_HYPOTHESIS_CHARS} are accepted")
        return
    try:
        patch = idea.patch
        new_source = patched_source(base.source, patch, ladder.editable)
        made = recipe_sha(new_source) if idea.recipe_sha else ""
        if made != idea.recipe_sha:
            raise Misnamed(
                f"its patch makes recipe {made} of champion "
                f"v{idea.champion_version}, but the idea names recipe "
                f"{idea.recipe_sha[:80]!r}"
            )
        if moved := moved_fixed(base.source, new_source, ladder.fixed):
            raise NotAdmitted(
                f"it changes {', '.join(moved)}, held fixed by the project (target.fixed, "
                "its run command's options, or `# search: fixed` in the recipe)"
            )
        if idea.champion_version < current:
            new = ladder.lineage.champions[current].source
            patch = rebase(patch, base.source, new, ladder.editable)
        if idea.entry_tier:  # the same recipe as an idea tried here: no duplicate check
            _second_look(ladder, state, patch)
            return
    except NotAdmitted as exc:
        # STALE: it fit an older champion but not the current one; never for a false name
        fits = idea.champion_version == current or isinstance(exc, Misnamed)
        verdict = Verdict.REFUSED if fits else Verdict.STALE
        ladder.decide(state, verdict, str(exc), version=current)
        return
    if is_duplicate(ladder, state, patch):
        return
    entry = direct_entries.entry_tier(ladder, idea.idea_id, current)
    ladder.request(idea.idea_id, current, entry, patch, 1)


def _second_look(ladder: Ladder, state: IdeaState, patch: str) -> None:
    """Admit an idea's second look at its entry tier (second_look.py), or refuse it."""
    idea, current = state.idea, ladder.current
    parent = idea.parent_ids[0] if idea.parent_ids else ""
    why = second_look_refusal(
        idea,
        patch,
        current=current,
        top=ladder.top,
        champion=ladder.lineage.champions[current].source,
        editable=ladder.editable,
        parent=rejected_at(ladder, parent),
        earlier=ladder.intake.looked.get((parent, current, idea.entry_tier)),
    )
    if why is not None:
        raise NotAdmitted(why)
    ladder.request(idea.idea_id, current, idea.entry_tier, patch, 1)


def is_duplicate(ladder: Ladder, state: IdeaState, patch: str) -> bool:
    """Refuse an idea whose patched recipe, or whose change up to form (near_duplicates.py),
    is one already tried on the current champion, naming the earlier idea."""
    current = ladder.current
    champion = ladder.lineage.champions[current].source
    source = patched_source(champion, patch, ladder.editable)
    earlier = ladder.intake.fingerprints.get((current, fingerprint(source)))
    if earlier is not None and earlier != state.idea.idea_id:
        ladder.refuse(
            state,
            f"duplicate of {earlier} ({_where(ladder, earlier)}) on champion v{current}",
            details=json.dumps({"duplicate_of": earlier}),
        )
        return True
    threshold = ladder.near_duplicate_similarity
    change = patch_change(champion, source)
    earlier_changes = ladder.intake.changes.get((current, change.values), [])
    near = nearest(change, earlier_changes, threshold, exclude=state.idea.idea_id)
    if near is None:
        return False
    similarity = round(near.similarity, 4)
    ladder.refuse(
        state,
        f"near-duplicate of {near.idea_id} (similarity {similarity:.2f} ≥ {threshold:.2f}; "
        f"{_where(ladder, near.idea_id)}) on champion v{current}",
        details=json.dumps({"near_duplicate_of": near.idea_id, "similarity": similarity}),
    )
    return True


def _where(ladder: Ladder, idea_id: str) -> str:
    other = ladder.ideas.get(idea_id)
    return f"at tier {other.tier}, {other.phase.value}" if other else ""
