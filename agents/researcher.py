"""A researcher: reads what the swarm learned, proposes the next idea, explains why.

Plain logic, no runtime and no bus (agents/runtime_agents.py hosts it in autogen-core). It folds
ideas, decisions, failed runs and champion changes into findings, keeps at most `max_in_flight`
of its own ideas undecided (back-pressure: the queue never fills with one agent's ideas), and
asks its brain (agents/brain.py) for a proposal on the current champion, never one already tried
there. After a failed attempt it waits before the next (doubling, up to 10x `cooldown_s`); when
its brain's budget is spent it stops proposing and says so.
"""

from __future__ import annotations

import functools
import time
from collections import defaultdict, deque
from dataclasses import dataclass, replace

from agents.brain import Attempt, Brain, Desk, Failure
from agents.heuristic_brain import Finding
from agents.recipe_constants import Change, changes_between
from bus.champion_store import fingerprint
from bus.messages import (
    ChampionChange,
    ChangeKind,
    Decision,
    Idea,
    LlmCall,
    Message,
    RunResult,
    RunStatus,
    Trace,
    Verdict,
    new_id,
)
from training.patching import PatchRefused, apply, make_patch

# After these verdicts an idea is out of play (PROMOTE at the top tier too: it is being stacked).
FINAL = frozenset({Verdict.REJECT, Verdict.REFUSED, Verdict.STALE, Verdict.HELD})
FAILURES_KEPT = 20  # recent failed runs a brain is shown
NOTES_KEPT = 12  # the researcher's own recent attempts a brain is shown
MAX_BACKOFF = 10  # after repeated failed attempts, wait at most this many cooldowns
# A brain with nothing untried rests 1, 2, 4 … up to 30 s before looking again: an offline brain
# re-searching every second, at thousands of findings, blocked the agents host (a soak found it).
EMPTY_REST_S = 1.0
MAX_EMPTY_REST_S = 30.0


@dataclass(frozen=True, slots=True)
class Step:
    """What one attempt produced: the records for the ledger, its trace and, if any, the idea."""

    trace: Trace
    idea: Idea | None = None
    records: tuple[Message, ...] = ()


