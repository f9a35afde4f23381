"""The ledger's tables and views.

One table per message kind, its columns derived from the message dataclass (so the schema cannot
drift from the bus), keyed by the message's own id: a redelivered event hits the primary key and
is ignored. Every row also records `ingested_at`. Views answer the questions users ask most.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from bus.messages import (
    AgentEvent,
    ChampionChange,
    DeadLetter,
    Decision,
    Idea,
    LlmCall,
    Message,
    PromptPrefix,
    RunResult,
    RunSpec,
    StrategyVersion,
    Trace,
)

TIMESTAMP_FIELDS = frozenset({"created_at", "started_at", "finished_at"})


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    sql_type: str
    arrow_type: pa.DataType
    kind: str  # how a Python value becomes a cell: plain, enum, json, list, timestamp


@dataclass(frozen=True, slots=True)
class Table:
    name: str
    key: str
    message_type: type[Message]
    columns: tuple[Column, ...]

    def ddl(self) -> str:
        cols = [f"    {c.name} {c.sql_type}" for c in self.columns]
        cols.append("    ingested_at TIMESTAMP")
        cols.append("    stream_seq BIGINT")
        body = ",\n".join([*cols, f"    PRIMARY KEY ({self.key})"])
        return f"CREATE TABLE IF NOT EXISTS {self.name} (\n{body}\n);"

    def arrow_schema(self) -> pa.Schema:
        fields = [pa.field(c.name, c.arrow_type) for c in self.columns]
        extra = [pa.field("ingested_at", pa.timestamp("us")), pa.field("stream_seq", pa.int64())]
        return pa.schema([*fields, *extra])


def _column(name: str, hint: Any) -> Column:
    if name in TIMESTAMP_FIELDS:
        return Column(name, "TIMESTAMP", pa.timestamp("us"), "timestamp")
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        (inner,) = [a for a in typing.get_args(hint) if a is not type(None)]
        return _column(name, inner)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return Column(name, "VARCHAR", pa.string(), "enum")
    if origin is dict:
        return Column(name, "VARCHAR", pa.string(), "json")  # JSON text; query with ->>
    if origin is tuple:
        return Column(name, "VARCHAR[]", pa.list_(pa.string()), "list")
    plain = {str: ("VARCHAR", pa.string()), int: ("BIGINT", pa.int64())}
    plain[float] = ("DOUBLE", pa.float64())
    plain[bool] = ("BOOLEAN", pa.bool_())
    sql_type, arrow_type = plain[hint]
    return Column(name, sql_type, arrow_type, "plain")


def _table(name: str, key: str, message_type: type[Message]) -> Table:
    hints = typing.get_type_hints(message_type)
    columns = tuple(_column(f.name, hints[f.name]) for f in dataclasses.fields(message_type))
    return Table(name, key, message_type, columns)


TABLES: dict[str, Table] = {
    t.message_type.KIND: t
    for t in (
        _table("ideas", "idea_id", Idea),
        _table("run_specs", "run_id", RunSpec),
        _table("runs", "run_id", RunResult),
        _table("decisions", "decision_id", Decision),
        _table("champions", "version", ChampionChange),
        _table("traces", "trace_id", Trace),
        _table("agent_events", "event_key", AgentEvent),
        _table("dead_letters", "dead_letter_id", DeadLetter),
        _table("llm_calls", "call_id", LlmCall),
        _table("prompt_prefixes", "prefix_sha", PromptPrefix),
        _table("strategies", "strategy_id", StrategyVersion),
    )
}

# A stacked idea's runs at a token-budget tier are runs of the new champion's recipe, and the
# ladder keeps them as its baseline instead of running it again (scale_ladder/lineage.py);
# these two views count them as the champion's, so its level shows on every version. (Stacks
# by an older release, which ran the baseline again, have no `carried_runs`: nothing is added.)
# The idea's runs may be on a version older than the parent: an idea the parent's stack left
# unchanged keeps its runs (lineage.py), so they count wherever their RunSpec ran the new
# champion's recipe (`recipe_sha`), as well as on the parent (RunSpecs of older releases have
# no recipe_sha).
CARRIED_FROM = """
    FROM champions c JOIN {runs} ON r.idea_id = c.idea_id AND (
        r.champion_version = c.parent_version OR r.champion_version IN (
            SELECT s.champion_version FROM run_specs s
            WHERE s.idea_id = c.idea_id AND s.tier = r.tier AND s.recipe_sha = c.recipe_sha))
    WHERE c.kind = 'STACK' AND c.carried_runs > 0
      AND r.tier IN (SELECT DISTINCT tier FROM run_specs WHERE budget_kind = 'tokens')"""

VIEWS: dict[str, str] = {
    # Every successful run of each champion version: its own baseline runs, and the runs it
    # carried over from the idea stacked into it (carried = true).
    "champion_runs": """
        SELECT r.tier, r.champion_version, r.seed, r.metric_name, r.metric, r.run_id,
               false AS carried
        FROM runs r WHERE r.idea_id = '' AND r.status = 'OK' AND r.metric IS NOT NULL
        UNION ALL
        SELECT r.tier, c.version, r.seed, r.metric_name, r.metric, r.run_id, true"""
    + CARRIED_FROM.format(runs="runs r")
    + """ AND r.status = 'OK' AND r.metric IS NOT NULL""",
    # run_stats with the carried runs added to each champion's baseline totals.
    "run_totals": """
        WITH stats AS (
            SELECT tier, champion_version, idea_id, metric_name, n_runs, sum_metric,
                   sum_sq_metric, best_metric
            FROM run_stats
            UNION ALL
            SELECT r.tier, c.version, '', r.metric_name, r.n_runs, r.sum_metric,
                   r.sum_sq_metric, r.best_metric"""
    + CARRIED_FROM.format(runs="run_stats r")
    + """)
        SELECT tier, champion_version, idea_id, any_value(metric_name) AS metric_name,
               sum(n_runs)::BIGINT AS n_runs, sum(sum_metric) AS sum_metric,
               sum(sum_sq_metric) AS sum_sq_metric, min(best_metric) AS best_metric
        FROM stats GROUP BY tier, champion_version, idea_id""",
    # One row per agent, derived from its events (so redelivery can never skew it). A trainer's
    # STARTED events say which run it took, not how it is: its last_event stays JOINED or LEFT.
    "agents": """
        SELECT agent AS agent_id,
               max(role) FILTER (WHERE role <> '') AS role,
               min(created_at) AS first_seen,
               max(created_at) AS last_seen,
               arg_max(kind, created_at) FILTER (WHERE kind <> 'STARTED') AS last_event,
               count(*) AS events
        FROM agent_events GROUP BY agent""",
    # Mean metric per idea, tier and champion version over successful runs; the champion's own
    # baseline runs (carried ones included) appear as idea '(champion)'. Lower is better for
    # val_bpb. Reads the running totals in run_stats, so it stays fast at millions of runs.
    "leaderboard": """
        SELECT s.tier, s.champion_version,
               CASE WHEN s.idea_id = '' THEN '(champion)' ELSE s.idea_id END AS idea_id,
               i.author, i.hypothesis, s.metric_name,
               s.sum_metric / s.n_runs AS mean_metric,
               CASE WHEN s.n_runs > 1 THEN sqrt(greatest(0.0,
                   (s.sum_sq_metric - s.sum_metric * s.sum_metric / s.n_runs) / (s.n_runs - 1)))
               END AS std_metric,
               s.best_metric, s.n_runs
        FROM run_totals s LEFT JOIN ideas i USING (idea_id)
        ORDER BY s.tier DESC, mean_metric ASC""",
    # How far each idea climbed and the latest verdict it got.
    "ladder": """
        SELECT i.idea_id, i.author, i.hypothesis, i.champion_version,
               max(r.tier) AS highest_tier_run,
               count(DISTINCT r.run_id) AS runs,
               (SELECT arg_max(d.tier, d.created_at) FROM decisions d
                 WHERE d.idea_id = i.idea_id) AS last_decided_tier,
               (SELECT arg_max(d.verdict, d.created_at) FROM decisions d
                 WHERE d.idea_id = i.idea_id) AS last_verdict
        FROM ideas i LEFT JOIN runs r USING (idea_id)
        GROUP BY i.idea_id, i.author, i.hypothesis, i.champion_version, i.created_at
        ORDER BY highest_tier_run DESC NULLS LAST, i.created_at""",
    # The champion's history: each version, its parent and the idea stacked to make it.
    "lineage": """
        SELECT c.version, c.parent_version, c.kind, c.idea_id, i.author, i.hypothesis,
               c.recipe_sha, c.reason, c.created_at
        FROM champions c LEFT JOIN ideas i USING (idea_id)
        ORDER BY c.version""",
    # How well each tier's ranking of ideas predicts the next tier's: Spearman correlation of
    # the ideas' mean gains over the champion's baseline (same tier and champion version), over
    # the ideas run on both tiers. Gains, not raw metrics, so a better champion does not count.
    "rank_correlation": """
        WITH means AS (
            SELECT tier, champion_version, idea_id, sum_metric / n_runs AS mean
            FROM run_totals),
        gains AS (
            SELECT i.tier, i.champion_version, i.idea_id, b.mean - i.mean AS gain
            FROM means i JOIN means b
              ON b.idea_id = '' AND b.tier = i.tier AND b.champion_version = i.champion_version
            WHERE i.idea_id <> ''),
        pairs AS (
            SELECT lo.tier AS from_tier, lo.gain AS lo, hi.gain AS hi
            FROM gains lo JOIN gains hi
              ON hi.idea_id = lo.idea_id AND hi.champion_version = lo.champion_version
             AND hi.tier = lo.tier + 1),
        ranked AS (
            SELECT from_tier,
                   rank() OVER (PARTITION BY from_tier ORDER BY lo) AS r_lo,
                   rank() OVER (PARTITION BY from_tier ORDER BY hi) AS r_hi
            FROM pairs)
        SELECT from_tier, from_tier + 1 AS to_tier, count(*) AS ideas,
               CASE WHEN count(*) >= 3 THEN corr(r_lo, r_hi) END AS spearman
        FROM ranked GROUP BY from_tier ORDER BY from_tier""",
    # RunSpecs with no RunResult yet: queued or running (or lost, if the swarm is stopped).
    "unfinished_runs": """
        SELECT s.* FROM run_specs s ANTI JOIN runs r USING (run_id)
        ORDER BY s.created_at""",
    # What each agent's LLM calls used and cost; `status` counts refused answers and API errors.
    "llm_costs": """
        SELECT agent, any_value(provider) AS provider, any_value(model) AS model,
               count(*) AS calls,
               count(*) FILTER (WHERE status = 'refused') AS refused,
               count(*) FILTER (WHERE status = 'error') AS errors,
               count(DISTINCT idea_id) FILTER (WHERE idea_id <> '') AS ideas,
               sum(tokens_in) AS tokens_in, sum(tokens_out) AS tokens_out,
               sum(cache_read_tokens) AS cache_read_tokens,
               sum(cache_write_tokens) AS cache_write_tokens,
               sum(cost_usd) AS cost_usd,
               sum(cost_usd) / nullif(count(DISTINCT idea_id) FILTER (WHERE idea_id <> ''), 0)
                   AS usd_per_idea,
               sum(retries) AS retries, median(latency_s) AS median_latency_s
        FROM llm_calls GROUP BY agent ORDER BY agent""",
    # An idea's whole story in time order: what its author was shown (the varying part of the
    # prompt), what the model answered, the hypothesis, each run that failed and each verdict.
    "idea_reasoning": """
        SELECT idea_id, created_at AS happened_at, 'prompt (' || purpose || ')' AS step,
               dynamic AS text FROM llm_calls WHERE idea_id <> ''
        UNION ALL SELECT idea_id, created_at + INTERVAL 1 MICROSECOND,
               'answer (' || purpose || ', ' || status || ')', response
        FROM llm_calls WHERE idea_id <> ''
        UNION ALL SELECT idea_id, created_at, 'trace: ' || action, why || chr(10) || proposed
        FROM traces WHERE idea_id <> ''
        UNION ALL SELECT idea_id, created_at, 'idea by ' || author, hypothesis FROM ideas
        UNION ALL SELECT idea_id, finished_at, 'run ' || run_id || ': ' || status,
               reason || chr(10) || log_tail
        FROM runs WHERE idea_id <> '' AND status NOT IN ('OK', 'SKIPPED')
        UNION ALL SELECT idea_id, created_at,
               'decision t' || tier || ': ' || verdict || ' (' || decided_by || ')',
               rule || CASE WHEN delta IS NULL THEN '' ELSE
                   printf(' (gain %+.4f, σ %.4f, n %d)', delta, coalesce(sigma, 0), n) END
        FROM decisions
        ORDER BY idea_id, happened_at""",
    # Each strategy version's hit rate per tier: ideas its researcher proposed while it was in
    # force (from the LLM calls that carried it) and how many passed each tier. With
    # strategies.hit_rates_before this gives before and after for every rewrite.
    "strategy_hit_rates": """
        WITH proposed AS (
            SELECT DISTINCT agent, strategy_version AS version, idea_id
            FROM llm_calls WHERE idea_id <> '' AND status = 'ok'),
        passed AS (
            SELECT idea_id, tier FROM decisions
            WHERE verdict IN ('PROMOTE', 'HELD') AND rule NOT LIKE 'spot check%'),
        -- rejected at a tier and sent on by a spot check: not a pass there, whatever came next
        sent_on AS (SELECT idea_id, tier FROM decisions WHERE rule LIKE 'spot check%'),
        tiers AS (SELECT DISTINCT tier FROM run_specs)
        SELECT s.agent, s.version, s.author, s.created_at, t.tier,
               count(DISTINCT p.idea_id) AS proposed,
               count(DISTINCT d.idea_id) AS promoted,
               count(DISTINCT d.idea_id) / nullif(count(DISTINCT p.idea_id), 0) AS hit_rate
        FROM strategies s CROSS JOIN tiers t
        LEFT JOIN proposed p ON p.agent = s.agent AND p.version = s.version
        LEFT JOIN passed d ON d.idea_id = p.idea_id AND d.tier >= t.tier
            AND NOT EXISTS (
                SELECT 1 FROM sent_on o WHERE o.idea_id = p.idea_id AND o.tier = t.tier)
        GROUP BY s.agent, s.version, s.author, s.created_at, t.tier
        ORDER BY s.agent, s.version, t.tier""",
}


# Running totals of successful runs per (tier, champion version, idea), maintained by the ledger
# in the same transaction as the runs they count (only rows new to `runs` are added, so
# redelivery never double-counts). Derived data: rebuilt from `runs` if missing.
RUN_STATS_DDL = """
CREATE TABLE IF NOT EXISTS run_stats (
    tier BIGINT, champion_version BIGINT, idea_id VARCHAR, metric_name VARCHAR,
    n_runs BIGINT, sum_metric DOUBLE, sum_sq_metric DOUBLE, best_metric DOUBLE,
    PRIMARY KEY (tier, champion_version, idea_id)
);"""


def run_stats_upsert(source: str) -> str:
    """Add the successful runs in `source` (a table of new `runs` rows) to run_stats."""
    return f"""
        INSERT INTO run_stats
        SELECT tier, champion_version, idea_id, any_value(metric_name), count(*),
               sum(metric), sum(metric * metric), min(metric)
        FROM {source} WHERE status = 'OK' AND metric IS NOT NULL
        GROUP BY tier, champion_version, idea_id
        ON CONFLICT (tier, champion_version, idea_id) DO UPDATE SET
            n_runs = n_runs + excluded.n_runs,
            sum_metric = sum_metric + excluded.sum_metric,
            sum_sq_metric = sum_sq_metric + excluded.sum_sq_metric,
            best_metric = least(best_metric, excluded.best_metric)"""


def ddl() -> list[str]:
    statements = [t.ddl() for t in TABLES.values()] + [RUN_STATS_DDL]
    # A ledger made by an older release gains the columns added since (empty for its old rows;
    # the writer inserts BY NAME, so column order does not matter).
    statements += [
        f"ALTER TABLE {t.name} ADD COLUMN IF NOT EXISTS {c.name} {c.sql_type};"
        for t in TABLES.values()
        for c in (*t.columns, Column("stream_seq", "BIGINT", pa.int64(), "plain"))
    ]
    statements += [
        f"CREATE OR REPLACE VIEW {name} AS {sql.strip()};" for name, sql in VIEWS.items()
    ]
    return statements
