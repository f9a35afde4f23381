"""Promotion verdicts as pure functions of the evidence, so a restarted ladder decides the same.

An idea is compared with the champion's baseline at the same tier on the same seeds (paired):
d_i = baseline_i − idea_i for a lower-is-better metric (the sign flips for higher-is-better), so
a positive mean gain means the idea helps. It is promoted only if the mean gain clears all of
- a minimum improvement relative to the baseline mean (`min_improvement`),
- a noise gate: mean gain > sigmas × σ_d / √n, where σ_d is the spread of one paired difference
  and n the number of pairs — more seeds shrink the gate, which is what RETEST buys. σ_d is
  pooled over other ideas' pairs at this tier when there are enough (`pooled`); until then it
  is the larger of this idea's own spread (`own`) and a conservative prior (`prior`): √2 × the
  champion's spread across its seeds at this tier, the σ of a difference of two independent
  runs, which pairing only shrinks (`prior_sigma`). Two or three paired gains can agree by
  chance: judged on their own σ, an idea whose gain was inside the seed noise was promoted (a
  red team). Without a prior (fewer than two baseline seeds) the verdict waits for more seeds.
  The rule of each verdict says which σ_d it used,
- an optional rank gate: within the top `top_fraction` of ideas decided at this tier for the
  same champion, once `cold_start` of them exist (before that, the rank gate does not apply).
An idea whose gain is clearly below the minimum is rejected; an inconclusive one gets more seeds
(RETEST) up to `max_seeds`, then is rejected. Every outcome carries the numbers and the rule that
fired. See ../shared/LADDER-NOTES.md for why.

Seed honesty (seed_honesty.py): a σ_d of 0 or at the rounding of the metrics never passes the
noise gate, and a tier whose champion ignores its seed is HELD, not decided. An idea whose own
metrics are equal across seeds while the baseline's vary is rejected.

A tier below the top may be a screening tier (`sigmas = 0`, opt-in): it promotes on the minimum
improvement and the rank gate alone, a one-seed win at the first tier confirmed on a second, and
asks for no significance. Its question is which ideas are worth the next tier's compute, not
whether an idea is better for sure: the next tier re-tests every idea it sends on fresh seeds,
and the top tier, whose noise gate is required (tiers.py) and asks more above a screen
(`PromotionRule.stacks`), decides what is stacked. Below a deterministic top tier, which decides
exactly, a screen costs nothing and reaches far more (a 2σ gate at tier 0 rejected 95% of the
ideas truly better at the top on MF-Hartmann-6 "bad"); below a noisy top tier it lets many more
changes that do nothing reach the top, and some get stacked (bench/search/false_stacks.py), so
the shipped ladders do not screen (docs/benchmarks.md, "Screening tiers").

A tier may be declared deterministic (`deterministic = true`: its metric does not depend on the
seed by design, as in a simulator or a benchmark whose top fidelity has no noise). It runs each
recipe once and promotes on the minimum improvement alone (and the rank gate). Never inferred:
see `seed_ignored` above.

Racing (SMAC's intensifier, with our paired gate): once the tier has a pooled σ_d (Evidence's
`pooled_sigma`, from other ideas' pairs), one seed can settle a verdict, and an open idea doubles
its seeds (1 → 2 → 4 …) only while it could still clear the gate at `max_seeds`: it is rejected
as soon as even a one-σ optimistic view of its gain falls short of what it would need there.
The gate itself is unchanged, so seeds go where the verdict is open and obvious losers cost one
run. Without a pooled σ_d an idea's own σ from two or three pairs is no noise estimate, so it
needs the tier's `seeds` first and is judged on the larger of its own σ and the prior (the
ladder asks for them one at a time: by the time the first is in, the tier may have its σ_d);
at the top tier, one that is behind on that σ is rejected as racing would (`_behind`).
At the top tier (`PromotionRule.top`), whose PROMOTE makes a champion that no tier re-tests, the
own σ is also widened to Student's t for its few pairs (`_top_sigma`); below the top, the next
tier's fresh seeds are the check, and the normal gate stays. The widening guards PROMOTE only:
an idea behind the champion is behind on the σ before it.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bus.fast_pickle import by_fields
from bus.messages import Verdict
from scale_ladder.seed_honesty import EQUAL_GAINS, measured, seed_ignored, seed_ignored_reason

MIN_PAIRS_FOR_POOLED_SIGMA = 6


@dataclass(frozen=True, slots=True)
class PromotionRule:
    min_improvement: float = 0.002  # relative to the baseline mean (0.2%)
    sigmas: float = 2.0  # 0: a screening tier (see the module's docstring)
    top_fraction: float = 0.0  # 0 switches the rank gate off
    cold_start: int = 8
    seeds: int = 2
    max_seeds: int = 6
    # A racing win on one seed is confirmed on a second before PROMOTE: there an idea that pins
    # its own seed (ignoring the one it is given) shows as identical while the baseline moves.
    # The first tier does it (tiers.py): an idea pins its seed at every tier, and the first is
    # the cheapest place to catch it (a red team stacked 11 of 40 such ideas without it).
    confirm_wins: bool = True
    # The metric does not depend on the seed by design (a simulator, a deterministic benchmark,
    # a fixed evaluation of a fixed checkpoint): one run per recipe, no noise gate, and a gain of
    # min_improvement decides. Declared by a person, never inferred: a run that ignores the seed
    # it was given looks exactly like this, and without the declaration it holds the tier.
    deterministic: bool = False
    # The least share of the rules' rejects here sent on to the next tier anyway, to learn
    # whether this tier's gate predicts the next one (spot_checks.py); 0: none.
    spot_checks: float = 0.0
    # The most of fresh ideas sent straight to this tier, skipping those below, while the tier
    # below misleads (its promotions fail here more often than they pass: direct_entries.py);
    # 0: none. Never at tier 0, where every idea enters anyway.
    direct_entries: float = 0.0
    # The top tier's, when a tier below it screens (tiers.py sets it): its PROMOTE stacks, and
    # it is then the one gate between an idea and the champion. A win there is confirmed on a
    # second seed, and judged on the larger of the pooled σ_d and the idea's own spread: an idea
    # noisy on purpose, or lucky on the seeds it pins, gets no benefit of other ideas' calm (a
    # red team stacked such ideas through screening tiers on one top seed). With a noise gate at
    # every tier the gates below already stop them, and these asks cost regret in bench.search.
    stacks: bool = False
    # The top tier's (tiers.py sets it): its PROMOTE makes a champion, and no tier re-tests
    # it. Judged on a σ_d from its own few pairs (no pooled one yet), its gate is Student's
    # t at the level `sigmas` gives under the normal (few_pairs_sigmas): a σ from two pairs
    # has one degree of freedom, and the normal gate trusted it as if exact.
    top: bool = False


@dataclass(frozen=True, slots=True)
class Evidence:
    idea: Mapping[int, float]  # seed -> metric of the idea's successful runs
    baseline: Mapping[int, float]  # seed -> metric of the champion at this tier
    pooled_sigma: float | None = None  # σ of one paired difference, from other pairs here
    peer_gains: Sequence[float] = ()  # mean gains of ideas already decided here
    lower_is_better: bool = True


@dataclass(frozen=True, slots=True)
class Outcome:
    verdict: Verdict
    rule: str
    delta: float | None = None  # mean paired gain (positive: the idea is better)
    sigma: float | None = None  # σ of one paired difference, as used
    n: int = 0
    seeds_wanted: int = 0  # RETEST: run the idea until it has this many paired seeds


def paired_gains(evidence: Evidence) -> list[float]:
    sign = 1.0 if evidence.lower_is_better else -1.0
    seeds = sorted(set(evidence.idea) & set(evidence.baseline))
    return [sign * (evidence.baseline[s] - evidence.idea[s]) for s in seeds]


@by_fields
@dataclass(frozen=True, slots=True)
class Noise:
    """Totals behind a pooled σ_d: squared deviations of each idea's gains around its own mean,
    their degrees of freedom, and the pairs they came from. Totals add, so a tier's noise can be
    pooled over several champions."""

    squares: float = 0.0
    dof: int = 0
    pairs: int = 0

    def __add__(self, other: Noise) -> Noise:
        return Noise(self.squares + other.squares, self.dof + other.dof, self.pairs + other.pairs)

    @property
    def sigma(self) -> float | None:
        """None below MIN_PAIRS_FOR_POOLED_SIGMA pairs, or when the spread is 0 or not finite."""
        if self.pairs < MIN_PAIRS_FOR_POOLED_SIGMA or self.dof == 0:
            return None
        sigma = math.sqrt(self.squares / self.dof)
        return sigma if measured(sigma) else None


def noise(groups: Sequence[Sequence[float]], scale: float = 0.0) -> Noise:
    """Pooled totals over groups of paired gains, from metrics of size `scale`."""
    # A group whose gains are all equal is a change that does nothing the seed can see (an
    # unused constant, say): its zero spread says nothing of the noise, and three of them
    # would pool to a σ_d of 0, a gate of 0 (found by a red team). Equal up to the rounding of
    # the metrics (a constant shift of the reported metric) is the same: its degrees of
    # freedom would dilute the others' spread towards 0.
    total = Noise()
    for g in groups:
        if len(g) < 2 or len(set(g)) == 1:
            continue
        try:
            mean = statistics.fmean(g)
            squares = sum((x - mean) ** 2 for x in g)
        except OverflowError:  # a spread past what a float holds (metrics of 1e200): no measure
            continue
        if math.isfinite(squares) and measured(math.sqrt(squares / len(g)), scale):
            total += Noise(squares, len(g) - 1, len(g))
    return total


def pooled_sigma(groups: Sequence[Sequence[float]], scale: float = 0.0) -> float | None:
    """σ of one paired difference, pooled over groups (each idea's own gains, around its own
    mean, so real effects do not count as noise). None below MIN_PAIRS_FOR_POOLED_SIGMA."""
    return noise(groups, scale).sigma


def few_pairs_sigmas(sigmas: float, dof: int) -> float:
    """The gate, in σ, that a σ estimated with `dof` degrees of freedom needs for the one-sided
    level `sigmas` gives with a known σ: Student's t quantile at Φ(sigmas). 2σ is 13.97 at one
    dof (two pairs), 4.53 at two, 3.31 at three, 2.28 at ten."""
    from scipy.stats import t as student  # scipy is here for Optuna's GPSampler anyway

    # the upper tail itself: Φ(sigmas) rounds to 1.0 from about 8.3σ, and its quantile is inf
    # (a direct entry's gate over three 5σ tiers is 9.2σ); held above float's underflow
    tail = max(0.5 * math.erfc(sigmas / math.sqrt(2)), 1e-300)
    wide = float(student.isf(tail, dof))
    # t's tail is heavier than the normal's, so a quantile below `sigmas` (or not a number:
    # scipy returns -inf far out in the tail) is a numerical failure: no gate is passed then
    return wide if math.isfinite(wide) and wide >= sigmas else math.inf


def _top_sigma(
    sigmas: float, gains: Sequence[float], sigma: float, source: str
) -> tuple[float, str]:
    """The top tier's σ_d without a pooled one: the idea's own σ from its few pairs, widened so
    that the gate at `sigmas` is Student's t's (few_pairs_sigmas), when that is above the σ
    chosen so far (the prior, an unpaired spread and so already wide, is kept as it is). The
    top's PROMOTE makes a champion and no tier re-tests it; the tiers below are re-tested on
    fresh seeds and keep the normal gate. The real bytelm benchmark showed why
    (docs/benchmarks.md): an idea's two top-tier pairs, 0.060 and 0.071 better than the
    champion (own σ_d 0.008, prior 0.011), cleared the normal gate of 0.016 and were stacked; on
    two fresh seeds the stack was 0.10 worse than the champion it replaced. Here its gate is
    0.075, and it needs a third seed."""
    n = len(gains)
    own = statistics.stdev(gains)
    wide = own * few_pairs_sigmas(sigmas, n - 1) / sigmas
    if wide <= sigma:
        return sigma, source
    return wide, f"own {own:.4g} from {n} pairs, widened by Student's t; was {source}"


def least_seeds(rule: PromotionRule, pooled: float | None) -> int:
    """Paired seeds an idea needs before a verdict: one when racing (a pooled σ_d exists),
    else the tier's `seeds`."""
    return 1 if pooled is not None else rule.seeds


