"""What the live view shows, gathered: the ledger's few cheap read-only queries (through the
same SQL gate as `swarm sql`) and JetStream's trainer queues, as a LiveSnapshot; the web view
reads through the same queries. Drawing it is live_view.py's.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field, replace
from typing import Any, cast

from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.js.errors import NotFoundError

from agents.brain import Persona
from agents.brain_groups import LLM_BRAINS, MODEL_BRAINS
from agents.finding_values import FINAL
from bus.messages import SHOWN_VERDICT_SQL
from bus.subjects import JOBS_STREAM, trainer_consumer_name
from bus.untrusted import for_terminal
from ledger.sql_protocol import SqlError
from swarm.sql_client import Answer, LedgerUnavailable, ask_ledger

MAX_EXPERIMENTS_SHOWN = 12  # running first, then the oldest queued
LEADERBOARD_ROWS = 8
CHAMPIONS_SHOWN = 6
PERSONAS = frozenset(p.value for p in Persona)  # researchers are named <prefix>-<i>-<persona>
# researchers are named <prefix>-<i>-tpe|gp, or <prefix>-<i>[-<llm brain>|-portfolio]-<persona>
TRAINERS = trainer_consumer_name(0).removesuffix("0")  # trainer consumers: TRAINERS + tier

TOTALS_SQL = f"""
SELECT 'runs' AS what, status AS name, count(*) AS n FROM runs GROUP BY status
UNION ALL SELECT 'decisions', {SHOWN_VERDICT_SQL}, count(*) FROM decisions GROUP BY ALL
UNION ALL SELECT 'tiers', CAST(tier AS VARCHAR), count(*) FROM run_specs GROUP BY tier
UNION ALL SELECT 'unfinished', CAST(tier AS VARCHAR), count(*) FROM unfinished_runs GROUP BY tier
UNION ALL SELECT 'llm', 'calls', count(*) FROM llm_calls
-- a cost no BIGINT of micro-dollars holds (a researcher may record any number) reads as -1
UNION ALL SELECT 'llm', 'micro_usd',
    coalesce(TRY_CAST(round(coalesce(sum(cost_usd), 0) * 1e6) AS BIGINT), -1)
FROM llm_calls"""

# An idea is in play until its latest verdict is final for its author, or it was stacked.
AGENTS_SQL = f"""
WITH last AS (
    SELECT agent, arg_max(action, created_at) AS action,
           -- a proposal shows what it proposed; anything else (stopped, refused) why
           arg_max(CASE WHEN action = 'propose' THEN proposed ELSE action || ': ' || why END,
                   created_at) AS proposed,
           epoch(max(created_at)) AS at_s,
           max(created_at) FILTER (WHERE action = 'propose') AS proposed_at
    FROM traces GROUP BY agent),
notes AS (
    SELECT agent, arg_max(detail, created_at) AS note, max(created_at) AS note_at
    FROM agent_events WHERE kind = 'NOTE' GROUP BY agent),
verdicts AS (
    SELECT idea_id, arg_max(verdict, created_at) AS verdict FROM decisions GROUP BY idea_id),
in_play AS (
    SELECT i.author, count(*) AS n FROM ideas i LEFT JOIN verdicts v USING (idea_id)
    WHERE coalesce(v.verdict, '') NOT IN ({", ".join(f"'{v}'" for v in sorted(FINAL))})
      AND NOT EXISTS (SELECT 1 FROM champions c WHERE c.idea_id = i.idea_id)
    GROUP BY i.author)
SELECT a.agent_id AS name, coalesce(p.n, 0) AS in_play, coalesce(l.action, '') AS last_action,
       coalesce(l.proposed, '') AS last_proposed, l.at_s AS last_at,
       -- a note holds until the researcher proposes again
       CASE WHEN l.proposed_at IS NULL OR n.note_at > l.proposed_at
            THEN coalesce(n.note, '') ELSE '' END AS note
