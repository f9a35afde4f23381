"""A researcher that asks one of several brains for each idea, chosen by what each has earned.

No offline brain wins everywhere (docs/benchmarks.md): TPE is far ahead where the proxy tiers
agree with the top one, the heuristic personas' local moves far ahead on noisy multi-fidelity
problems. Which one a swarm faces is not known in advance, so each proposal goes to a brain drawn
by bootstrap Thompson sampling over what its ideas earned: an idea stacked into the champion
earns its gain at the top tier, one rejected or crashed earns nothing, one still in play is not
counted. A brain's draw is the mean of a resample of its recent earnings plus a few optimistic
ones (the best earning seen), so a brain not yet tried is tried, and one that stops earning is
asked less. A brain with nothing to propose passes the turn to the next draw.

Earnings, not pass rates: on a smooth problem both brains' ideas pass the gates about as often,
but TPE's are the ones that move the champion far (a pass-rate portfolio measured 3x worse than
TPE alone on the synthetic problem, `python -m bench.search`).

Which brain proposed an idea is remembered in the host's memory only (shared by its portfolio
researchers): after a restart the draws start again from the prior, which costs a few ideas,
not correctness.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Mapping, MutableMapping
from dataclasses import replace

from agents.brain import Attempt, Brain, Desk, Finding, Persona

RECENT = 40  # earnings per brain that its draw reads: what it earns now, not what it once did
OPTIMISM = 2  # pseudo-earnings at the best seen, per draw


def earned(finding: Finding) -> float | None:
    """What an idea earned: its top-tier gain if stacked, 0 if it is out, None while in play."""
    if finding.stacked:
        return max(finding.gains[-1].delta, 0.0) if finding.gains else 0.0
    if finding.failed or finding.verdict in ("REJECT", "REFUSED"):
        return 0.0
    return None


class PortfolioBrain:
    def __init__(
        self,
        arms: Mapping[str, Brain],
        seed: int,
        memory: MutableMapping[str, str] | None = None,
    ) -> None:
        if not arms:
            raise ValueError("a portfolio needs at least one brain")
        self.arms = dict(arms)
        self.rng = random.Random(seed)
        # idea id -> the arm that proposed it; pass one dict to every portfolio in a host, so
        # each learns from all of their ideas
        self.proposed_by: MutableMapping[str, str] = {} if memory is None else memory
        self.label = "portfolio " + "+".join(self.arms)

    @property
    def persona(self) -> Persona | None:
        personas = [arm.persona for arm in self.arms.values() if arm.persona is not None]
        return personas[0] if personas else None

    def earnings(self, findings: tuple[Finding, ...]) -> dict[str, list[float]]:
        """Per arm, what its settled ideas earned, oldest first, the last RECENT of them."""
        per_arm: dict[str, list[float]] = {name: [] for name in self.arms}
        for finding in findings:
            arm = self.proposed_by.get(finding.idea_id)
            value = earned(finding) if arm in per_arm else None
            if arm is not None and value is not None:
                per_arm[arm].append(value)
        return {name: values[-RECENT:] for name, values in per_arm.items()}

    def draw(self, earnings: list[float], best: float) -> float:
        pool = [*earnings, *[best] * OPTIMISM]
        return statistics.fmean(self.rng.choices(pool, k=len(pool)))

    async def propose(self, desk: Desk, idea_id: str, trace_id: str) -> Attempt:
        earnings = self.earnings(desk.findings)
        best = max((v for values in earnings.values() for v in values), default=0.0)
        names = list(self.arms)
        self.rng.shuffle(names)  # ties (nothing earned yet) go to a random arm
        draws = {name: self.draw(earnings[name], best) for name in names}
        attempt = Attempt(None, why_not="no brain in the portfolio")
        for name in sorted(names, key=lambda n: -draws[n]):
            attempt = await self.arms[name].propose(desk, idea_id, trace_id)
            if attempt.proposal is None:
                continue
            self.proposed_by[idea_id] = name
            mine = earnings[name]
            why = (
                f"portfolio: {name} drawn ({draws[name]:.3g}; {sum(v > 0 for v in mine)} of its "
                f"last {len(mine)} settled ideas stacked). {attempt.proposal.why}"
            )
            return replace(attempt, proposal=replace(attempt.proposal, why=why))
        return attempt
