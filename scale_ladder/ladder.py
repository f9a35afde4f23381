"""The ladder as a fold over the swarm's events, and the actions that state calls for.

`observe(message)` folds one event in; `act()` returns the messages the state now calls for
(RunSpecs, Decisions, ChampionChanges), observing each as it makes it. Everything the ladder does
is one of those events, and the state is driven by them, so replaying the event stream (or the
ledger's rows) rebuilds it; their ids derive from what they are about (idea, version, tier, seed),
so an action repeated after a crash is dropped by JetStream and by the ledger's keys.

The flow of one idea: NEW → admitted (tier-0 RunSpecs on the current champion, or REFUSED) →
TESTING at tier k until its seeds and the baseline's are in → rules.decide: RETEST (more seeds),
REJECT, or PROMOTE (tier k+1, or at the top: PROMOTED → [HELD → approved] → stacked into a new
champion version). An idea starts each tier on one seed and gets more only while its verdict is
open (racing, rules.py). A new champion rebases every idea still in play onto it (back to tier
0; with its runs, when its recipe is unchanged) or marks it STALE; its baseline at each tier
starts from the stacked idea's runs (ladder_state.py) and only the seeds still missing are run.

A tier whose baseline has the same metric on every seed (two or more: rules.seed_ignored) is
held: its ideas get no verdict and wait, TESTING, with their runs. The baseline there is run on
the tier's `max_seeds` seeds (one equal pair can be a coarsely printed metric), and once they
are in, still equal, one Decision says so: HELD, idea "" (the champion's, as for baseline
RunSpecs), rule `seed_ignored: …` naming the seeds and the fix, id `dec-seed-ignored-v…-t…`,
published once per champion and tier. A seed with another metric lifts the hold for good (a
baseline's metrics only accumulate) and the waiting ideas are decided on all their evidence.
The hold is derived from the runs, never folded from that Decision, so a replay holds the same.
"""

from __future__ import annotations

import json

from bus.messages import (
    ChampionChange,
    ChangeKind,
    Decision,
    Message,
    RunSpec,
    RunStatus,
    Verdict,
    event_key,
)
from recipes.fixed import moved_fixed
from recipes.identity import fingerprint, recipe_sha
from recipes.patch import make_patch
from scale_ladder.admission import MAX_HYPOTHESIS_CHARS, NotAdmitted, patched_source, rebase
from scale_ladder.ladder_state import (
    BASELINE_ATTEMPTS,
    IdeaState,
    LadderRefusal,
    LadderState,
    Phase,
)
from scale_ladder.near_duplicates import nearest, patch_change
from scale_ladder.rules import (
    SEED_IGNORED,
    Evidence,
    Outcome,
    decide,
    seed_ignored,
    seed_ignored_reason,
)
from scale_ladder.second_look import second_look_refusal
from scale_ladder.spot_checks import spot_check

__all__ = ["Ladder", "LadderRefusal", "Phase"]


class Misnamed(NotAdmitted):
    """An idea that names another recipe than its patch makes: refused, whatever its champion."""