def decide(rule: PromotionRule, evidence: Evidence) -> Outcome:
    if rule.deterministic:
        return _decide_deterministic(rule, evidence)
    gains = paired_gains(evidence)
    n = len(gains)
    held = seed_ignored(evidence.baseline)
    if held:  # every pair would compare one number with another: nothing to decide on
        reason = seed_ignored_reason(held, evidence.baseline[held[0]])
        return Outcome(Verdict.HELD, reason, None, None, n)
    scale = max((abs(v) for v in evidence.baseline.values()), default=0.0)
    pooled = evidence.pooled_sigma if measured(evidence.pooled_sigma, scale) else None
    racing = pooled is not None
    least = least_seeds(rule, pooled)
    if n < least:
        return _more(rule, least, n, None, None, f"{n} of {least} paired seeds in")
    paired = set(evidence.idea) & set(evidence.baseline)
    idea_values = [evidence.idea[s] for s in sorted(evidence.idea)]
    # Equal on the same seeds as the baseline is equal too: no fault of the idea's (σ_d is 0).
    if n >= 2 and len(set(idea_values)) == 1 and len({evidence.baseline[s] for s in paired}) > 1:
        reason = "identical metrics across seeds: the recipe ignores the seed"
        return Outcome(Verdict.REJECT, reason, statistics.fmean(gains), None, n)
    delta = statistics.fmean(gains)
    sigma, source = _sigma(pooled, gains, evidence.baseline, scale)
    if rule.stacks and pooled is not None and n >= 2 and statistics.stdev(gains) > pooled:
        sigma, source = statistics.stdev(gains), f"own, above the pooled {pooled:.4g}"
    if sigma is None:
        if n >= rule.max_seeds:
            why = f"inconclusive at {n} seeds (max): no noise estimate{source}"
            return Outcome(Verdict.REJECT, why, delta, None, n)
        return _more(rule, n + 1, n, delta, None, f"no noise estimate yet{source}")
    baseline_mean = statistics.fmean(evidence.baseline[s] for s in paired)
    needed = rule.min_improvement * abs(baseline_mean)
    plain = sigma  # before the top's widening, which guards PROMOTE and not REJECT (below)
    if rule.top and pooled is None and n >= 2 and rule.sigmas > 0:
        sigma, source = _top_sigma(rule.sigmas, gains, sigma, source)
    gate = rule.sigmas * sigma / math.sqrt(n)
    numbers = (
        f"gain {delta:.4g} (n={n}), noise gate {rule.sigmas:g}σ/√n = {gate:.4g} "
        f"(σ_d {sigma:.4g}, {source}), minimum {needed:.4g}"
    )
    if rule.sigmas == 0:
        numbers = (
            f"gain {delta:.4g} (n={n}), minimum {needed:.4g}; a screening tier: no noise gate, "
            f"the next tier re-tests on fresh seeds (σ_d {sigma:.4g}, {source})"
        )
    if math.isinf(sigma):  # few_pairs_sigmas past float's range: a gate nothing passes
        numbers += f"; {rule.sigmas:g}σ on {n} pairs is past what Student's t can be computed for"
    elif not measured(sigma, scale):  # a gate of 0 is passed by anything: it is never passed
        numbers += f"; σ_d ≈ 0 ({EQUAL_GAINS}): no noise estimate"
    elif delta - gate > 0 and delta >= needed:
        if (rule.confirm_wins or rule.stacks) and n < 2 <= rule.max_seeds:  # one seed: see above
            why = f"a win on one seed, confirmed on a second: {numbers}"
            return _more(rule, 2, n, delta, sigma, why)
        return _rank_gate(rule, evidence, delta, sigma, n, numbers)
    if delta + gate < needed:
        return Outcome(Verdict.REJECT, f"clearly below the minimum: {numbers}", delta, sigma, n)
    if n >= rule.max_seeds:
        return Outcome(
            Verdict.REJECT, f"inconclusive at {n} seeds (max): {numbers}", delta, sigma, n
        )
    # Before a pooled σ_d, only the top tier rejects an idea for being behind: runs cost most
    # there, and few ideas reach it, so its σ_d may not come within a run at all (on bytelm's
    # 15 minutes it never did); below, ideas behind cost cheap runs, the tier soon has its σ_d
    # and races, and rejecting them early lost good ones at high noise (bench.search.savings).
    behind = _behind(rule, delta, plain, n, needed) if racing or rule.top else ""
    if behind and measured(plain, scale):
        how = "racing" if racing else "before a pooled σ_d, on σ_d " + f"{plain:.4g}"
        return Outcome(Verdict.REJECT, f"{behind} ({how}): {numbers}", delta, sigma, n)
    if racing:
        wanted = min(rule.max_seeds, 2 * n)
        return _more(rule, wanted, n, delta, sigma, f"racing, still open: {numbers}")
    # Planned on the σ before the top's widening: planned on the widened one, every open idea
    # there asked for max_seeds at once and was judged again only when all had run (in a
    # half-hour bytelm swarm one idea's four more top seeds and their baselines took 11
    # minutes; judged as they came, it was behind at its fifth). The widened gate still decides
    # whether it is promoted.
    wanted = min(rule.max_seeds, max(n + 1, _seeds_to_clear(rule, plain, delta, needed)))
    return _more(rule, wanted, n, delta, sigma, f"inconclusive: {numbers}")


