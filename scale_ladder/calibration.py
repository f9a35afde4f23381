"""Thresholds proposed from what a swarm measured: each tier's σ_d and how well it ranks ideas as
the next tier does (`swarm calibrate`; opt-in: a person adopts the file it writes, or not).

Per tier, from its measurements (`TierMeasure`), a proposal (`TierProposal`) with its reasons:
- **max_seeds**: the paired seeds at which the gain worth finding clears the noise gate,
  sigmas × σ_d / √n, with POWER (80%): n = ((sigmas + z) σ_d / gain)², z the normal quantile of
  the power, held between 2 and MAX_SEEDS. The gain worth
  finding is the smallest gain, measured at this tier, of the changes the swarm stacked (real
  effects it found); before any, min_improvement × the baseline's level. Fewer seeds than that
  cannot confirm such a gain and spend runs on verdicts that end inconclusive; more only spend
  them on gains smaller than any that mattered.
- **top_fraction** (the rank gate): under a Gaussian copula with the measured rank correlation ρ
  to the next tier, the smallest share q such that an idea in the next tier's top 20% would be
  in this tier's top q with probability at least 90%. A tier that ranks ideas unlike the next
  one (no q ≤ 0.75 does it; with no correlation at all q is 0.9) gets no rank gate. The top
  tier has no next tier: left as it is.
- **seeds** (used only until 6 pooled pairs exist) and **sigmas**: kept. The noise gates are
  the ladder's guarantee against stacking changes that do nothing; what a tier's gate lets
  through by luck is printed (one-sided normal tail), not traded away by a formula.
Where a tier lacks the measurements (fewer than 6 pooled pairs; fewer than MIN_RANKED ideas run
on both tiers), its values are kept and the reason says so. The correlation is measured on the
ideas the lower tier promoted (and spot checks, second looks), a range the gate narrowed: it
reads lower than the proxy's correlation over all ideas, so the rank gate it gives errs wide.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from scipy.stats import multivariate_normal, norm

from scale_ladder.tiers import Tier

MAX_SEEDS = 8
CALIBRATED = "# calibrated (swarm calibrate)"  # marks the lines a proposal sets
POWER = 0.8  # of confirming a true gain of the size worth finding, at max_seeds
MIN_RANKED = 8  # ideas run on both tiers before a correlation is read
NEXT_TOP = 0.2  # "the next tier's top 20%"
KEEP = 0.9  # ... kept by this tier's rank gate with this probability
# The shares a rank gate may pass: 0.1 .. 0.75. Independent tiers need 0.9 to keep 90% (chance
# alone); a gate that must pass more than three quarters filters too little to be worth its
# risk to the ideas it drops.
SHARES = tuple(round(0.05 * k, 2) for k in range(2, 16))


@dataclass(frozen=True)
class TierMeasure:
    tier: int
    sigma_d: float | None  # σ of one paired difference: the largest any champion pooled here
    pairs: int  # paired gains behind it
    level: float | None  # |mean baseline metric| at the latest champion measured here
    rho: float | None = None  # Spearman correlation of gains with the next tier
    ranked: int = 0  # ideas behind rho
    stacked: tuple[float, ...] = ()  # mean paired gains here of the ideas later stacked


@dataclass
class TierProposal:
    name: str
    values: dict[str, float | int] = field(default_factory=dict)  # key -> proposed value
    reasons: list[str] = field(default_factory=list)


def propose(tiers: Sequence[Tier], measures: Sequence[TierMeasure]) -> list[TierProposal]:
    proposals = []
    for tier, measure in zip(tiers, measures, strict=True):
        proposal = TierProposal(tier.name)
        _max_seeds(tier, measure, proposal)
        if tier.index < len(tiers) - 1:
            _top_fraction(tier, measure, proposal)
        _gate(tier, proposal)
        proposals.append(proposal)
    return proposals


def seeds_to_confirm(sigmas: float, sigma_d: float, gain: float) -> int:
    """Paired seeds at which a true mean gain of `gain` clears sigmas × σ_d / √n in POWER of
    swarms (a gain measured on n seeds spreads by σ_d / √n around the true one)."""
    return math.ceil(((sigmas + float(norm.ppf(POWER))) * sigma_d / gain) ** 2)


def _max_seeds(tier: Tier, m: TierMeasure, p: TierProposal) -> None:
    rule = tier.rule
    if rule.deterministic:
        p.reasons.append("deterministic: one run per recipe, nothing to calibrate")
        return
    if m.sigma_d is None or m.level is None:
        p.reasons.append(f"max_seeds kept at {rule.max_seeds}: {m.pairs} paired gains, 6 needed")
        return
    floor = rule.min_improvement * m.level
    found = [g for g in m.stacked if g >= floor > 0]
    gain = min(found) if found else floor
    if rule.sigmas == 0 or gain <= 0:
        p.reasons.append(f"max_seeds kept at {rule.max_seeds}: no noise gate to size it by")
        return
    what = (
        f"the smallest gain stacked, as measured here, {gain:.3g}"
        if found
        else f"min_improvement × the baseline, {rule.min_improvement:g} × {m.level:.4g} = "
        f"{gain:.3g} (nothing stacked yet)"
    )
    needed = seeds_to_confirm(rule.sigmas, m.sigma_d, gain)
    value = min(MAX_SEEDS, max(2, needed))
    if value != rule.max_seeds:
        p.values["max_seeds"] = value
    if min(rule.seeds, value) != rule.seeds:
        p.values["seeds"] = min(rule.seeds, value)
    held = (
        f", held to {MAX_SEEDS}"
        if needed > MAX_SEEDS
        else ", held to 2 (one pair gives no spread)"
        if needed < 2
        else ""
    )
    said = f"{value} (was {rule.max_seeds})" if value != rule.max_seeds else f"kept at {value}"
    p.reasons.append(
        f"max_seeds {said}: σ_d {m.sigma_d:.4g} (the largest of any champion's, over {m.pairs} "
        f"pairs in all); the gain worth finding, {what}, clears {rule.sigmas:g}σ_d/√n "
        f"{POWER:.0%} of the time at n = {needed}{held}"
    )


def keep_probability(rho: float, share: float) -> float:
    """P(an idea is in this tier's top `share` | it is in the next tier's top NEXT_TOP), for
    gains jointly normal with correlation `rho`."""
    a, b = norm.ppf(1 - share), norm.ppf(1 - NEXT_TOP)
    both_below = multivariate_normal([0.0, 0.0], [[1.0, rho], [rho, 1.0]]).cdf([a, b])
    both_above = 1.0 - norm.cdf(a) - norm.cdf(b) + both_below
    return float(both_above / NEXT_TOP)


def _top_fraction(tier: Tier, m: TierMeasure, p: TierProposal) -> None:
    now = tier.rule.top_fraction
    if m.rho is None or m.ranked < MIN_RANKED or not math.isfinite(m.rho):
        p.reasons.append(
            f"top_fraction kept at {now:g}: {m.ranked} ideas run on this tier and the next, "
            f"{MIN_RANKED} needed to read a rank correlation"
        )
        return
    rho = max(-0.99, min(0.99, m.rho))
    share = next((q for q in SHARES if keep_probability(rho, q) >= KEEP), None)
    if share is None:
        if now != 0:
            p.values["top_fraction"] = 0.0
        p.reasons.append(
            f"top_fraction 0 (was {now:g}): ρ {m.rho:.2f} over {m.ranked} ideas; no share up "
            f"to {SHARES[-1]:g} keeps {KEEP:.0%} of the next tier's top {NEXT_TOP:.0%}: this "
            "tier ranks too unlike the next for a rank gate"
        )
        return
    if share != now:
        p.values["top_fraction"] = share
    p.reasons.append(
        f"top_fraction {share:g} (was {now:g}): ρ {m.rho:.2f} over {m.ranked} ideas; the "
        f"smallest share that keeps {KEEP:.0%} of the next tier's top {NEXT_TOP:.0%} "
        f"({keep_probability(rho, share):.0%})"
    )


def _gate(tier: Tier, p: TierProposal) -> None:
    sigmas = tier.rule.sigmas
    if tier.rule.deterministic or sigmas == 0:
        return
    luck = 1 - norm.cdf(sigmas)
    p.reasons.append(
        f"sigmas kept at {sigmas:g}: a change that does nothing passes this gate by luck "
        f"{luck:.2%} of the time in one look at its seeds (racing looks again as seeds come in, "
        "which adds to it)"
    )


def edit_ladder_file(text: str, proposals: Sequence[TierProposal]) -> str:
    """The ladder file's text with each tier's proposed values set, its comments kept: a key
    present is replaced on its line, a missing one is added under the tier's header."""
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.strip() == "[[tier]]"]
    if len(starts) != len(proposals):
        raise ValueError(f"{len(starts)} [[tier]] headers for {len(proposals)} tiers")
    for start, end, proposal in reversed(
        list(zip(starts, [*starts[1:], len(lines)], proposals, strict=True))
    ):
        block = lines[start + 1 : end]
        for key, value in proposal.values.items():
            text_value = f"{value:g}" if isinstance(value, float) else str(value)
            new = f"{key} = {text_value}  {CALIBRATED}\n"
            found = _key_line(block, key)
            if found is None:
                block.insert(0, new)
            else:
                block[found] = new
        lines[start + 1 : end] = block
    return "".join(lines)


def _key_line(block: list[str], key: str) -> int | None:
    """The line of `key` in a tier's table (not in a sub-table such as [tier.dials])."""
    for i, line in enumerate(block):
        stripped = line.strip()
        if stripped.startswith("["):
            return None
        name = stripped.split("=", 1)[0].strip()
        if "=" in stripped and name == key:
            return i
    return None