FROM agents a LEFT JOIN last l ON l.agent = a.agent_id LEFT JOIN in_play p ON p.author = a.agent_id
LEFT JOIN notes n ON n.agent = a.agent_id
WHERE a.role = 'researcher' ORDER BY a.agent_id"""

# The unfinished RunSpecs per tier, those trainers have started first, then the oldest: the
# first `running` of them are the ones trainers hold. A tier's work queue is first in, first
# out, but a capped tier's runs wait in the ladder and go best first (scale_ladder/dispatch.py),
# so age alone does not say which runs. A run's start is its trainer's latest STARTED event (a
# job handed back, or whose trainer died, starts again elsewhere); a run has none before its
# event arrives, on an instant target, or from a trainer of an older release: age decides then.
EXPERIMENTS_SQL = f"""
WITH typical AS (
    SELECT tier, median(startup_seconds + train_seconds + eval_seconds) AS typical_s
    FROM runs WHERE status = 'OK' GROUP BY tier),
started AS (
    SELECT detail AS run_id, max(created_at) AS started_at FROM agent_events
    WHERE kind = 'STARTED' AND detail IN (SELECT run_id FROM unfinished_runs) GROUP BY detail),
shown AS (
    SELECT u.run_id, u.tier, u.idea_id, u.seed, u.created_at, st.started_at,
           row_number() OVER (
               PARTITION BY u.tier ORDER BY st.started_at IS NULL, u.created_at) AS place
    FROM unfinished_runs u LEFT JOIN started st USING (run_id)
    QUALIFY place <= {MAX_EXPERIMENTS_SHOWN})
SELECT s.tier, s.idea_id, s.seed, epoch(s.created_at) AS created_s,
       epoch(s.started_at) AS started_s, t.typical_s, s.place
FROM shown s LEFT JOIN typical t USING (tier)"""

# {order}: ASC where lower is better, DESC where higher is; best first either way.
LEADERBOARD_SQL = f"""
SELECT l.tier, l.champion_version, l.idea_id, coalesce(l.author, '') AS author,
       left(coalesce(l.hypothesis, ''), 120) AS hypothesis, l.metric_name, l.mean_metric, l.n_runs
FROM leaderboard l JOIN (
    SELECT tier, max(champion_version) AS champion_version FROM run_stats GROUP BY tier
) latest USING (tier, champion_version)
ORDER BY l.tier DESC, l.mean_metric {{order}} LIMIT {LEADERBOARD_ROWS}"""

LINEAGE_SQL = f"""
SELECT version, kind, idea_id, coalesce(author, '') AS author,
       left(coalesce(hypothesis, ''), 120) AS hypothesis, epoch(created_at) AS created_at
