"""The messages of the swarm, one frozen dataclass per hop.

Reading order is the flow: Idea → RunSpec → RunResult → Decision → ChampionChange.
Trace, AgentEvent and DeadLetter are the side channels every hop may emit; LlmCall, PromptPrefix
and StrategyVersion record what the LLM researchers and the meta-agent asked, answered and spent.

Every message has an `event_id`: unique per event of its kind, sent with its kind as
`Nats-Msg-Id` (so JetStream drops a re-publish; the kind, since an idea's id is a researcher's
choice and could equal another kind's) and used as the ledger's primary key (so a redelivery
never adds a row). Where one
thing must happen exactly once (one result per RunSpec), the id is derived from that thing.
"""

from __future__ import annotations

import enum
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeAlias

from bus.fast_pickle import by_fields

# The messages' schema version, major.minor (the codec's envelope carries both; bus/codec.py).
# A minor version only adds optional fields, so a reader of an older minor version ignores what
# it does not know (the ledger keeps it); a major version changes what fields mean. Bump the
# minor version with every field added, the major one never without a migration of the stream.
# Events written before minor versions existed carry the major version alone: minor 0.
SCHEMA_VERSION = 1
SCHEMA_MINOR = 4


def event_key(kind: str, event_id: str) -> str:
    """An event's id with its kind: unique across kinds (an idea's id is a researcher's choice
    and could equal another kind's). JetStream's `Nats-Msg-Id`, the ledger's dead-letter key,
    the ladder's memory of what it has folded."""
    return f"{kind}-{event_id}"


def new_id(prefix: str) -> str:
    """A short unique id that says what it names, e.g. `idea-3f2a…`."""
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


def now() -> float:
    """Wall-clock seconds since the epoch; every message records when it was made."""
    return time.time()


class RunStatus(enum.StrEnum):
    OK = "OK"
    CRASH = "CRASH"
    TIMEOUT = "TIMEOUT"
    OOM = "OOM"
    REFUSED = "REFUSED"
    SKIPPED = "SKIPPED"  # not run: the champion it was for had been replaced before it started


class Verdict(enum.StrEnum):
    PROMOTE = "PROMOTE"
    REJECT = "REJECT"
    RETEST = "RETEST"
    STALE = "STALE"  # the champion moved on and the idea's patch no longer applies to it
    REFUSED = "REFUSED"  # not admitted: a duplicate, or a patch that does not apply
    # An idea: passed the top tier and waits for a person (`swarm approve` / `swarm reject`).
    # No idea (idea_id ""): a whole tier held, its champion scoring the same on every seed
    # (rule `seed_ignored: ...`, scale_ladder/rules.py).
    HELD = "HELD"


class BudgetKind(enum.StrEnum):
    TOKENS = "tokens"
    SECONDS = "seconds"
    UNITS = "units"  # a command target's own unit (iterations, epochs...): the command's to read


# A tier's dial: bytelm's are ints (depth, width, context); a command target's are free-form.
Dial: TypeAlias = bool | int | float | str


class ChangeKind(enum.StrEnum):
    INITIAL = "INITIAL"
    STACK = "STACK"
    REVERT = "REVERT"


class AgentEventKind(enum.StrEnum):
    JOINED = "JOINED"
    HEARTBEAT = "HEARTBEAT"
    LEFT = "LEFT"
    NOTE = "NOTE"
    STARTED = "STARTED"  # a trainer started a run (detail: its run id); the live view's clock


@dataclass(frozen=True, slots=True)
class Idea:
    """A hypothesis and a unified diff against one champion version of the editable file."""

    KIND: ClassVar[str] = "idea"
    idea_id: str
    author: str
    hypothesis: str
    patch: str
    champion_version: int
    target: str = "bytelm"
    trace_id: str = ""
    parent_ids: tuple[str, ...] = ()
    created_at: float = field(default_factory=now)
    # The tier it is first tested at. Above 0 only for a second look: the recipe of its first
    # parent, rejected by the rules at the tier below on the same champion, tested once more one
    # tier up, where a misleading proxy tier cannot reject it (scale_ladder/second_look.py).
    entry_tier: int = 0
    # The content address of the recipe its patch makes of that champion (recipes/identity.py):
    # the ladder refuses an idea whose patch makes another. Added in schema v1.2; "": not said.
    recipe_sha: str = ""

    @property
    def event_id(self) -> str:
        return self.idea_id


