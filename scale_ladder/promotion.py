"""Judging an idea at its tier: the evidence the rules decide on (its runs paired with the
baseline's, the pooled noise, its peers' gains), the verdict and what it calls for, and how each
idea reached its tier (through every gate below, or by a spot check: spot_checks.py)."""

from __future__ import annotations

import bisect
import json
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from bus.messages import Decision, RunResult, RunStatus, Verdict, is_spot_check
from scale_ladder import baselines, direct_entries
from scale_ladder.held_out_gain import carried_held_out
from scale_ladder.idea_state import IdeaState, Phase
from scale_ladder.noise_pool import sigma_for
from scale_ladder.rules import Evidence, Outcome, PromotionRule, decide
from scale_ladder.shared_failures import blame
from scale_ladder.spot_checks import Checks, spot_check

if TYPE_CHECKING:
    from scale_ladder.ladder import Ladder

# How a look's verdicts at its entry tier begin: a look at an idea that passed every gate below
# the one it failed, and a look at one that had skipped a gate itself (a chain of looks).
SECOND_LOOK = "second look"
CHAINED_LOOK = "look after a look"


@dataclass
class Promotion:
    # (version, tier) -> mean gain of each idea the rules decided there (the rank gate's peers),
    # and the same gains sorted
    gains: dict[tuple[int, int], dict[str, float]] = field(
        default_factory=lambda: defaultdict(dict)
    )
    ranked: dict[tuple[int, int], list[float]] = field(default_factory=lambda: defaultdict(list))
    # (idea id, version, tier) -> how it got there from the tier below: True by a spot check
    # (spot_checks.py), False promoted by the rules; (lower tier) -> how such ideas fared, each
    # (idea, tier) counted once (a carried-over idea is decided again on the new champion)
    entered: dict[tuple[str, int, int], bool] = field(default_factory=dict)
    checks: dict[int, Checks] = field(default_factory=lambda: defaultdict(Checks))
    counted: set[tuple[str, int]] = field(default_factory=set)
    # (idea id, version, tier) reached by passing every gate below it (a fresh idea's tier 0
    # too): neither by a spot check nor as a second look
    gated: set[tuple[str, int, int]] = field(default_factory=set)

    def observe_decision(self, decision: Decision, top: int) -> None:
        """Fold in a Decision on an idea the ladder knows."""
        by_rules = decision.decided_by == "ladder"
        if by_rules and decision.verdict in (Verdict.PROMOTE, Verdict.REJECT):
            self._count_check(decision, top)
            if decision.delta is not None:
                self._gain(
                    decision.idea_id, decision.champion_version, decision.tier, decision.delta
                )

    def _count_check(self, decision: Decision, top: int) -> None:
        """A verdict of the rules at a tier an idea reached from the one below: count how
        that tier's promotions and spot checks fare here (spot_checks.py). Only measured
        verdicts count: a crash one tier up says nothing of the gate below (and crashes made
        on purpose would switch a gate off)."""
        idea_id, version, tier = decision.idea_id, decision.champion_version, decision.tier
        spot_check = self.entered.get((idea_id, version, tier))
        measured = decision.delta is not None
        if spot_check is not None and tier > 0 and measured and (idea_id, tier) not in self.counted:
            self.counted.add((idea_id, tier))
            passed = decision.verdict is Verdict.PROMOTE and not is_spot_check(decision.rule)
            self.checks[tier - 1] = self.checks[tier - 1].counted(spot_check, passed)
        if decision.verdict is Verdict.PROMOTE and tier < top:
            sent_on = is_spot_check(decision.rule)
            self.entered[(idea_id, version, tier + 1)] = sent_on
            if not sent_on and self.passed_below(idea_id, version, tier):
                self.gated.add((idea_id, version, tier + 1))

    def entered_directly(self, state: IdeaState) -> bool:
        """The idea is at its tier on its champion neither by a promotion from the tier below
        nor as a second look: the ladder sent it there fresh (direct_entries.py)."""
        key = (state.idea.idea_id, state.version, state.tier)
        return state.tier > 0 and not state.idea.entry_tier and key not in self.entered

    def passed_below(self, idea_id: str, version: int, tier: int) -> bool:
        """The idea reached `tier` on `version` through every gate below it (a spot check or a
        second look skips one gate: spot_checks.py, second_look.py)."""
        return tier == 0 or (idea_id, version, tier) in self.gated

    def looked_again(self, state: IdeaState) -> bool:
        """A second look at its entry tier: it skipped the gate its parent failed there (and,
        in a chain of looks, the gates its parent had skipped), so it meets the entry gate
        (second_look.py). A look carried to a new champion climbed here through the gates."""
        look = state.idea.entry_tier
        if not look or state.tier != look or not state.idea.parent_ids:
            return False
        return (state.idea.idea_id, state.version, look) not in self.entered

    def chained(self, state: IdeaState) -> bool:
        """A look whose parent had itself skipped a gate to reach the tier it failed."""
        parent = state.idea.parent_ids[0]
        return not self.passed_below(parent, state.version, state.idea.entry_tier - 1)

    def _gain(self, idea_id: str, version: int, tier: int, delta: float) -> None:
        """The idea's mean gain as the rules decided it at (version, tier), kept sorted too."""
        key = (version, tier)
        old = self.gains[key].get(idea_id)
        self.gains[key][idea_id] = delta
        ranked = self.ranked[key]
        if old is not None:
            del ranked[bisect.bisect_left(ranked, old)]
        bisect.insort(ranked, delta)

    def peer_gains(self, idea_id: str, version: int, tier: int) -> list[float]:
        """The gains of the other ideas decided at (version, tier), sorted: the rank gate's
        peers. A copy less one value, not a scan of every idea (an O(ideas) loop per verdict
        made a long-lived champion cost O(ideas²))."""
        ranked = self.ranked.get((version, tier), [])
        own = self.gains.get((version, tier), {}).get(idea_id)
        if own is None:
            return list(ranked)
        i = bisect.bisect_left(ranked, own)
        return ranked[:i] + ranked[i + 1 :]


