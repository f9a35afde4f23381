"""What a researcher sends when its brain has nothing new: a second look at a near miss.

An offline brain runs dry on a small search space (one choice among a few learners: every
option tried on the champion, all rejected at tier 0). Its trainers would then stand idle,
though a tier-0 rejection may only say that the smallest model prefers the champion. So the
researcher picks the idea the rules rejected on the current champion with the best gain (the
nearest miss) that has not had its second look, and sends its recipe again, to enter one tier
up (the ladder's side and why it stays safe: scale_ladder/second_look.py). A look rejected
where it entered (or a spot-checked idea rejected one tier up) may be looked at again one tier
further up, in a chain to the top, which the ladder judges at a stricter gate; the researcher
sends one only for a near miss (a gain above zero where it was rejected). Sent for every
reject, the chains spent the top tier's runs on clear losses: LCDB madelon took 128 jobs to
the same result that 89 reach now (docs/benchmarks.md, "Looks after looks").

Only ideas that set constants qualify: their recipe on the champion is those values written
into it, as the ladder carries a patch over (the history keeps no patches).
"""

from __future__ import annotations

from dataclasses import dataclass

from agents.brain import Proposal
from agents.history import History
from recipes.constants import constants, with_written


@dataclass(frozen=True, slots=True)
class SecondLook:
    proposal: Proposal
    entry_tier: int


def second_look(history: History, top_tier: int) -> SecondLook | None:
    """The nearest miss on the current champion not yet looked at again, or None."""
    version = history.champion
    source = history.sources.get(version)
    if source is None:
        return None
    names = constants(source)
    candidates = []
    for idea_id, (tier, gain) in history.rejected.items():
        finding = history.findings.get(idea_id)
        if finding is None or tier >= top_tier or (idea_id, version, tier + 1) in history.looked:
            continue
        if finding.failed or finding.code_changed or not finding.changes:
            continue
        if any(c.name not in names for c in finding.changes):  # the ladder would refuse it
            continue
        below = {g.tier: g for g in finding.gains if g.version == version}
        through_gates = all(t in below and not below[t].spot_check for t in range(tier))
        if not through_gates and not gain > 0:
            continue  # a look at a look only for a near miss: it costs the top's runs
        candidates.append((gain, idea_id, tier, finding))
    if not candidates:
        return None
    gain, idea_id, tier, finding = max(candidates, key=lambda c: c[0])
    recipe = with_written(source, finding.changes)
    hypothesis = (
        f"Second look at tier {tier + 1}: {idea_id} was rejected at tier {tier} "
        f"(gain {gain:+.4g}); a smaller proxy may rank it wrongly. {finding.hypothesis}"
    )
    why = (
        f"the brain had nothing untried on v{version}; {idea_id} is the nearest miss rejected "
        f"there without a second look"
    )
    proposal = Proposal(hypothesis[:2000], recipe, finding.changes, None, why, (idea_id,))
    return SecondLook(proposal, tier + 1)