def prior_sigma(baseline: Mapping[int, float]) -> float | None:
    """A conservative σ_d for a tier with no pooled one yet: √2 × the champion's spread across
    its seeds there, the σ of the difference of two independent runs (pairing only shrinks it).
    None below two seeds, or when that spread is at the rounding of the metrics."""
    values = list(baseline.values())
    if len(values) < 2:
        return None
    sigma = math.sqrt(2) * statistics.stdev(values)
    return sigma if measured(sigma, max(abs(v) for v in values)) else None


def _sigma(
    pooled: float | None, gains: Sequence[float], baseline: Mapping[int, float], scale: float
) -> tuple[float | None, str]:
    """The σ_d a verdict uses and where it came from (said in the rule of the verdict): the
    tier's pooled σ_d; else, from two pairs on, the larger of the idea's own and the prior;
    else none yet (the text says why, after "no noise estimate yet")."""
    if pooled is not None:
        return pooled, "pooled"
    if len(gains) < 2:
        return None, ""
    own = statistics.stdev(gains)
    if not measured(own, scale):  # equal gains: no estimate, whatever the prior (seed honesty)
        return own, "own"
    prior = prior_sigma(baseline)
    if prior is None:
        return None, ": no prior σ_d (the baseline's spread across seeds)"
    if prior > own:
        return prior, f"prior: √2 × the baseline's spread; own {own:.4g}"
    return own, f"own; prior {prior:.4g}"