class Ladder(LadderState):
    """The state plus what it calls for: `act()`, and the requests people may make."""

    # --- acting ---------------------------------------------------------------------------

    def act(self) -> list[Message]:
        """What the state calls for now: each message is observed as it is made."""
        if not self.champions:
            source = self.initial_source
            self._emit(
                ChampionChange(
                    1, 0, ChangeKind.INITIAL, recipe_sha(source), reason="initial", source=source
                )
            )
        while self.dirty:
            idea_id = next(iter(self.dirty))
            del self.dirty[idea_id]
            state = self.ideas.get(idea_id)
            if state is not None:  # a result or spec naming an idea never seen is kept, inert
                self._advance(state)
        if self.baselines_dirty:
            self.baselines_dirty = False
            self._baselines()
        out, self._out = self._out, []
        return out

    def _emit(self, message: Message) -> None:
        self.observe(message)
        self._out.append(message)

    def _advance(self, state: IdeaState) -> None:
        if state.phase is Phase.DONE:
            return
        if state.phase is Phase.NEW:
            self._admit(state)
        elif state.version < self.current:
            self._carry_over(state)
        elif state.phase is Phase.TESTING:
            self._try_decide(state)
        elif state.phase is Phase.PROMOTED and self.require_approval:
            self._decide(state, Verdict.HELD, "passed the top tier; waits for `swarm approve`")
        elif state.phase in (Phase.PROMOTED, Phase.APPROVED):
            self._stack(state)

    def _admit(self, state: IdeaState) -> None:
        idea = state.idea
        if idea.target != self.target:
            self._refuse(
                state, f"idea is for target {idea.target!r}, the swarm runs {self.target!r}"
            )
            return
        base = self.champions.get(idea.champion_version)
        if base is None:
            self._refuse(state, f"no champion v{idea.champion_version} (current: v{self.current})")
            return
        if len(idea.hypothesis) > MAX_HYPOTHESIS_CHARS:  # shown in prompts, views and reports
            why = f"the hypothesis is {len(idea.hypothesis)} characters; at most "
            self._refuse(state, f"{why}{MAX_HYPOTHESIS_CHARS} are accepted")
            return
        try:
            patch = idea.patch
            new_source = patched_source(base.source, patch, self.editable)
            made = recipe_sha(new_source) if idea.recipe_sha else ""
            if made != idea.recipe_sha:
                raise Misnamed(
                    f"its patch makes recipe {made} of champion "
                    f"v{idea.champion_version}, but the idea names recipe "
                    f"{idea.recipe_sha[:80]!r}"
                )
            if moved := moved_fixed(base.source, new_source, self.fixed):
                raise NotAdmitted(
                    f"it changes {', '.join(moved)}, held fixed by the project (target.fixed, "
                    "its run command's options, or `# search: fixed` in the recipe)"
                )
            if idea.champion_version < self.current:
                new = self.champions[self.current].source
                patch = rebase(patch, base.source, new, self.editable)
            if idea.entry_tier:  # the same recipe as an idea tried here: no duplicate check
                self._second_look(state, patch)
                return
        except NotAdmitted as exc:
            # STALE: it fit an older champion but not the current one; never for a false name
            fits = idea.champion_version == self.current or isinstance(exc, Misnamed)
            verdict = Verdict.REFUSED if fits else Verdict.STALE
            self._decide(state, verdict, str(exc), version=self.current)
            return
        if self._is_duplicate(state, patch):
            return
        self._request(state.idea.idea_id, self.current, 0, patch, 1)

    def _second_look(self, state: IdeaState, patch: str) -> None:
        """Admit an idea's second look at its entry tier (second_look.py), or refuse it."""
        idea = state.idea
        parent = idea.parent_ids[0] if idea.parent_ids else ""
        rejected = self.rejected_at(parent)
        version, tier, _, by_rules = rejected if rejected is not None else (0, 0, "", False)
        if by_rules and not self.passed_below(parent, version, tier):
            raise NotAdmitted(
                f"a second look at {parent}: it reached tier {tier} by a spot check or "
                "as a second look, not through every gate below; a look may skip one gate"
            )
        why = second_look_refusal(
            idea,
            patch,
            current=self.current,
            top=self.top,
            champion=self.champions[self.current].source,
            editable=self.editable,
            parent=rejected,
            earlier=self.looked.get((parent, self.current, idea.entry_tier)),
        )
        if why is not None:
            raise NotAdmitted(why)
        self._request(idea.idea_id, self.current, idea.entry_tier, patch, 1)

    def _is_duplicate(self, state: IdeaState, patch: str) -> bool:
        """Refuse an idea whose patched recipe, or whose change up to form (near_duplicates.py),
        is one already tried on the current champion, naming the earlier idea."""
        champion = self.champions[self.current].source
        source = patched_source(champion, patch, self.editable)
        earlier = self.fingerprints.get((self.current, fingerprint(source)))
        if earlier is not None and earlier != state.idea.idea_id:
            self._refuse(
                state,
                f"duplicate of {earlier} ({self._where(earlier)}) on champion v{self.current}",
                details=json.dumps({"duplicate_of": earlier}),
            )
            return True
        threshold = self.near_duplicate_similarity
        change = patch_change(champion, source)
        earlier_changes = self.changes.get((self.current, change.values), [])
        near = nearest(change, earlier_changes, threshold, exclude=state.idea.idea_id)
        if near is None:
            return False
        similarity = round(near.similarity, 4)
        self._refuse(
            state,
            f"near-duplicate of {near.idea_id} (similarity {similarity:.2f} ≥ {threshold:.2f}; "
            f"{self._where(near.idea_id)}) on champion v{self.current}",
            details=json.dumps({"near_duplicate_of": near.idea_id, "similarity": similarity}),
        )
        return True

    def _where(self, idea_id: str) -> str:
        other = self.ideas.get(idea_id)
        return f"at tier {other.tier}, {other.phase.value}" if other else ""

    def _carry_over(self, state: IdeaState) -> None:
        """The champion moved on: test the idea again on it from tier 0, or mark it STALE."""
        try:
            old, new = self.champions[state.version].source, self.champions[self.current].source
            patch = rebase(state.patch, old, new, self.editable)
        except NotAdmitted as exc:
            why = f"champion moved from v{state.version} to v{self.current}: {exc}"
            spent = len(self.requested[(state.idea.idea_id, state.version, state.tier)])
            self._decide(state, Verdict.STALE, why, version=self.current, runs=spent)
            return
        if not self._is_duplicate(state, patch):
            self._request(state.idea.idea_id, self.current, 0, patch, 1)

    def _try_decide(self, state: IdeaState) -> None:
        key = (state.idea.idea_id, state.version, state.tier)
        wanted, got = self.requested[key], self.results[key]
        if not wanted:  # carried over to this champion with no run at this tier yet
            self._request(key[0], state.version, state.tier, state.patch, 1)
            return
        if not wanted <= got.keys():
            return
        failed = [r for r in got.values() if r.status is not RunStatus.OK or r.metric is None]
        if failed:
            r = failed[0]
            why = f"seed {r.seed} ended {r.status.value}: {r.reason or 'no metric'}"
            self._decide(state, Verdict.REJECT, why, n=len(got), runs=len(got))
            return
        elsewhere = [r for r in got.values() if not self.on_corpus(r)]
        if elsewhere:  # never paired with the baseline's runs on the recorded data
            r = elsewhere[0]
            why = (
                f"seed {r.seed} ran on corpus {r.corpus_hash[:16]}, not the "
                f"{self.corpus[:16]} recorded for the swarm "
                f"(trainer {r.trainer or '?'} has other data)"
            )
            self._decide(state, Verdict.REJECT, why, n=len(got), runs=len(got))
            return
        baseline = self.results[("", state.version, state.tier)]
        pairs: dict[int, float] = {}
        for seed in wanted:
            if self._baseline_ok(state.version, state.tier, seed):
                pairs[seed] = baseline[seed].metric  # type: ignore[assignment]
            elif self.baseline_finished[(state.version, state.tier, seed)] < BASELINE_ATTEMPTS:
                return  # the baseline of this seed is still coming (or will be tried again)
        outcome = decide(self.tiers[state.tier].rule, self._evidence(state, pairs))
        if outcome.verdict is Verdict.HELD:
            return  # the baseline ignores its seed: wait, undecided (_baselines says why)
        self._apply(state, outcome, pairs)

    def _evidence(self, state: IdeaState, pairs: dict[int, float]) -> Evidence:
        key = (state.idea.idea_id, state.version, state.tier)
        idea = {s: r.metric for s, r in self.results[key].items() if r.metric is not None}
        sigma = self.sigma_for(state.version, state.tier, key[0])
        peers = self.peer_gains(key[0], state.version, state.tier)
        # The whole tier's baseline, not just the pairs: rules.decide holds an idea when it
        # ignores the seed, whichever seeds the idea has (the pairs are the seeds in both).
        baseline = self.baseline_metrics(state.version, state.tier)
        return Evidence(idea, baseline, sigma, peers, self.lower_is_better)

    def _apply(self, state: IdeaState, outcome: Outcome, pairs: dict[int, float]) -> None:
        key = (state.idea.idea_id, state.version, state.tier)
        seeds = self.in_run_order(state.tier, pairs)
        numbers: dict[str, object] = {
            "seeds": seeds,
            "idea": [self.results[key][s].metric for s in seeds],
            "baseline": [pairs[s] for s in seeds],
        }
        carried = self.carried.get(key, set())
        if carried:  # runs of the same recipe made while it was tested on an earlier champion
            numbers["carried_seeds"] = sorted(carried)
        have = len(self.requested[key])
        # Seeds whose baseline failed for good pair with nothing: ask for that many more, so
        # one broken baseline seed does not reject every idea at the tier.
        rule = self.tiers[state.tier].rule
        wanted = min(outcome.seeds_wanted + have - len(pairs), 2 * rule.max_seeds)
        verdict, why = outcome.verdict, outcome.rule
        if verdict is Verdict.RETEST and wanted <= have:
            verdict = Verdict.REJECT  # no seed left to add: inconclusive is a no
        # A spot check (spot_checks.py) may send a reject on, if it skipped no gate below.
        if verdict is Verdict.REJECT and key[2] < self.top and self.passed_below(*key):
            checks, least = self.checks[key[2]], rule.spot_checks
            checked = spot_check(checks, least, self.seed_secret, *key, why)
            if checked is not None:
                verdict, why = Verdict.PROMOTE, checked
        self._decide(
            state,
            verdict,
            why,
            delta=outcome.delta,
            sigma=outcome.sigma,
            n=outcome.n,
            details=json.dumps(numbers),
            seeds_wanted=outcome.seeds_wanted if verdict is Verdict.RETEST else 0,
            runs=have - len(carried),
        )
        if verdict is Verdict.RETEST:
            self._request(key[0], state.version, state.tier, state.patch, wanted)
        elif verdict is Verdict.PROMOTE and key[2] < self.top:
            nxt = key[2] + 1  # the fold has moved state.tier there already
            self._request(key[0], state.version, nxt, state.patch, 1)
        elif verdict is Verdict.PROMOTE:
            self._advance(state)  # PROMOTED: hold for a person, or stack now

    def _stack(self, state: IdeaState) -> None:
        current = self.champions[self.current]
        source = self.recipe_of(current.version, state.patch)
        reason = f"stacked {state.idea.idea_id}: {state.idea.hypothesis}"[:2000]
        self._emit(
            ChampionChange(
                current.version + 1,
                current.version,
                ChangeKind.STACK,
                recipe_sha(source),
                idea_id=state.idea.idea_id,
                patch=state.patch,
                reason=reason,
                source=source,
                carried_runs=len(self.carried_runs(state.idea.idea_id, current.version)),
            )
        )

    def _baselines(self) -> None:
        """The champion on every seed any idea needs at each tier. Tier 0 starts as soon as the
        champion changes; a higher tier when the first idea reaches it on this champion (its
        baseline then runs alongside that idea's runs), so a new champion does not hold every
        trainer on top-tier baselines before any idea can use them. A failed baseline run is
        tried again, up to BASELINE_ATTEMPTS times per seed. A held tier's baseline is run on
        the tier's `max_seeds` seeds, then the hold is published (see the module's docstring)."""
        version = self.current
        for tier in self.tiers:
            needed = set(self.seeds_needed.get((version, tier.index), ()))
            if tier.index == 0 or needed:
                needed.add(self.seed(tier.index, 0))
                if seed_ignored(self.baseline_metrics(version, tier.index)):
                    probes = {self.seed(tier.index, i) for i in range(tier.rule.max_seeds)}
                    if all(self._baseline_settled(version, tier.index, s) for s in probes):
                        self._hold(version, tier.index)
                    needed |= probes
            for seed in sorted(needed):
                tries = self.baseline_tries[(version, tier.index, seed)]
                if self._baseline_ok(version, tier.index, seed) or tries >= BASELINE_ATTEMPTS:
                    continue
                if tries > self.baseline_finished[(version, tier.index, seed)]:
                    continue  # an attempt is still running
                self._emit(self._spec("", version, tier.index, seed, "", attempt=tries))

    def _baseline_settled(self, version: int, tier: int, seed: int) -> bool:
        """The baseline of this seed is in, or failed for good."""
        finished = self.baseline_finished[(version, tier, seed)]
        return self._baseline_ok(version, tier, seed) or finished >= BASELINE_ATTEMPTS

    def _hold(self, version: int, tier: int) -> None:
        """Say, once per champion and tier, that the tier is held because its baseline ignores
        the seed. Its ideas wait (rules.decide answers HELD for them); no idea is named."""
        decision_id = f"dec-{SEED_IGNORED.replace('_', '-')}-v{version}-t{tier}"
        if event_key(Decision.KIND, decision_id) in self.seen:
            return
        metrics = self.baseline_metrics(version, tier)
        seeds = seed_ignored(metrics)
        waiting = [
            i
            for i, state in self.ideas.items()
            if state.phase is Phase.TESTING and (state.version, state.tier) == (version, tier)
        ]
        details = {"seeds": seeds, "baseline": [metrics[s] for s in seeds], "waiting": waiting}
        self._emit(
            Decision(
                decision_id=decision_id,
                idea_id="",
                tier=tier,
                verdict=Verdict.HELD,
                champion_version=version,
                rule=seed_ignored_reason(seeds, metrics[seeds[0]], tier),
                n=len(seeds),
                details=json.dumps(details),
            )
        )

    # --- what people may ask ----------------------------------------------------------------

    def approve(self, idea_id: str, who: str) -> list[Message]:
        state = self._held(idea_id)
        self._decide(state, Verdict.PROMOTE, f"approved by {who}", by=who)
        return self.act()

    def reject(self, idea_id: str, who: str) -> list[Message]:
        state = self._held(idea_id)
        self._decide(state, Verdict.REJECT, f"rejected by {who}", by=who)
        return self.act()

    def revert(self, version: int, who: str) -> list[Message]:
        if version not in self.champions:
            raise LadderRefusal(f"no champion v{version} (versions 1..{self.current})")
        current = self.champions[self.current]
        source = self.champions[version].source
        if source == current.source:
            raise LadderRefusal(f"v{version} is the same recipe as the current v{current.version}")
        self._emit(
            ChampionChange(
                current.version + 1,
                current.version,
                ChangeKind.REVERT,
                recipe_sha(source),
                patch=make_patch(current.source, source, self.editable),
                reason=f"reverted to v{version} by {who}",
                source=source,
            )
        )
        return self.act()

    def _held(self, idea_id: str) -> IdeaState:
        state = self.ideas.get(idea_id)
        if state is None:
            raise LadderRefusal(f"no idea {idea_id}")
        if state.phase is not Phase.HELD:
            raise LadderRefusal(
                f"{idea_id} is not waiting for approval (it is {state.phase.value})"
            )
        return state

    # --- making messages ------------------------------------------------------------------

    def _request(self, idea_id: str, version: int, tier: int, patch: str, seeds: int) -> None:
        have = self.requested[(idea_id, version, tier)]
        for i in range(seeds):
            seed = self.seed(tier, i)
            if seed not in have:
                self._emit(self._spec(idea_id, version, tier, seed, patch))

    def _spec(
        self, idea_id: str, version: int, tier: int, seed: int, patch: str, attempt: int = 0
    ) -> RunSpec:
        t = self.tiers[tier]
        who = idea_id or "base"
        suffix = f"-a{attempt}" if attempt else ""
        run_id = f"run-{who}-v{version}-t{tier}-s{seed}{suffix}"
        sha = recipe_sha(self.recipe_of(version, patch))
        return t.run_spec(run_id, seed, version, idea_id, patch, self.target, self.corpus, sha)

    def _refuse(self, state: IdeaState, why: str, details: str = "") -> None:
        self._decide(state, Verdict.REFUSED, why, version=self.current, details=details)

    def _decide(
        self,
        state: IdeaState,
        verdict: Verdict,
        rule: str,
        version: int | None = None,
        n: int = 0,
        by: str = "ladder",
        **numbers: object,
    ) -> None:
        v = state.version if version is None else version
        tier = 0 if state.phase is Phase.NEW else state.tier
        tag = verdict.value.lower() if by == "ladder" else f"{verdict.value.lower()}-by-person"
        self._emit(
            Decision(
                decision_id=f"dec-{state.idea.idea_id}-v{v}-t{tier}-{tag}-n{n}",
                idea_id=state.idea.idea_id,
                tier=tier,
                verdict=verdict,
                champion_version=v,
                rule=rule,
                n=n,
                decided_by=by,
                **numbers,  # type: ignore[arg-type]
            )
        )