@dataclass(frozen=True, slots=True)
class RunSpec:
    """One experiment: a recipe (the champion's, or an idea's: the champion plus its patch) at one
    tier and one seed."""

    KIND: ClassVar[str] = "run_spec"
    run_id: str
    tier: int
    seed: int
    champion_version: int
    budget_kind: BudgetKind
    budget: float
    idea_id: str = ""  # empty for a baseline run of the champion
    patch: str = ""
    target: str = "bytelm"
    dials: dict[str, Dial] = field(default_factory=dict)
    time_limit_s: float = 0.0  # hard wall clock for the experiment; 0: the trainer's default
    eval_tokens: int = 0  # held-out bytes to score; 0: the trainer's default
    created_at: float = field(default_factory=now)
    # The data the ladder recorded for this champion and tier (the first baseline run's corpus
    # hash there); a trainer whose data differs refuses the run. Empty: none recorded yet, or a
    # target without a corpus. Added in schema v1.1.
    corpus_hash: str = ""
    # The content address of the whole recipe this run executes, the champion's or an idea's
    # (recipes/identity.py): trainers fetch it from the recipe store and run it as it is, with
    # no patch to apply. Added in schema v1.2; "" in older RunSpecs, whose trainers applied the
    # patch to the champion themselves (still done for them: training/spec_recipe.py).
    recipe_sha: str = ""
    # the event the ladder had folded last when it made this (its event_key; empty: none yet):
    # `swarm whatif` acts where the live ladder acted, not after every event. Added in v1.3.
    after_event: str = ""

    @property
    def event_id(self) -> str:
        return self.run_id


@dataclass(frozen=True, slots=True)
class RunResult:
    """What one RunSpec produced. Exactly one per run: its event id derives from the run id."""

    KIND: ClassVar[str] = "run_result"
    run_id: str
    tier: int
    seed: int
    champion_version: int
    status: RunStatus
    idea_id: str = ""
    metric_name: str = "val_bpb"
    metric: float | None = None
    # The metric of the median control window: training text the run was scored on but never
    # sent (training/control_windows.py); None where the target has none. Schema v1.4.
    control_metric: float | None = None
    steps: int = 0
    tokens: int = 0
    train_seconds: float = 0.0
    startup_seconds: float = 0.0  # experiment start to first batch (outside the budget)
    eval_seconds: float = 0.0  # last batch to metric computed
    flops: float = 0.0
    peak_mem_mb: float = 0.0
    device: str = ""
    trainer: str = ""
    unconfined: bool = False  # run with --unsafe-no-sandbox: its code may have reached anything
    corpus_hash: str = ""
    reason: str = ""
    log_tail: str = ""
    started_at: float = 0.0
    finished_at: float = field(default_factory=now)

    @property
    def event_id(self) -> str:
        return f"result-{self.run_id}"


@dataclass(frozen=True, slots=True)
class Decision:
    """A verdict on an idea at a tier, with the numbers behind it."""

    KIND: ClassVar[str] = "decision"
    decision_id: str
    idea_id: str
    tier: int
    verdict: Verdict
    champion_version: int
    rule: str
    delta: float | None = None
    sigma: float | None = None
    n: int = 0
    details: str = ""
    seeds_wanted: int = 0  # RETEST: paired seeds the idea will have at this tier
    decided_by: str = "ladder"  # who decided: the ladder's rules, or a person (approve/reject)
    # the idea's runs at this tier on this champion so far; an idea's last decision at a tier
    # (any verdict but RETEST) carries what that tier cost it
    runs: int = 0
    # the event the ladder had folded last when it made this (its event_key; empty: none yet):
    # `swarm whatif` acts where the live ladder acted, not after every event. Added in v1.3.
    after_event: str = ""
    created_at: float = field(default_factory=now)

    @property
    def event_id(self) -> str:
        return self.decision_id


@dataclass(frozen=True, slots=True)
class ChampionChange:
    """A new champion version of the editable file."""

    KIND: ClassVar[str] = "champion_change"
    version: int
    parent_version: int
    kind: ChangeKind
    recipe_sha: str
    idea_id: str = ""
    patch: str = ""  # the change from the parent version (a unified diff)
    reason: str = ""
    source: str = ""  # the whole editable file at this version
    # runs of the stacked idea that are runs of this recipe, kept as its baseline (not re-run)
    carried_runs: int = 0
    # the event the ladder had folded last when it made this (its event_key; empty: none yet):
    # `swarm whatif` acts where the live ladder acted, not after every event. Added in v1.3.
    after_event: str = ""
    created_at: float = field(default_factory=now)

    @property
    def event_id(self) -> str:
        return f"champion-{self.version}"


@dataclass(frozen=True, slots=True)
class Trace:
    """One agent action: what it read, what it proposed, why."""

    KIND: ClassVar[str] = "trace"
    trace_id: str
    agent: str
    action: str
    read: str = ""
    proposed: str = ""
    why: str = ""
    idea_id: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    created_at: float = field(default_factory=now)

    @property
    def event_id(self) -> str:
        return self.trace_id


