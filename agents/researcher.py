"""A researcher: reads what the swarm learned, proposes the next idea, explains why.

Plain logic, no runtime and no bus (agents/runtime_agents.py hosts it in autogen-core). It folds
ideas, decisions and champion changes into findings, keeps at most `max_in_flight` of its own
ideas undecided (back-pressure: the queue never fills with one agent's ideas), and asks its brain
for a proposal on the current champion, never one already tried there.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace

from agents.heuristic_brain import Finding, HeuristicBrain, Proposal
from agents.recipe_constants import Change, changes_between
from bus.champion_store import fingerprint
from bus.messages import ChampionChange, ChangeKind, Decision, Idea, Trace, Verdict, new_id
from training.patching import PatchRefused, apply, make_patch

# After these verdicts an idea is out of play (PROMOTE at the top tier too: it is being stacked).
FINAL = frozenset({Verdict.REJECT, Verdict.REFUSED, Verdict.STALE, Verdict.HELD})


@dataclass(frozen=True, slots=True)
class Step:
    """What one proposal produced: the idea to publish and its trace."""

    idea: Idea
    trace: Trace


class Researcher:
    def __init__(
        self,
        name: str,
        brain: HeuristicBrain,
        editable: str,
        target: str,
        max_in_flight: int,
        top_tier: int,
    ) -> None:
        self.name = name
        self.brain = brain
        self.editable = editable
        self.target = target
        self.max_in_flight = max_in_flight
        self.top_tier = top_tier
        self.sources: dict[int, str] = {}  # champion version -> recipe
        self.findings: dict[str, Finding] = {}
        self.tried: dict[int, set[str]] = defaultdict(set)  # version -> fingerprints
        self.in_flight: set[str] = set()
        self.pending: dict[str, list[Decision]] = defaultdict(list)  # decisions before ideas
        self.proposed = 0

    @property
    def champion(self) -> int:
        return max(self.sources, default=0)

    @property
    def busy(self) -> bool:
        return len(self.in_flight) >= self.max_in_flight

    def on_champion(self, change: ChampionChange) -> None:
        self.sources[change.version] = change.source
        self.tried[change.version].add(fingerprint(change.source))
        if change.kind is ChangeKind.STACK and change.idea_id in self.findings:
            self.findings[change.idea_id] = replace(self.findings[change.idea_id], stacked=True)
            self.in_flight.discard(change.idea_id)

    def on_idea(self, idea: Idea) -> None:
        if idea.idea_id in self.findings or idea.target != self.target:
            return
        base = self.sources.get(idea.champion_version)
        changes: tuple[Change, ...] = ()
        if base is not None:
            try:
                patched = apply(base, idea.patch, self.editable)
                changes = changes_between(base, patched)
            except (PatchRefused, SyntaxError):  # the ladder refuses it; nothing to learn
                patched = base
            self.tried[idea.champion_version].add(fingerprint(patched))
        self.findings[idea.idea_id] = Finding(
            idea.idea_id, idea.author, idea.champion_version, changes, idea.hypothesis, 0, "", None
        )
        for decision in self.pending.pop(idea.idea_id, []):
            self.on_decision(decision)

    def on_decision(self, decision: Decision) -> None:
        finding = self.findings.get(decision.idea_id)
        if finding is None:
            self.pending[decision.idea_id].append(decision)
            return
        if decision.tier >= finding.tier:
            delta = decision.delta if decision.delta is not None else finding.delta
            self.findings[decision.idea_id] = replace(
                finding, tier=decision.tier, verdict=decision.verdict.value, delta=delta
            )
        final = decision.verdict in FINAL or (
            decision.verdict is Verdict.PROMOTE and decision.tier >= self.top_tier
        )
        if final:
            self.in_flight.discard(decision.idea_id)

    def propose(self) -> Step | None:
        """The next idea, or None while busy, before the first champion, or out of ideas."""
        version = self.champion
        if self.busy or version == 0:
            return None
        source = self.sources[version]
        findings = list(self.findings.values())
        proposal = self.brain.propose(source, version, findings, self.tried[version])
        if proposal is None:
            return None
        return self._step(proposal, source, version, len(findings))

    def _step(self, proposal: Proposal, source: str, version: int, read: int) -> Step:
        idea_id = new_id("idea")
        trace_id = new_id("trace")
        patch = make_patch(source, proposal.source, self.editable)
        idea = Idea(
            idea_id,
            self.name,
            proposal.hypothesis,
            patch,
            version,
            target=self.target,
            trace_id=trace_id,
            parent_ids=proposal.parents,
        )
        changes = ", ".join(f"{c.name} {c.old}→{c.new}" for c in proposal.changes)
        trace = Trace(
            trace_id,
            self.name,
            "propose",
            read=f"champion v{version}; {read} findings; {len(self.in_flight)} of my ideas in play",
            proposed=f"{idea_id}: {changes}",
            why=proposal.why,
            idea_id=idea_id,
            data={"persona": proposal.persona.value, "parents": list(proposal.parents)},
        )
        self.tried[version].add(fingerprint(proposal.source))
        self.in_flight.add(idea_id)
        self.proposed += 1
        self.on_idea(idea)
        return Step(idea, trace)