FROM lineage ORDER BY version DESC LIMIT {CHAMPIONS_SHOWN}"""

# Seconds after `swarm start` during which a ledger that does not answer is still starting.
STARTING_S = 30.0
LEDGER_STARTING = "ledger: starting"


@dataclass(frozen=True, slots=True)
class AgentRow:
    name: str
    in_play: int  # its ideas without a final verdict yet
    last_action: str = ""
    last_proposed: str = ""
    last_at: float | None = None  # epoch seconds of its latest trace
    note: str = ""  # what it said about itself (an AgentEvent NOTE) since it last proposed


@dataclass(frozen=True, slots=True)
class TierQueue:
    tier: int
    queued: int
    running: int


@dataclass(frozen=True, slots=True)
class Experiment:
    tier: int
    idea_id: str  # '' for a baseline run of the champion
    seed: int
    age_s: float  # since its RunSpec was created: queue time included
    running: bool
    run_s: float | None = None  # since a trainer started it; None: no start known
    progress: float | None = None  # run_s against the tier's typical run, at most 0.99


@dataclass(frozen=True, slots=True)
class Standing:
    tier: int
    champion_version: int
    idea_id: str  # '(champion)' for the champion's own baseline runs
    author: str
    hypothesis: str
    metric_name: str
    mean_metric: float
    n_runs: int


@dataclass(frozen=True, slots=True)
class ChampionRow:
    version: int
    kind: str
    idea_id: str
    author: str
    hypothesis: str
    created_at: float  # epoch seconds


@dataclass(frozen=True, slots=True)
class LiveSnapshot:
    elapsed_s: float
    minutes: float | None  # the time limit, None: none
    max_experiments: int  # 0: no limit
    taken_at: float = field(default_factory=time.time)  # epoch seconds; ages are relative to it
    agents: tuple[AgentRow, ...] = ()
    queues: tuple[TierQueue, ...] = ()
    experiments: tuple[Experiment, ...] = ()
    leaderboard: tuple[Standing, ...] = ()  # best first, top tier first
    lower_is_better: bool = True  # the target's metric: how the leaderboard is ordered
    champions: tuple[ChampionRow, ...] = ()  # newest first
    runs_by_status: dict[str, int] = field(default_factory=dict)
    decisions_by_verdict: dict[str, int] = field(default_factory=dict)
    llm_calls: int = 0
    llm_usd: float = 0.0
    error: str = ""  # why the ledger or the bus did not answer; the rest may then be empty

    @property
    def experiments_run(self) -> int:
        return sum(self.runs_by_status.values())

    @property
    def champion_version(self) -> int:
        return self.champions[0].version if self.champions else 0

    def notes(self) -> list[str]:
        """One line per distinct note, naming who said it (researchers of a kind say the same)."""
        said: dict[str, list[str]] = {}
        for a in self.agents:
            if a.note:
                said.setdefault(a.note, []).append(a.name)
        # Researchers wrote these: shown, in a log file or a terminal, as text (bus/untrusted.py).
        return [
            for_terminal(f"{who(names)}: {note}", newlines=False) for note, names in said.items()
        ]

    def line(self) -> str:
        """One plain line for logs: elapsed, runs, queues, champion, best at the top tier."""
        parts = [f"elapsed {with_limit(duration(self.elapsed_s), self.minutes)}"]
        parts.append(f"runs {self.experiments_run}" + of_limit(self.max_experiments))
        parts += [f"tier{q.tier} {q.queued}q/{q.running}r" for q in self.queues]
        parts.append(f"champion v{self.champion_version}")
        if self.llm_calls:
            parts.append(f"LLM ${self.llm_usd:.4f} ({self.llm_calls} calls)")
        if self.leaderboard:
            best = self.leaderboard[0]
            parts.append(f"best@tier{best.tier} {best.idea_id} {best.mean_metric:.4f}")
        if self.error:  # a ledger still starting is no error
            parts.append(self.error if self.error == LEDGER_STARTING else f"error: {self.error}")
        return for_terminal(" | ".join(parts), newlines=False)  # idea ids and errors included


async def gather_snapshot(
    nc: Client,
    started_at: float,
    minutes: float | None,
    max_experiments: int,
    timeout_s: float = 5.0,
    lower_is_better: bool = True,
) -> LiveSnapshot:
    """Ask the ledger and JetStream at once; `started_at` is the swarm's start, time.monotonic().
    `lower_is_better` is the target's metric direction: the leaderboard shows the best first."""
    base = LiveSnapshot(
        time.monotonic() - started_at, minutes, max_experiments, lower_is_better=lower_is_better
    )
    board_sql = LEADERBOARD_SQL.format(order="ASC" if lower_is_better else "DESC")
    sqls = (TOTALS_SQL, AGENTS_SQL, EXPERIMENTS_SQL, board_sql, LINEAGE_SQL)
    consumers, *answers = await asyncio.gather(
        trainer_queues(nc, timeout_s),
        *(ask_ledger(nc, sql, timeout_s) for sql in sqls),
        return_exceptions=True,
    )
    held = (
        {} if isinstance(consumers, BaseException) else cast(dict[int, tuple[int, int]], consumers)
    )
    starting = base.elapsed_s < STARTING_S
    problems = [
        _problem(a, starting) for a in (consumers, *answers) if isinstance(a, BaseException)
    ]
    if problems:  # show what did answer: the queues survive a ledger restart
        queues = tuple(TierQueue(t, *held[t]) for t in sorted(held))
        return replace(base, queues=queues, error="; ".join(dict.fromkeys(problems)))  # unique
    tables = [cast(Answer, a).table.to_pylist() for a in answers]
    totals, agents, experiments, leaderboard, lineage = tables
    queues = tier_queues(held, totals)
    running = {q.tier: q.running for q in queues}
    llm = {r["name"]: r["n"] for r in totals if r["what"] == "llm"}
    return replace(
        base,
        agents=tuple(AgentRow(**r) for r in agents),
        queues=queues,
        experiments=experiments_from(experiments, running, base.taken_at),
        leaderboard=tuple(Standing(**r) for r in leaderboard),
        champions=tuple(ChampionRow(**r) for r in lineage),
        runs_by_status={r["name"]: r["n"] for r in totals if r["what"] == "runs"},
        decisions_by_verdict={r["name"]: r["n"] for r in totals if r["what"] == "decisions"},
        llm_calls=llm.get("calls", 0),
        llm_usd=usd_of(llm.get("micro_usd", 0)),
    )