class Researcher:
    def __init__(
        self,
        name: str,
        brain: Brain,
        editable: str,
        target: str,
        max_in_flight: int,
        top_tier: int,
        cooldown_s: float = 30.0,
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
        self.failures: deque[Failure] = deque(maxlen=FAILURES_KEPT)
        self.notes: deque[str] = deque(maxlen=NOTES_KEPT)
        self.proposed = 0
        self.cooldown_s = cooldown_s
        self.failed_in_a_row = 0
        self.empty_in_a_row = 0  # attempts in a row that found nothing untried
        self.resting_until = 0.0  # monotonic
        self.proposing = False
        self.stopped = ""  # why it stopped proposing for good ("" while it goes on)
        self.idea_strategy: dict[str, int] = {}  # own idea -> strategy version it came from

    @property
    def champion(self) -> int:
        return max(self.sources, default=0)

    @property
    def busy(self) -> bool:
        return len(self.in_flight) >= self.max_in_flight

    @property
    def mine(self) -> list[Finding]:
        return [f for f in self.findings.values() if f.author == self.name]

    def observe(self, message: Message) -> None:
        """Fold one event of the swarm's history; kinds a researcher does not learn from pass."""
        if isinstance(message, ChampionChange):
            self.on_champion(message)
        elif isinstance(message, Idea):
            self.on_idea(message)
        elif isinstance(message, Decision):
            self.on_decision(message)
        elif isinstance(message, RunResult):
            self.on_result(message)
        elif isinstance(message, LlmCall):
            self.on_llm_call(message)

    def on_champion(self, change: ChampionChange) -> None:
        if change.version > self.champion and self.empty_in_a_row:
            self.empty_in_a_row, self.resting_until = 0, 0.0  # new champion, new moves: look now
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
            changes, tried = _read_patch(base, idea.patch, self.editable)
            self.tried[idea.champion_version].add(tried)
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
            finding = replace(
                finding,
                tier=decision.tier,
                verdict=decision.verdict.value,
                delta=delta,
                reason=decision.rule,
            )
            self.findings[decision.idea_id] = finding
        final = decision.verdict in FINAL or (
            decision.verdict is Verdict.PROMOTE and decision.tier >= self.top_tier
        )
        if final:
            self.in_flight.discard(decision.idea_id)
        if finding.author == self.name and decision.verdict is not Verdict.RETEST:
            self.notes.append(_outcome(decision))

    def on_llm_call(self, call: LlmCall) -> None:
        if call.agent == self.name and call.idea_id and call.status == "ok":
            self.idea_strategy[call.idea_id] = call.strategy_version

    def on_result(self, result: RunResult) -> None:
        """Failed runs teach what breaks: the brain sees the latest ones with their log tails."""
        if result.status in (RunStatus.OK, RunStatus.SKIPPED) or not result.idea_id:
            return
        if any(f.idea_id == result.idea_id and f.tier == result.tier for f in self.failures):
            return  # one failure per idea and tier is enough to learn from
        failure = Failure(
            result.idea_id, result.tier, result.status.value, result.reason, result.log_tail
        )
        self.failures.append(failure)
        finding = self.findings.get(result.idea_id)
        if finding is not None and finding.author == self.name:  # told why, log included
            tail = " | ".join(result.log_tail.strip().splitlines()[-3:])
            self.notes.append(
                f"{result.idea_id} {result.status.value} at tier {result.tier}: "
                f"{result.reason}" + (f"; log ends: {tail}" if tail else "")
            )

    async def propose(self) -> Step | None:
        """One attempt at the next idea; None while busy, resting, stopped or before the first
        champion. The brain is awaited without holding anything: the researcher goes on folding
        events meanwhile, and `proposing` keeps a second attempt from starting."""
        version = self.champion
        if self.proposing or self.stopped or self.busy or version == 0:
            return None
        if time.monotonic() < self.resting_until:
            return None
        desk = self.desk()
        source = desk.source
        idea_id, trace_id = new_id("idea"), new_id("trace")
        self.proposing = True
        try:
            attempt = await self.brain.propose(desk, idea_id, trace_id)
        finally:
            self.proposing = False
        if attempt.proposal is None:
            return self._no_idea(attempt, trace_id, version)
        self.failed_in_a_row = self.empty_in_a_row = 0
        for record in attempt.records:
            if isinstance(record, LlmCall):
                self.on_llm_call(record)
        return self._step(attempt, idea_id, trace_id, source, version, len(desk.findings))

    def desk(self) -> Desk:
        """What the brain reads: a snapshot of everything folded so far."""
        version = self.champion
        return Desk(
            self.name,
            version,
            self.sources[version],
            self.editable,
            self.top_tier,
            tuple(self.findings.values()),
            tuple(self.failures),
            tuple(self.notes),
            frozenset(self.tried[version]),
        )

    def _no_idea(self, attempt: Attempt, trace_id: str, version: int) -> Step | None:
        if attempt.stopped:
            self.stopped = attempt.why_not
        elif attempt.failed:
            self.failed_in_a_row += 1
            rest = self.cooldown_s * min(2 ** (self.failed_in_a_row - 1), MAX_BACKOFF)
            self.resting_until = time.monotonic() + rest
        else:
            self.empty_in_a_row += 1
            rest = min(EMPTY_REST_S * 2 ** (self.empty_in_a_row - 1), MAX_EMPTY_REST_S)
            self.resting_until = time.monotonic() + rest
        if not (attempt.records or attempt.stopped or attempt.failed):
            return None  # nothing happened worth keeping (e.g. the heuristic ran out of moves)
        action = "stopped" if attempt.stopped else "refused" if attempt.failed else "skipped"
        self.notes.append(f"attempt on v{version}: {action}: {attempt.why_not}")
        trace = Trace(
            trace_id,
            self.name,
            action,
            read=f"champion v{version}",
            why=attempt.why_not,
            data={"brain": self.brain.label},
        )
        return Step(trace, None, attempt.records)

    def _step(
        self, attempt: Attempt, idea_id: str, trace_id: str, source: str, version: int, read: int
    ) -> Step:
        proposal = attempt.proposal
        assert proposal is not None
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
            proposed=f"{idea_id}: {changes or _first_line(proposal.hypothesis)}",
            why=proposal.why,
            idea_id=idea_id,
            data={
                "persona": proposal.persona.value,
                "parents": list(proposal.parents),
                "brain": self.brain.label,
            },
        )
        self.tried[version].add(fingerprint(proposal.source))
        self.in_flight.add(idea_id)
        self.proposed += 1
        self.notes.append(f"proposed {idea_id} on v{version}: {_first_line(proposal.hypothesis)}")
        self.on_idea(idea)
        return Step(trace, idea, attempt.records)


@functools.lru_cache(maxsize=4096)
def _read_patch(base: str, patch: str, editable: str) -> tuple[tuple[Change, ...], str]:
    """What an idea changes and the fingerprint of its recipe. Every researcher of a host folds
    every idea, so the patch is applied once per host (the cache), not once per researcher."""
    try:
        patched = apply(base, patch, editable)
        return changes_between(base, patched), fingerprint(patched)
    except (PatchRefused, SyntaxError):  # the ladder refuses it; nothing to learn
        return (), fingerprint(base)


def _first_line(text: str, limit: int = 120) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _outcome(decision: Decision) -> str:
    """What the author is told about its idea: the verdict with its numbers and rule."""
    numbers = ""
    if decision.delta is not None:
        numbers = f" Δ {decision.delta:+.4f} (σ {decision.sigma or 0:.4f}, n {decision.n})"
    return (
        f"{decision.idea_id} at tier {decision.tier}: {decision.verdict.value}{numbers}; "
        f"{decision.rule}"
    )