# How a NOTE that gives an unsent idea back to its researcher begins, after the idea id:
# written by the agents host, read by `swarm audit`.
NEVER_SENT = " was never sent"

# How the rule of a PROMOTE begins that sends on an idea the rules rejected (a spot check of the
# tier's gate, scale_ladder/spot_checks.py): it passed no gate there. Read by the brains.
SPOT_CHECK = "spot check"


def is_spot_check(rule: str) -> bool:
    return rule.startswith(SPOT_CHECK)


# A decision's verdict as counts show it: a spot check apart from the promotions.
SHOWN_VERDICT_SQL = f"CASE WHEN rule LIKE '{SPOT_CHECK}%' THEN 'SPOT CHECK' ELSE verdict END"


@dataclass(frozen=True, slots=True)
class AgentEvent:
    """An agent joined, is alive, left, or says something worth keeping."""

    KIND: ClassVar[str] = "agent_event"
    event_key: str
    agent: str
    kind: AgentEventKind
    role: str = ""
    detail: str = ""
    created_at: float = field(default_factory=now)

    @property
    def event_id(self) -> str:
        return self.event_key


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A message some consumer refused, kept with the reason and the raw bytes (truncated)."""

    KIND: ClassVar[str] = "dead_letter"
    dead_letter_id: str
    subject: str
    reason: str
    raw: str
    raw_bytes: int
    consumer: str
    created_at: float = field(default_factory=now)

    @property
    def event_id(self) -> str:
        return self.dead_letter_id


@dataclass(frozen=True, slots=True)
class LlmCall:
    """One call to a language model: the parts of the prompt that varied, the whole answer, the
    tokens and what they cost. The cached prefix is stored once, as a PromptPrefix."""

    KIND: ClassVar[str] = "llm_call"
    call_id: str
    agent: str
    purpose: str  # propose | repair (second try after an unusable answer) | meta
    provider: str  # anthropic | openai
    model: str
    status: str  # ok | refused (the answer could not be used) | error (the API failed)
    prompt_sha: str  # sha256 of the whole prompt: prefix and varying part
    prefix_sha: str  # sha256 of the cached prefix (its text: the prompt_prefixes table)
    dynamic: str  # the varying part as sent: the conversation after the prefix
    response: str  # the model's whole answer ("" when the API failed)
    error: str = ""  # why the answer was refused or the call failed
    tokens_in: int = 0  # uncached input tokens
    tokens_out: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float = 0.0  # from the price table in config
    latency_s: float = 0.0  # retries and back-off included
    retries: int = 0  # rate-limited or overloaded answers before this one
    idea_id: str = ""  # the idea it produced, if any
    trace_id: str = ""  # the researcher's trace of the proposal it served
    strategy_version: int = 0  # the author's strategy file version the prompt carried
    created_at: float = field(default_factory=now)

    @property
    def event_id(self) -> str:
        return self.call_id


@dataclass(frozen=True, slots=True)
class PromptPrefix:
    """The text of a cached prompt prefix, stored once per distinct prefix."""

    KIND: ClassVar[str] = "prompt_prefix"
    prefix_sha: str
    text: str
    created_at: float = field(default_factory=now)

    @property
    def event_id(self) -> str:
        return f"prefix-{self.prefix_sha}"


@dataclass(frozen=True, slots=True)
class StrategyVersion:
    """A version of one researcher's strategy file, with the hit rates that led to it."""

    KIND: ClassVar[str] = "strategy"
    strategy_id: str  # strategy-<agent>-v<version>
    agent: str
    version: int
    text: str
    sha: str
    author: str  # the meta-agent that wrote it, or "initial"
    reason: str  # what the author saw and changed
    # Per tier, the ideas the researcher proposed under the previous version and how many
    # passed that tier: {"proposed": n, "promoted": {"0": k0, ...}, "hit_rate": {"0": r0, ...}}.
    hit_rates_before: dict[str, Any] = field(default_factory=dict)
    call_id: str = ""  # the meta-agent's LLM call
    created_at: float = field(default_factory=now)

    @property
    def event_id(self) -> str:
        return self.strategy_id


Message = (
    Idea
    | RunSpec
    | RunResult
    | Decision
    | ChampionChange
    | Trace
    | AgentEvent
    | DeadLetter
    | LlmCall
    | PromptPrefix
    | StrategyVersion
)

MESSAGE_TYPES: dict[str, type[Message]] = {
    cls.KIND: cls
    for cls in (
        Idea,
        RunSpec,
        RunResult,
        Decision,
        ChampionChange,
        Trace,
        AgentEvent,
        DeadLetter,
        LlmCall,
        PromptPrefix,
        StrategyVersion,
    )
}
for _cls in MESSAGE_TYPES.values():
    by_fields(_cls)  # snapshots hold them by the hundred thousand (bus/fast_pickle.py)
