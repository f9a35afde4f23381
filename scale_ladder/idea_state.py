"""One idea's place on the ladder: its phase, the champion version it is tested on, its patch
there and its tier, folded from its RunSpecs and Decisions (ladder.py lays out the flow)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from bus.messages import Decision, Idea, RunSpec, Verdict


class Phase(enum.StrEnum):
    NEW = "new"  # waiting for admission
    TESTING = "testing"  # running at `tier` on `version`
    PROMOTED = "promoted"  # passed the top tier
    HELD = "held"  # passed the top tier, waits for a person
    APPROVED = "approved"  # a person approved it: stack it
    DONE = "done"  # refused, rejected, stale, or stacked


@dataclass
class IdeaState:
    idea: Idea
    phase: Phase = Phase.NEW
    version: int = 0  # the champion version it is tested on (after rebases)
    patch: str = ""  # its patch against that version
    tier: int = 0

    def tested(self, spec: RunSpec) -> None:
        """One of its RunSpecs on its version or a newer one: it is tested there now."""
        self.phase, self.version, self.patch = Phase.TESTING, spec.champion_version, spec.patch
        self.tier = spec.tier

    def carried(self, version: int, patch: str) -> None:
        """Carried over to a newer champion with its recipe unchanged: tested there from tier 0
        on its runs so far (lineage.py)."""
        self.phase, self.version, self.patch, self.tier = Phase.TESTING, version, patch, 0

    def decided(self, decision: Decision, top: int) -> bool:
        """Fold a Decision on the idea in; True when it promotes the idea to the next tier of
        its version."""
        verdict, by_rules = decision.verdict, decision.decided_by == "ladder"
        if verdict in (Verdict.REJECT, Verdict.REFUSED, Verdict.STALE):
            self.phase = Phase.DONE
        elif verdict is Verdict.HELD:
            self.phase = Phase.HELD
        elif verdict is Verdict.PROMOTE and decision.tier == top:
            self.phase = Phase.PROMOTED if by_rules else Phase.APPROVED
        elif verdict is Verdict.PROMOTE and decision.champion_version == self.version:
            # The next tier starts here, not at its first RunSpec: carried runs may need none.
            self.tier = decision.tier + 1
            return True
        return False


class LadderRefusal(ValueError):
    """A person's request (approve, reject, revert) that the state does not allow."""
