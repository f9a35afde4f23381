"""What the web view's pages show, as JSON built from read-only SQL (through `Source`).

The browser fills the pages from these with text nodes only (swarm/web/static/app.js): every
string here may have been written by a researcher or an experiment, and stays data.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

from bus.messages import SHOWN_VERDICT_SQL
from swarm.live_snapshot import (
    AGENTS_SQL,
    EXPERIMENTS_SQL,
    LEADERBOARD_SQL,
    TOTALS_SQL,
    brain_and_persona,
    experiments_from,
    tier_queues,
    usd_of,
)
from swarm.web.source import Source, rows

LINEAGE_SQL = """
SELECT c.version, c.parent_version, c.kind, c.idea_id, coalesce(i.author, '') AS author,
       left(coalesce(i.hypothesis, ''), 300) AS hypothesis, c.patch, c.reason,
       epoch(c.created_at) AS at_s
FROM champions c LEFT JOIN ideas i USING (idea_id) ORDER BY c.version DESC LIMIT 30"""

DECISIONS_SQL = f"""
SELECT epoch(created_at) AS at_s, idea_id, tier, {SHOWN_VERDICT_SQL} AS verdict,
       champion_version, delta, sigma, n, runs, decided_by, left(rule, 400) AS rule
FROM decisions WHERE idea_id <> '' ORDER BY created_at DESC LIMIT 40"""

CORRELATION_SQL = "SELECT from_tier, to_tier, ideas, spearman FROM rank_correlation"

LLM_SQL = """
SELECT agent, provider, model, calls, refused, errors, cost_usd FROM llm_costs
ORDER BY cost_usd DESC NULLS LAST LIMIT 50"""

DEAD_LETTERS_SQL = """
SELECT dead_letter_id, subject, consumer, left(reason, 300) AS reason, raw_bytes,
       epoch(created_at) AS at_s
FROM dead_letters ORDER BY created_at DESC LIMIT 20"""

IDEA_SQL = """
SELECT idea_id, author, hypothesis, patch, champion_version, entry_tier, parent_ids,
       recipe_sha, epoch(created_at) AS at_s
FROM ideas WHERE idea_id = {id}"""

# Its runs, each with the champion's run on the same tier, version and seed (the pair), on the
# held-out text and on the control windows (training/control_windows.py).
IDEA_RUNS_SQL = """
SELECT r.tier, r.champion_version, r.seed, r.status, r.metric, b.metric AS baseline,
       r.control_metric, b.control_metric AS baseline_control,
       r.train_seconds, r.eval_seconds, r.device, left(r.reason, 300) AS reason
FROM runs r LEFT JOIN (
    SELECT tier, champion_version, seed, arg_max(metric, finished_at) AS metric,
           arg_max(control_metric, finished_at) AS control_metric FROM runs
    WHERE idea_id = '' AND status = 'OK' GROUP BY ALL
) b USING (tier, champion_version, seed)
WHERE r.idea_id = {id} ORDER BY r.tier, r.champion_version, r.seed"""

IDEA_DECISIONS_SQL = f"""
SELECT epoch(created_at) AS at_s, tier, {SHOWN_VERDICT_SQL} AS verdict, champion_version,
       delta, sigma, n, runs, decided_by, rule
FROM decisions WHERE idea_id = {{id}} ORDER BY created_at"""

IDEA_TRACES_SQL = """
SELECT epoch(created_at) AS at_s, agent, action, left(read, 4000) AS read,
       left(proposed, 4000) AS proposed, left(why, 4000) AS why
FROM traces WHERE idea_id = {id} ORDER BY created_at"""

MAX_ID = 200  # an idea id longer than this names nothing
SAID_CHARS = 300  # of a researcher's last proposal, on the swarm's page (its idea page has all)


def literal(text: str) -> str:
    """A SQL string literal of `text` (DuckDB: a quote is doubled; no other escape exists)."""
    return "'" + text.replace("'", "''") + "'"


def clean(value: Any) -> Any:
    """JSON has no NaN or infinity: they become null, in nested values too."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    return value


async def overview(source: Source, lower_is_better: bool) -> dict[str, Any]:
    board_sql = LEADERBOARD_SQL.format(order="ASC" if lower_is_better else "DESC")
    sqls = (
        TOTALS_SQL,
        AGENTS_SQL,
        EXPERIMENTS_SQL,
        board_sql,
        LINEAGE_SQL,
        DECISIONS_SQL,
        CORRELATION_SQL,
        LLM_SQL,
        DEAD_LETTERS_SQL,
    )
    held, *tables = await asyncio.gather(source.queues(), *(rows(source, sql) for sql in sqls))
    totals, agents, experiments, board, lineage, decisions, correlation, llm, dead = tables
    queues = tier_queues(held, totals)
    running = {q.tier: q.running for q in queues}
    now = time.time()
    researchers = []
    for a in agents:
        brain, persona = brain_and_persona(a["name"])
        said = a["last_proposed"] or a["last_action"]
        researchers.append(
            {**a, "brain": brain, "persona": persona, "last_proposed": said[:SAID_CHARS]}
        )
    by = {
        what: {r["name"]: r["n"] for r in totals if r["what"] == what}
        for what in ("runs", "decisions", "llm")
    }
    page: dict[str, Any] = clean(
        {
            "running": source.running,
            "at_s": now,
            "runs_by_status": by["runs"],
            "decisions_by_verdict": by["decisions"],
            "runs": sum(by["runs"].values()),
            "llm_calls": by["llm"].get("calls", 0),
            "llm_usd": usd_of(by["llm"].get("micro_usd", 0)),
            "queues": [{"tier": q.tier, "queued": q.queued, "running": q.running} for q in queues],
            "experiments": [
                {
                    "tier": e.tier,
                    "idea_id": e.idea_id,
                    "seed": e.seed,
                    "running": e.running,
                    "age_s": e.age_s,
                    "run_s": e.run_s,
                    "progress": e.progress,
                }
                for e in experiments_from(experiments, running, now)
            ]
            if source.running
            else [],
            "researchers": researchers,
            "leaderboard": board,
            "lineage": lineage,
            "decisions": decisions,
            "correlation": correlation,
            "llm": llm,
            "dead_letters": dead,
        }
    )
    return page


async def idea(source: Source, idea_id: str) -> dict[str, Any] | None:
    """An idea's page, or None when no idea has that id."""
    if len(idea_id) > MAX_ID or not idea_id.isprintable():
        return None
    key = literal(idea_id)
    found = await rows(source, IDEA_SQL.format(id=key))
    if not found:
        return None
    runs, decisions, traces = await asyncio.gather(
        rows(source, IDEA_RUNS_SQL.format(id=key)),
        rows(source, IDEA_DECISIONS_SQL.format(id=key)),
        rows(source, IDEA_TRACES_SQL.format(id=key)),
    )
    page: dict[str, Any] = clean(
        {**found[0], "runs": runs, "decisions": decisions, "traces": traces}
    )
    return page
