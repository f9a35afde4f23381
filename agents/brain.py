"""What a researcher's brain is given and what it gives back.

A researcher folds the swarm's history into a Desk (the champion recipe, every finding, recent
failures with their log tails, its own recent outcomes) and asks its brain for one Attempt: a
Proposal, or why there is none, plus the records the attempt produced (LLM calls, prompt
prefixes, strategy versions) for the ledger. Two kinds of brain: the offline heuristic search
(OfflineBrain, below) and a language model (agents/llm_brain.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from agents.heuristic_brain import Finding, HeuristicBrain, Persona, Proposal
from bus.messages import Message


@dataclass(frozen=True, slots=True)
class Failure:
    """A run of some idea that did not produce a metric, and what its log said."""

    idea_id: str
    tier: int
    status: str
    reason: str
    log_tail: str


@dataclass(frozen=True, slots=True)
class Desk:
    """Everything a brain may read for one proposal; a snapshot, so it can be read while the
    researcher goes on folding events."""

    agent: str
    version: int  # the champion the proposal is for
    source: str  # the champion's editable file
    editable: str  # its file name
    top_tier: int
    findings: tuple[Finding, ...]  # every idea the swarm tried, with what it learned
    failures: tuple[Failure, ...]  # recent failed runs, newest last
    notes: tuple[str, ...]  # the researcher's own recent attempts and what became of them
    tried: frozenset[str]  # fingerprints of recipes already tried on this champion


@dataclass(frozen=True, slots=True)
class Attempt:
    proposal: Proposal | None
    records: tuple[Message, ...] = ()  # for the ledger, published before the idea
    why_not: str = ""  # no proposal: why
    failed: bool = False  # an API error or an unusable answer: back off before the next try
    stopped: bool = False  # the budget is spent: propose no more


class Brain(Protocol):
    persona: Persona
    label: str  # what the live view and the traces call it, e.g. "anthropic claude-sonnet-4-5"

    async def propose(self, desk: Desk, idea_id: str, trace_id: str) -> Attempt: ...


class OfflineBrain:
    """The heuristic search behind the Brain interface (no I/O, so nothing to record)."""

    def __init__(self, search: HeuristicBrain) -> None:
        self.search = search
        self.persona = search.persona
        self.label = "heuristic"

    async def propose(self, desk: Desk, idea_id: str, trace_id: str) -> Attempt:
        proposal = self.search.propose(desk.source, desk.version, desk.findings, desk.tried)
        return Attempt(proposal, why_not="" if proposal else "no untried change left")
