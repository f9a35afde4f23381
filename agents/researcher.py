"""A researcher: reads what the swarm learned, proposes the next idea, explains why.

Plain logic, no runtime and no bus (agents/runtime_agents.py hosts it in autogen-core). It reads the
swarm's history from a History (agents/history.py) that the researchers of a host share, and keeps
only its own state: at most `max_in_flight` of its own ideas undecided below the top tier, and as
many again waiting on the top tier (back-pressure: the queue never fills with one agent's ideas, yet
a slow top tier does not leave the lower tiers without work), its notes on what became of them, its
rests. It asks its brain (agents/brain.py) for a proposal on the current champion, never one already
tried there; when the brain has nothing untried, it sends a second look at the nearest miss instead
(agents/second_look.py). After a failed attempt it waits before the next (doubling, up to 10x
`cooldown_s`); when its brain's budget is spent it stops proposing and says so. When an offline
brain finds nothing in the champion it may move, the researcher says so too, once per champion, as
an AgentEvent the live view shows: otherwise a swarm on a file with no dials would sit idle with no
word why.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from agents.brain import Attempt, Brain, Desk, Failure, Finding, Proposal
from agents.history import EVERYONE, History, Notice
from agents.screening import Screen
from agents.second_look import second_look
from bus.messages import (
    AgentEvent,
    AgentEventKind,
    ChampionChange,
    ChangeKind,
    Decision,
    Idea,
    LlmCall,
    Message,
    RunResult,
    Trace,
    Verdict,
    new_id,
)
from recipes.identity import fingerprint, recipe_sha
from recipes.patch import make_patch

# After these verdicts an idea is out of play (PROMOTE at the top tier too: it is being stacked).
FINAL = frozenset({Verdict.REJECT, Verdict.REFUSED, Verdict.STALE, Verdict.HELD})
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
        history: History | None = None,  # the host's, shared; None: one of its own
        screen: Screen | None = None,  # draw several candidates, send the best rated
        fixed: frozenset[str] = frozenset(),  # constants the project holds fixed (Desk.fixed)
        ids: Callable[[str], str] = new_id,  # a simulation passes seeded ids: runs repeat exactly
        clock: Callable[[], float] = time.monotonic,  # and its own clock for the rests
    ) -> None:
        if history is not None and (history.editable, history.target) != (editable, target):
            raise ValueError(
                f"{name} works on {target}/{editable}, its history on "
                f"{history.target}/{history.editable}"
            )
        self.name = name
        self.brain = brain
        self.editable = editable
        self.target = target
        self.max_in_flight = max_in_flight
        self.top_tier = top_tier
        self.history = history if history is not None else History(editable, target)
        self.screen = screen
        self.fixed = fixed
        self.ids = ids
        self.clock = clock
        self.in_flight: set[str] = set()
        self.at_tier: dict[str, int] = {}  # own idea in flight -> the tier it is tested at
        self.notes: deque[str] = deque(maxlen=NOTES_KEPT)
        self.proposed = 0
        self.cooldown_s = cooldown_s
        self.failed_in_a_row = 0
        self.empty_in_a_row = 0  # attempts in a row that found nothing untried
        self.resting_until = 0.0  # monotonic
        self.proposing = False
        self.stopped = ""  # why it stopped proposing for good ("" while it goes on)
        self.idea_strategy: dict[str, int] = {}  # own idea -> strategy version it came from
        self.said_nothing_to_move = 0  # the last champion it said it had nothing to move on

    # What the swarm learned, read from the history.
    @property
    def champion(self) -> int:
        return self.history.champion

    @property
    def sources(self) -> Mapping[int, str]:
        return self.history.sources

    @property
    def findings(self) -> Mapping[str, Finding]:
        return self.history.findings

    @property
    def tried(self) -> Mapping[int, set[str]]:
        return self.history.tried

    @property
    def failures(self) -> deque[Failure]:
        return self.history.failures

    @property
    def busy(self) -> bool:
        below_top = sum(1 for i in self.in_flight if self.at_tier.get(i, 0) < self.top_tier)
        return below_top >= self.max_in_flight or len(self.in_flight) >= 2 * self.max_in_flight

    @property
    def mine(self) -> list[Finding]:
        return [f for f in self.history.findings.values() if f.author == self.name]

    def observe(self, message: Message) -> None:
        """Fold one event into the history and take what concerns this researcher. For a
        researcher with a history of its own: a shared one is folded once, by SharedHistory."""
        for notice in self.history.observe(message):
            if notice.to in (EVERYONE, self.name):
                self.hear(notice)

    def hear(self, notice: Notice) -> None:
        """React to an event the history says concerns this researcher; its own state only."""
        event = notice.event
        if isinstance(event, ChampionChange):
            if notice.new_champion and self.empty_in_a_row:  # new moves: look now
                self.empty_in_a_row, self.resting_until = 0, 0.0
            if event.kind is ChangeKind.STACK:  # out of play if it was one of its ideas
                self._out_of_play(event.idea_id)
        elif isinstance(event, Decision):
            self._on_own_decision(event)
        elif isinstance(event, RunResult):
            self._on_own_failure(event)
        elif isinstance(event, LlmCall):
            self.on_llm_call(event)

    def _on_own_decision(self, decision: Decision) -> None:
        final = decision.verdict in FINAL or (
            decision.verdict is Verdict.PROMOTE and decision.tier >= self.top_tier
        )
        if final:
            self._out_of_play(decision.idea_id)
        elif decision.idea_id in self.in_flight:
            up = decision.verdict is Verdict.PROMOTE
            self.at_tier[decision.idea_id] = decision.tier + (1 if up else 0)
        if decision.verdict is not Verdict.RETEST:
            self.notes.append(_outcome(decision))

    def release(self, idea_id: str, why: str) -> None:
        """Its idea never reached the swarm (the bus refused it): out of play, and told why."""
        self._out_of_play(idea_id)
        self.history.release(idea_id)
        self.notes.append(f"{idea_id} was never sent to the swarm: {why}")

    def _out_of_play(self, idea_id: str) -> None:
        self.in_flight.discard(idea_id)
        self.at_tier.pop(idea_id, None)

    def _on_own_failure(self, result: RunResult) -> None:
        """Told why its idea failed, log included."""
        tail = " | ".join(result.log_tail.strip().splitlines()[-3:])
        self.notes.append(
            f"{result.idea_id} {result.status.value} at tier {result.tier}: "
            f"{result.reason}" + (f"; log ends: {tail}" if tail else "")
        )

    def on_llm_call(self, call: LlmCall) -> None:
        if call.agent == self.name and call.idea_id and call.status == "ok":
            self.idea_strategy[call.idea_id] = call.strategy_version

    async def propose(self) -> Step | None:
        """One attempt at the next idea; None while busy, resting, stopped or before the first
        champion. The brain is awaited without holding anything: the researcher goes on folding
        events meanwhile, and `proposing` keeps a second attempt from starting."""
        version = self.champion
        if self.proposing or self.stopped or self.busy or version == 0:
            return None
        if self.clock() < self.resting_until:
            return None
        desk = self.desk()
        source = desk.source
        idea_id, trace_id = self.ids("idea"), self.ids("trace")
        self.proposing = True
        try:
            if self.screen is not None and self.screen.candidates > 1:
                attempt, idea_id = await self._screened(desk, idea_id, trace_id, self.screen)
            else:
                attempt = await self.brain.propose(desk, idea_id, trace_id)
        finally:
            self.proposing = False
        entry_tier = 0
        if attempt.proposal is None and not (attempt.stopped or attempt.failed):
            look = second_look(self.history, self.top_tier)  # rather than leave trainers idle
            if look is not None:
                attempt = replace(attempt, proposal=look.proposal)
                entry_tier = look.entry_tier
        if attempt.proposal is None:
            return self._no_idea(attempt, trace_id, version)
        self.failed_in_a_row = self.empty_in_a_row = 0
        for record in attempt.records:
            if isinstance(record, LlmCall):
                self.on_llm_call(record)
        read = len(desk.findings)
        return self._step(attempt, idea_id, trace_id, source, version, read, entry_tier)

    async def _screened(
        self, desk: Desk, idea_id: str, trace_id: str, screen: Screen
    ) -> tuple[Attempt, str]:
        """Up to `screen.candidates` untried proposals from the brain (each told the ones
        before it as tried), the best rated sent: (the attempt, the id it goes out under).
        Every draw's records are kept (an LLM's calls cost money whichever is sent); the
        calls of a candidate not sent name an id that never becomes an idea."""
        drawn: list[tuple[str, Proposal]] = []
        records: list[Message] = []
        tried = set(desk.tried)
        last = Attempt(None)
        for k in range(screen.candidates):
            candidate_id = idea_id if k == 0 else self.ids("idea")
            last = await self.brain.propose(
                replace(desk, tried=frozenset(tried)), candidate_id, trace_id
            )
            records += last.records
            if last.proposal is None:
                break
            drawn.append((candidate_id, last.proposal))
            tried.add(fingerprint(last.proposal.source))
        if not drawn:
            return replace(last, records=tuple(records)), idea_id
        choice = screen.pick(desk, [p for _, p in drawn])
        chosen_id, chosen = drawn[choice.index]
        proposal = replace(chosen, why=f"{chosen.why} Screening: {choice.note}.")
        return Attempt(proposal, tuple(records)), chosen_id

    def desk(self) -> Desk:
        """What the brain reads: a snapshot of everything folded so far (the history's
        snapshots of findings and tried recipes are shared until either changes)."""
        history = self.history
        version = history.champion
        return Desk(
            self.name,
            version,
            history.sources[version],
            self.editable,
            self.top_tier,
            history.findings_snapshot(),
            tuple(history.failures),
            tuple(self.notes),
            history.tried_snapshot(version),
            history.sources,
            history.lower_is_better,
            self.fixed,
        )

    def _no_idea(self, attempt: Attempt, trace_id: str, version: int) -> Step | None:
        if attempt.stopped:
            self.stopped = attempt.why_not
        elif attempt.failed:
            self.failed_in_a_row += 1
            rest = self.cooldown_s * min(2 ** (self.failed_in_a_row - 1), MAX_BACKOFF)
            self.resting_until = self.clock() + rest
        else:
            self.empty_in_a_row += 1
            rest = min(EMPTY_REST_S * 2 ** (self.empty_in_a_row - 1), MAX_EMPTY_REST_S)
            self.resting_until = self.clock() + rest
        records = attempt.records
        said = attempt.nothing_to_move and self.said_nothing_to_move != version
        if said:
            self.said_nothing_to_move = version
            note = AgentEvent(
                self.ids("ev"), self.name, AgentEventKind.NOTE, "researcher", attempt.why_not
            )
            records = (*records, note)
        if not (records or attempt.stopped or attempt.failed):
            return None  # nothing happened worth keeping (e.g. the heuristic ran out of moves)
        action = "stopped" if attempt.stopped else "refused" if attempt.failed else "skipped"
        action = "idle" if said else action  # the live view shows why it proposes nothing
        self.notes.append(f"attempt on v{version}: {action}: {attempt.why_not}")
        trace = Trace(
            trace_id,
            self.name,
            action,
            read=f"champion v{version}",
            why=attempt.why_not,
            data={"brain": self.brain.label},
        )
        return Step(trace, None, records)

    def _step(
        self,
        attempt: Attempt,
        idea_id: str,
        trace_id: str,
        source: str,
        version: int,
        read: int,
        entry_tier: int = 0,
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
            entry_tier=entry_tier,
            recipe_sha=recipe_sha(proposal.source),
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
                "persona": proposal.persona.value if proposal.persona else "",
                "parents": list(proposal.parents),
                "brain": self.brain.label,
                "entry_tier": entry_tier,
            },
        )
        # Into the history now, not when the bus brings the idea back: its author must never
        # propose it twice, and the host's other researchers need not either.
        self.in_flight.add(idea_id)
        if entry_tier:
            self.at_tier[idea_id] = entry_tier
        self.proposed += 1
        self.notes.append(f"proposed {idea_id} on v{version}: {_first_line(proposal.hypothesis)}")
        for notice in self.history.propose(idea, fingerprint(proposal.source)):
            if notice.to == self.name:
                self.hear(notice)
        return Step(trace, idea, attempt.records)


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