async def trainer_queues(nc: Client, timeout_s: float) -> dict[int, tuple[int, int]]:
    """(queued, running) per tier that has a trainer consumer."""
    try:
        infos = await asyncio.wait_for(nc.jetstream().consumers_info(JOBS_STREAM), timeout_s)
    except NotFoundError:
        return {}
    held = {}
    for info in infos:
        tier = info.name.removeprefix(TRAINERS)
        if info.name.startswith(TRAINERS) and tier.isdigit():
            held[int(tier)] = (info.num_pending or 0, info.num_ack_pending or 0)
    return held


def tier_queues(
    held: dict[int, tuple[int, int]], totals: list[dict[str, Any]]
) -> tuple[TierQueue, ...]:
    """Queued and running per tier, from the trainers' consumers (`held`) and TOTALS_SQL's rows.
    A capped tier's runs wait in the ladder, not on the work queue (scale_ladder/dispatch.py):
    they are queued too, and the ledger counts them among the tier's unfinished runs."""
    tiers = sorted(set(held) | {int(r["name"]) for r in totals if r["what"] == "tiers"})
    unfinished = {int(r["name"]): r["n"] for r in totals if r["what"] == "unfinished"}
    queues = []
    for tier in tiers:
        queued, running = held.get(tier, (0, 0))
        queues.append(TierQueue(tier, max(queued, unfinished.get(tier, 0) - running), running))
    return tuple(queues)


def experiments_from(
    rows: list[dict[str, Any]], running: dict[int, int], now: float
) -> tuple[Experiment, ...]:
    found = []
    for r in rows:
        age = max(0.0, now - r["created_s"])
        is_running = r["place"] <= running.get(r["tier"], 0)
        # Time in the queue is no progress: a run is measured from its start, when one is known.
        started = r["started_s"] if is_running else None
        run_s = None if started is None else max(0.0, now - started)
        typical = r["typical_s"]
        progress = min(0.99, run_s / typical) if run_s is not None and typical else None
        found.append(
            Experiment(r["tier"], r["idea_id"], r["seed"], age, is_running, run_s, progress)
        )
    found.sort(key=lambda e: (not e.running, -e.tier, -e.age_s))
    return tuple(found[:MAX_EXPERIMENTS_SHOWN])


def _problem(exc: BaseException, starting: bool = False) -> str:
    """What a ledger or bus that did not answer says; anything else is a bug and raises. While
    the swarm starts, a ledger not answering yet is expected (it was read as a failure)."""
    if isinstance(exc, LedgerUnavailable) and starting:
        return LEDGER_STARTING
    if isinstance(exc, LedgerUnavailable | SqlError):
        return f"ledger: {exc}"
    if isinstance(exc, NatsError | TimeoutError):
        return f"bus: {exc or type(exc).__name__}"
    raise exc


def usd_of(micro_usd: int) -> float:
    """Dollars from TOTALS_SQL's micro-dollars; infinity where the sum overflowed (-1)."""
    return micro_usd / 1e6 if micro_usd >= 0 else math.inf


def brain_and_persona(name: str) -> tuple[str, str]:
    """A researcher's brain and persona, from its name: <prefix>-<i>-tpe|gp, or
    <prefix>-<i>[-<llm brain>|-portfolio]-<persona> (agents/host.py names them so)."""
    *rest, persona = name.split("-")
    if persona in MODEL_BRAINS:
        return persona, ""
    named = rest[-1] if rest else ""
    brain = named if named in (*LLM_BRAINS, "portfolio") else "heuristic"
    return brain, persona if persona in PERSONAS else ""


def who(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{names[0]} and {len(names) - 1} more researchers"


def duration(seconds: float) -> str:
    s = int(max(0.0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def with_limit(elapsed: str, minutes: float | None) -> str:
    return elapsed if minutes is None else f"{elapsed}/{duration(minutes * 60)}"


def of_limit(limit: int) -> str:
    return f"/{limit}" if limit else ""