def _decide_deterministic(rule: PromotionRule, evidence: Evidence) -> Outcome:
    """A tier declared deterministic: the one pair is the exact difference, so the minimum
    improvement is the only gate (and the rank gate, as at any tier)."""
    gains = paired_gains(evidence)
    if not gains:
        return _more(rule, 1, 0, None, None, "0 of 1 paired seeds in")
    delta, n = statistics.fmean(gains), len(gains)
    paired = set(evidence.idea) & set(evidence.baseline)
    needed = rule.min_improvement * abs(statistics.fmean(evidence.baseline[s] for s in paired))
    numbers = f"gain {delta:.4g} (n={n}, deterministic tier), minimum {needed:.4g}"
    if delta > 0 and delta >= needed:
        return _rank_gate(rule, evidence, delta, 0.0, n, numbers)
    return Outcome(Verdict.REJECT, f"below the minimum: {numbers}", delta, 0.0, n)


def _rank_gate(
    rule: PromotionRule, evidence: Evidence, delta: float, sigma: float, n: int, numbers: str
) -> Outcome:
    peers = sorted(evidence.peer_gains)  # linear when sorted already (the ladder's are)
    if rule.top_fraction <= 0 or len(peers) < rule.cold_start:
        cold = "" if rule.top_fraction <= 0 else f" (rank gate off: {len(peers)} < cold start)"
        return Outcome(Verdict.PROMOTE, f"clears the gates: {numbers}{cold}", delta, sigma, n)
    rank = 1 + len(peers) - bisect.bisect_right(peers, delta)  # 1 + the peers above it
    allowed = max(1, math.floor(rule.top_fraction * (len(peers) + 1)))
    where = f"rank {rank} of {len(peers) + 1}, top {allowed} pass"
    if rank <= allowed:
        return Outcome(Verdict.PROMOTE, f"clears the gates: {numbers}; {where}", delta, sigma, n)
    return Outcome(Verdict.REJECT, f"below the rank gate: {numbers}; {where}", delta, sigma, n)


