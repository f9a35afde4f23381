"""Spot checks: a share of the ideas the rules reject at a tier go on to the next tier anyway.

A proxy tier can mislead: on a small model an idea may lose to the champion and win at the top,
and an idea rejected at tier k is otherwise never run above it. Nothing among the ideas a tier
promotes can show it (the gate in question selected them); only ideas it rejected, run one tier
up, can. So below the top, the ladder sends a share of its rules' rejects on to the next tier
(a spot check: a PROMOTE whose rule starts with SPOT_CHECK), and counts how they fare there
against the ideas it promoted:

    share = spot checks' pass rate at k+1 ÷ promoted ideas' pass rate at k+1,

kept between the tier's `spot_checks` (the least share, what keeps the measure alive) and 1,
once MIN_CHECKED spot checks have a verdict at k+1 (until then the least share). A proxy whose
rejects pass the next tier as often as its promotions filters nothing: all its rejects go on.
A good proxy's rejects rarely pass, and it checks the least share of them. Measured on the
synthetic problem (docs/benchmarks.md, "Spot checks").

What stays guaranteed: a spot-checked idea skips the one gate it failed; from the next tier up
it meets every gate on that tier's fresh seeds, so a null idea must still pass each remaining
gate by luck (LADDER-NOTES: the ladder is replication). Which rejects are checked is a draw
keyed by the swarm's seed secret, so no researcher can choose. Each spot check's Decision
records the share and the counts it came from.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from bus.messages import SPOT_CHECK

MIN_CHECKED = 4  # spot checks with a verdict one tier up before their pass rate sets the share


@dataclass(frozen=True, slots=True)
class Checks:
    """How a tier's rejects sent on (spot checks) and its promotions fared at the next tier."""

    checked: int = 0
    checked_passed: int = 0
    promoted: int = 0
    promoted_passed: int = 0

    def counted(self, spot_check: bool, passed: bool) -> Checks:
        if spot_check:
            return Checks(
                self.checked + 1, self.checked_passed + passed, self.promoted, self.promoted_passed
            )
        return Checks(
            self.checked, self.checked_passed, self.promoted + 1, self.promoted_passed + passed
        )


def share(checks: Checks, least: float) -> float:
    """The share of a tier's rejects to send on (see the module's docstring); 0 when the tier's
    `spot_checks` is 0 (off)."""
    if least <= 0:
        return 0.0
    if checks.checked < MIN_CHECKED:
        return least
    # The promotions' rate is smoothed (one pass, one fail): a tier whose first promotions all
    # failed must not make every reject look as good as a promotion.
    promoted_rate = (checks.promoted_passed + 1) / (checks.promoted + 2)
    ratio = checks.checked_passed / checks.checked / promoted_rate
    return min(1.0, max(least, ratio))


def draw(secret: bytes, idea_id: str, version: int, tier: int) -> float:
    """A number in [0, 1) fixed by the idea, champion and tier under the swarm's secret: the
    idea is spot-checked when it falls below the share (the same after a restart)."""
    key = f"spot-check/{idea_id}/{version}/{tier}".encode()
    return int.from_bytes(hmac.digest(secret, key, "sha256")[:8], "big") / 2**64


def spot_check(
    checks: Checks, least: float, secret: bytes, idea_id: str, version: int, tier: int, rule: str
) -> str | None:
    """The rule of the PROMOTE that sends on an idea the rules rejected at `tier` with `rule`,
    or None if it is not drawn for a spot check."""
    fraction = share(checks, least)
    if draw(secret, idea_id, version, tier) >= fraction:
        return None
    return _rule(rule, tier, fraction, checks)


def _rule(rule: str, tier: int, fraction: float, checks: Checks) -> str:
    so_far = (
        f"{checks.checked_passed} of {checks.checked} passed tier {tier + 1}, against "
        f"{checks.promoted_passed} of {checks.promoted} promotions"
    )
    # The share and its counts first: a terminal cuts a long rule short.
    return (
        f"{SPOT_CHECK}: sent on to tier {tier + 1}, one of the {fraction:.0%} of tier {tier}'s "
        f"rejects checked there ({so_far}); rejected at tier {tier}: {rule}"
    )