def rejected_at(ladder: Ladder, idea_id: str) -> tuple[int, int, str, bool] | None:
    """(version, tier, patch, rejected by the rules there) of an idea: where a second look
    at it may enter (second_look.py); None for an idea never seen."""
    state = ladder.ideas.get(idea_id)
    if state is None:
        return None
    by_rules = idea_id in ladder.promotion.gains.get((state.version, state.tier), {})
    return state.version, state.tier, state.patch, state.phase is Phase.DONE and by_rules


# --- acting ---------------------------------------------------------------------------------


def try_decide(ladder: Ladder, state: IdeaState) -> None:
    """Decide the idea at its tier once its runs and the baseline's on its seeds are in."""
    key = (state.idea.idea_id, state.version, state.tier)
    wanted, got = ladder.runs.requested[key], ladder.runs.results[key]
    if not wanted:  # carried over to this champion with no run at this tier yet
        ladder.request(key[0], state.version, state.tier, state.patch, 1)
        return
    if not wanted <= got.keys():
        return
    failed = [r for r in got.values() if r.status is not RunStatus.OK or r.metric is None]
    blamed = blame(ladder, state, failed) if failed else False
    if blamed is True:
        return  # the champion's run on a failed seed is still coming, or a second try is
    if isinstance(blamed, RunResult):
        r, runs = blamed, ladder.runs.made(key)
        why = f"seed {r.seed} ended {r.status.value}: {r.reason or 'no metric'}"
        if len(ladder.runs.attempts.get((*key, r.seed), ())) > 1:
            why += " (its second try: the first failed as the champion's run on that seed did)"
        ladder.decide(state, Verdict.REJECT, why, n=len(got), runs=runs)
        return
    elsewhere = [r for r in got.values() if not baselines.on_corpus(ladder, r)]
    if elsewhere:  # never paired with the baseline's runs on the recorded data
        r = elsewhere[0]
        why = (
            f"seed {r.seed} ran on corpus {r.corpus_hash[:16]}, not the "
            f"{baselines.swarm_corpus(ladder)[:16]} recorded for the swarm "
            f"(trainer {r.trainer or '?'} has other data)"
        )
        ladder.decide(state, Verdict.REJECT, why, n=len(got), runs=ladder.runs.made(key))
        return
    pairs = baselines.pairs(ladder, state.version, state.tier, wanted)
    if pairs is None:
        return  # the baseline of a seed is still coming (or will be tried again)
    rule = rule_of(ladder, state)
    outcome = decide(rule, _evidence(ladder, state))
    if outcome.verdict is Verdict.HELD:
        return  # the baseline ignores its seed: wait, undecided (baselines.py says why)
    carried = None
    if outcome.verdict is Verdict.PROMOTE:
        carried = carried_held_out(ladder, state, pairs)
    if carried is not None:  # its gain, as the peers' rank gate counts it, is the control one
        why, on_control = carried
        outcome = replace(outcome, verdict=Verdict.REJECT, rule=why, delta=on_control)
    _apply(ladder, state, outcome, pairs, entry_note(ladder, state, rule), carried is None)


def rule_of(ladder: Ladder, state: IdeaState) -> PromotionRule:
    """The rule the idea meets at its tier: the tier's, or as strict as every gate it skipped
    and its own together where it skipped any (a direct entry, a second look)."""
    if ladder.promotion.entered_directly(state):
        return direct_entries.entry_rule(ladder.tiers, state.tier)
    if ladder.promotion.looked_again(state):
        return direct_entries.entry_rule(ladder.tiers, state.tier, skipped_from(ladder, state))
    return ladder.tiers[state.tier].rule


