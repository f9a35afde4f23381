"""`swarm calibrate`: a ladder file proposed from what the swarm measured, checked by what-if.

    swarm calibrate                      writes ladder.calibrated.toml here, prints why, and what
                                         the recorded history would have done under it
    swarm calibrate --out my-ladder.toml

The rules are scale_ladder/calibration.py; the measurements come from a ladder that folded the
workspace's history (the same pooled noise the live one gates with). Nothing is adopted: a person
reads the reasons and the what-if, then sets `[ladder] path` in swarm.toml to the file, or not.
"""

from __future__ import annotations

import statistics
import tomllib
from pathlib import Path

from scipy.stats import spearmanr

from bus.messages import ChangeKind
from scale_ladder import baselines
from scale_ladder.calibration import TierMeasure, edit_ladder_file, propose
from scale_ladder.ladder import Ladder
from scale_ladder.noise_pool import noise_at
from scale_ladder.rules import Evidence, Noise, paired_gains
from scale_ladder.tiers import ladder_from
from swarm.config import SwarmConfig
from swarm.config_files import ladder_path
from swarm.whatif_command import Setting, decide_in_thread, history, render
from swarm.workspace import Workspace


async def calibrate(config: SwarmConfig, workspace: Workspace, out: Path) -> str:
    source = ladder_path(config)
    messages, ladder = await history(config, workspace)
    for message in messages:
        ladder.observe(message)
    measures = measure(ladder)
    proposals = propose(ladder.tiers, measures)
    text = edit_ladder_file(source.read_text(), proposals)
    proposed = ladder_from(tomllib.loads(text), str(out), config.target.kind)  # checked as read
    out.write_text(text)
    lines = [f"measured from {len(messages)} events in {workspace.root}; proposal in {out}:"]
    for proposal in proposals:
        lines += [f"  {proposal.name}:", *(f"    {why}" for why in proposal.reasons)]
    check = await decide_in_thread(messages, ladder, [Setting(str(out), proposed)], workspace)
    checked = check.results[0][1]
    lines += ["", "checked against the recorded history:", render(check)]
    lost = [i for i in checked.recorded_stacks if i not in checked.whatif_stacks]
    if not any(p.values for p in proposals):
        lines.append("\nnothing to change: the ladder it ran with is what the measurements ask")
    elif lost:
        lines.append(
            f"\nnot recommended: under this proposal {len(lost)} of the "
            f"{len(checked.recorded_stacks)} changes the swarm stacked would not have been "
            f"({', '.join(lost)}); the changed verdicts above say why"
        )
    else:
        lines.append(f'\nto adopt it: set path = "{out}" under [ladder] in swarm.toml')
    return "\n".join(lines)


def measure(ladder: Ladder) -> list[TierMeasure]:
    """Each tier's σ_d (the largest any champion pooled), the champion's level there, and the rank
    correlation of ideas' gains with the next tier's (ideas run on both, same champion)."""
    gains = [_gains(ladder, tier.index) for tier in ladder.tiers]
    stacked = [
        (c.idea_id, c.parent_version)
        for c in ladder.champions.values()
        if c.kind is ChangeKind.STACK
    ]
    measures = []
    for tier in ladder.tiers:
        noise = Noise()
        level, sigmas = None, []
        for version in sorted(ladder.champions):
            pooled = noise_at(ladder, version, tier.index)
            noise += pooled
            if pooled.sigma is not None:
                sigmas.append(pooled.sigma)
            base = baselines.metrics(ladder, version, tier.index)
            if base:
                level = abs(statistics.fmean(base.values()))
        # The largest: a champion's noise can differ from another's (a replay meets each in
        # turn), and seeds sized on the calm ones would leave the noisy ones inconclusive.
        sigma = max(sigmas, default=noise.sigma)
        rho, ranked = None, 0
        if tier.index + 1 < len(ladder.tiers):
            here, there = gains[tier.index], gains[tier.index + 1]
            both = sorted(set(here) & set(there))
            ranked = len(both)
            if ranked >= 3:
                rho = float(spearmanr([here[k] for k in both], [there[k] for k in both])[0])
        found = tuple(gains[tier.index][k] for k in stacked if k in gains[tier.index])
        measures.append(TierMeasure(tier.index, sigma, noise.pairs, level, rho, ranked, found))
    return measures


def _gains(ladder: Ladder, tier: int) -> dict[tuple[str, int], float]:
    """Mean paired gain of every idea run at `tier`, by (idea, champion version)."""
    found = {}
    for (version, index), ideas in ladder.runs.tested_at.items():
        if index != tier:
            continue
        base = baselines.metrics(ladder, version, tier)
        for idea_id in ideas:
            mine = {
                s: r.metric
                for s, r in ladder.runs.results.get((idea_id, version, tier), {}).items()
                if r.metric is not None
            }
            pairs = paired_gains(Evidence(mine, base, None, (), ladder.lower_is_better))
            if pairs:
                found[(idea_id, version)] = statistics.fmean(pairs)
    return found