def _behind(rule: PromotionRule, delta: float, sigma: float, n: int, needed: float) -> str:
    """Why an open idea could not clear the gate even at `max_seeds` ("" if it could): a one-σ
    optimistic view of its gain now against what it would need there. With a pooled σ_d this
    is racing; before one, σ_d is the larger of the idea's own and the prior, never the top's
    widened one: that widening keeps a lucky idea from being stacked, and judged on it an idea
    behind the champion was never behind (on bytelm one whose two top pairs were +0.021 and
    −0.050 asked for all six top seeds, and their baselines, at 80 s a run, one at a time)."""
    target = max(needed, rule.sigmas * sigma / math.sqrt(rule.max_seeds))
    hope = delta + sigma / math.sqrt(n)
    if hope >= target:
        return ""
    return f"behind: gain + σ/√n = {hope:.4g} < {target:.4g} needed at {rule.max_seeds} seeds"


def _seeds_to_clear(rule: PromotionRule, sigma: float, delta: float, needed: float) -> int:
    """Pairs at which a gain this size would clear the noise gate (a planning estimate)."""
    margin = max(delta, needed)
    if margin <= 0:
        return rule.max_seeds
    ratio = rule.sigmas * sigma / margin  # huge where the top's σ is widened: no overflow
    return math.ceil(ratio * ratio) if ratio < math.sqrt(rule.max_seeds) else rule.max_seeds


def _more(
    rule: PromotionRule, wanted: int, n: int, delta: float | None, sigma: float | None, why: str
) -> Outcome:
    return Outcome(Verdict.RETEST, why, delta, sigma, n, min(wanted, rule.max_seeds))