def skipped_from(ladder: Ladder, state: IdeaState) -> int:
    """The lowest tier whose gate a look's recipe skipped on its way to its entry tier: down
    the chain of looks to the idea that reached its tier through the gates (it failed that
    one), by a spot check (it failed the one below too) or fresh (every one below)."""
    promotion, version, look = ladder.promotion, state.version, state
    while look.idea.entry_tier and look.idea.parent_ids:
        parent = ladder.ideas.get(look.idea.parent_ids[0])
        below = look.tier - 1
        if parent is None:
            break
        entered = promotion.entered.get((parent.idea.idea_id, version, below))
        if below == 0 or entered is False:
            return below  # the rules promoted it there: it failed only that tier's gate
        if entered:
            return below - 1  # a spot check sent it past the gate below that one
        look = parent  # a look itself, or sent there fresh
    return 0


def entry_note(ladder: Ladder, state: IdeaState, rule: PromotionRule) -> str:
    """What the verdicts of an idea that meets the entry gate (`rule`, from rule_of) say
    first, else ''."""
    if ladder.promotion.entered_directly(state):
        return f"{direct_entries.describe(state.tier, rule.sigmas)}: "
    if ladder.promotion.looked_again(state):
        kind = CHAINED_LOOK if ladder.promotion.chained(state) else SECOND_LOOK
        parent = state.idea.parent_ids[0]
        return f"{kind} of {parent} at tier {state.tier} (gate {rule.sigmas:.2f}σ): "
    return ""


def _evidence(ladder: Ladder, state: IdeaState) -> Evidence:
    key = (state.idea.idea_id, state.version, state.tier)
    idea = {s: r.metric for s, r in ladder.runs.results[key].items() if r.metric is not None}
    sigma = sigma_for(ladder, state.version, state.tier, key[0])
    peers = ladder.promotion.peer_gains(key[0], state.version, state.tier)
    # The whole tier's baseline, not just the pairs: rules.decide holds an idea when it
    # ignores the seed, whichever seeds the idea has (the pairs are the seeds in both).
    baseline = baselines.metrics(ladder, state.version, state.tier)
    return Evidence(idea, baseline, sigma, peers, ladder.lower_is_better)


def _apply(
    ladder: Ladder,
    state: IdeaState,
    outcome: Outcome,
    pairs: dict[int, float],
    note: str,
    may_spot_check: bool = True,
) -> None:
    key = (state.idea.idea_id, state.version, state.tier)
    seeds = ladder.in_run_order(state.tier, pairs)
    numbers: dict[str, object] = {
        "seeds": seeds,
        "idea": [ladder.runs.results[key][s].metric for s in seeds],
        "baseline": [pairs[s] for s in seeds],
    }
    carried = ladder.lineage.carried.get(key, set())
    if carried:  # runs of the same recipe made while it was tested on an earlier champion
        numbers["carried_seeds"] = sorted(carried)
    have = len(ladder.runs.requested[key])
    # Seeds whose baseline failed for good pair with nothing: ask for that many more, so
    # one broken baseline seed does not reject every idea at the tier.
    rule = ladder.tiers[state.tier].rule
    wanted = min(outcome.seeds_wanted + have - len(pairs), 2 * rule.max_seeds)
    verdict, why = outcome.verdict, outcome.rule
    why = note + why
    if verdict is Verdict.RETEST and wanted <= have:
        verdict = Verdict.REJECT  # no seed left to add: inconclusive is a no
    # A spot check (spot_checks.py) may send a reject on, if it skipped no gate below.
    checkable = may_spot_check and ladder.promotion.passed_below(*key)
    if verdict is Verdict.REJECT and key[2] < ladder.top and checkable:
        checks, least = ladder.promotion.checks[key[2]], rule.spot_checks
        checked = spot_check(checks, least, ladder.seed_secret, *key, why)
        if checked is not None:
            verdict, why = Verdict.PROMOTE, checked
    ladder.decide(
        state,
        verdict,
        why,
        delta=outcome.delta,
        sigma=outcome.sigma,
        n=outcome.n,
        details=json.dumps(numbers),
        seeds_wanted=outcome.seeds_wanted if verdict is Verdict.RETEST else 0,
        runs=ladder.runs.made(key),
    )
    if verdict is Verdict.RETEST:
        ladder.request(key[0], state.version, state.tier, state.patch, wanted)
    elif verdict is Verdict.PROMOTE and key[2] < ladder.top:
        nxt = key[2] + 1  # the fold has moved state.tier there already
        ladder.request(key[0], state.version, nxt, state.patch, 1)
    elif verdict is Verdict.PROMOTE:
        ladder.advance(state)  # PROMOTED: hold for a person, or stack now
