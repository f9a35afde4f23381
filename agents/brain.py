"""The one seam every brain implements: what a researcher's brain is given and gives back.

A researcher folds the swarm's history into a Desk (the champion recipe, every finding, recent
failures with their log tails, its own recent outcomes) and asks its brain for one Attempt: a
Proposal, or why there is none, plus the records the attempt produced (LLM calls, prompt
prefixes, strategy versions) for the ledger. Three kinds of brain implement it: a model-based
search on Optuna (agents/model_brain.py), the heuristic personas (agents/heuristic_brain.py) and
a language model (agents/llm_brain.py). The types here are what brains, the LLM prompt, the
meta-agent and the live view share; nothing in this module depends on any one brain.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from bus.fast_pickle import by_fields
from bus.messages import Message
from recipes.constants import Change


class Persona(enum.StrEnum):
    """A research style: the heuristic brain's preferred move, an LLM researcher's strategy
    file. Model-based brains have none (their surrogate decides where to look)."""

    EXPLORER = "explorer"
    EXPLOITER = "exploiter"
    COMBINER = "combiner"
    ABLATOR = "ablator"


@by_fields
@dataclass(frozen=True, slots=True)
class Gain:
    """An idea's mean paired gain at one tier of one champion, from its final verdict there."""

    version: int  # the champion it was compared with (after rebases)
    tier: int
    delta: float  # positive: better than that champion
    # the champion's metric on the first seed both ran (every idea runs a tier's first seed),
    # from the verdict's numbers: a common reference for ideas on different champions
    baseline: float | None = None
    # rejected here, and sent on to the next tier by a spot check (bus.messages.SPOT_CHECK)
    spot_check: bool = False


@by_fields
@dataclass(frozen=True, slots=True)
class Finding:
    """What the swarm learned about one idea, as read from the event stream (the ledger's input)."""

    idea_id: str
    author: str
    champion_version: int  # the champion it was proposed on
    changes: tuple[Change, ...]  # the recipe constants it changed
    hypothesis: str
    tier: int  # highest tier decided
    verdict: str  # latest verdict; "" while undecided
    delta: float | None  # mean paired gain at that tier; positive: better than the champion
    stacked_into: int = 0  # the champion version it became; 0: not stacked
    reason: str = ""  # the rule behind the latest verdict, or why its runs failed
    gains: tuple[Gain, ...] = ()  # every tier it was decided at (PROMOTE or REJECT), in order
    failed: bool = False  # a run of it crashed, timed out or ran out of memory
    code_changed: bool = False  # its patch edits more than the constants in `changes`

    @property
    def stacked(self) -> bool:
        return self.stacked_into > 0


@dataclass(frozen=True, slots=True)
class Proposal:
    hypothesis: str
    source: str  # the full new recipe
    changes: tuple[Change, ...]
    persona: Persona | None
    why: str  # what the brain read and why it chose this, for the trace
    parents: tuple[str, ...] = ()  # idea ids it builds on


@by_fields
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
    sources: Mapping[int, str] = field(default_factory=dict)  # each champion version's recipe
    lower_is_better: bool = True  # the target's metric
    # names and globs of constants the project holds fixed (recipes/fixed.py): no
    # brain moves them, and the LLM prompt says so
    fixed: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Attempt:
    proposal: Proposal | None
    records: tuple[Message, ...] = ()  # for the ledger, published before the idea
    why_not: str = ""  # no proposal: why
    failed: bool = False  # an API error or an unusable answer: back off before the next try
    stopped: bool = False  # the budget is spent: propose no more
    # an offline brain found no constant it may move in the champion: `why_not` says why, and
    # the researcher tells the swarm once per champion (a new one may have some)
    nothing_to_move: bool = False


class Brain(Protocol):
    label: str  # what the live view and the traces call it, e.g. "anthropic claude-sonnet-4-5"

    @property
    def persona(self) -> Persona | None: ...

    async def propose(self, desk: Desk, idea_id: str, trace_id: str) -> Attempt: ...
