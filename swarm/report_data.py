"""What the report reads from the ledger: a few SELECTs, turned into frozen rows.

Everything goes through a `Query` (one SQL statement in, an Arrow table out), so the same report
can be drawn from a stopped ledger file or from a running swarm's SQL endpoint. Every statement
is a single read-only SELECT, so it passes the ledger's SQL gate.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import duckdb
import pyarrow as pa

from bus.messages import SHOWN_VERDICT_SQL

Query = Callable[[str], pa.Table]

TOP_IDEAS = 10  # leaderboard rows per tier
CHAMPION = "(champion)"  # how the leaderboard view names the champion's baseline runs

RUNS_SQL = """
SELECT tier, champion_version, idea_id, status, metric, metric_name
FROM runs ORDER BY tier, finished_at NULLS LAST, run_id"""

# The champion's level per tier and version: the mean of its runs there, the ones it carried
# over from the idea stacked into it included (a version may have no baseline run of its own).
LEVELS_SQL = """
SELECT tier, champion_version, avg(metric) AS level FROM champion_runs GROUP BY ALL"""

COUNTS_SQL = """
SELECT (SELECT count(*) FROM ideas) AS ideas, (SELECT count(*) FROM decisions) AS decisions"""

STATUS_SQL = "SELECT status, count(*) AS n FROM runs GROUP BY status ORDER BY status"

VERDICTS_SQL = f"""
SELECT tier, {SHOWN_VERDICT_SQL} AS verdict, count(*) AS n FROM decisions
GROUP BY ALL ORDER BY tier, verdict"""

LINEAGE_SQL = """
SELECT c.version, c.parent_version, c.kind, c.idea_id, i.author, i.hypothesis, c.reason, c.patch
FROM champions c LEFT JOIN ideas i ON i.idea_id = c.idea_id AND c.idea_id <> ''
ORDER BY c.version"""

LATEST_SOURCE_SQL = "SELECT version, source FROM champions ORDER BY version DESC LIMIT 1"

# Each idea against the champion's baseline on the same tier and champion version.
LEADERBOARD_SQL = """
SELECT l.tier, l.champion_version, l.idea_id, l.author, l.hypothesis, l.mean_metric, l.n_runs,
       b.mean_metric AS baseline_mean
FROM leaderboard l
LEFT JOIN leaderboard b ON b.tier = l.tier AND b.champion_version = l.champion_version
                       AND b.idea_id = '{champion}'
WHERE l.idea_id <> '{champion}'
QUALIFY row_number() OVER (PARTITION BY l.tier ORDER BY {rank}) <= {top}
ORDER BY l.tier DESC, {rank}"""

# Ideas that ran OK on adjacent tiers k and k+1 of the same champion version.
PAIRS_SQL = """
SELECT a.tier, a.idea_id, a.mean_metric AS low_mean, b.mean_metric AS high_mean
FROM leaderboard a JOIN leaderboard b
  ON b.tier = a.tier + 1 AND b.champion_version = a.champion_version AND b.idea_id = a.idea_id
WHERE a.idea_id <> '{champion}'
ORDER BY a.tier, a.champion_version, a.idea_id"""


@dataclass(frozen=True, slots=True)
class RunPoint:
    tier: int
    champion_version: int
    idea_id: str  # '' for a baseline run of the champion
    status: str
    metric: float | None

    @property
    def ok(self) -> bool:
        return self.status == "OK" and self.metric is not None and math.isfinite(self.metric)


@dataclass(frozen=True, slots=True)
class ChampionRow:
    version: int
    parent_version: int
    kind: str
    idea_id: str
    author: str
    hypothesis: str
    reason: str
    patch: str


@dataclass(frozen=True, slots=True)
class LeaderRow:
    tier: int
    champion_version: int
    idea_id: str
    author: str
    hypothesis: str
    mean_metric: float
    n_runs: int
    baseline_mean: float | None

    @property
    def delta(self) -> float | None:
        return None if self.baseline_mean is None else self.mean_metric - self.baseline_mean


@dataclass(frozen=True, slots=True)
class Correlation:
    low_tier: int  # the pair is (low_tier, low_tier + 1)
    n: int
    rho: float | None


@dataclass(frozen=True, slots=True)
class ReportData:
    runs: tuple[RunPoint, ...]  # ordered by tier, then finished_at
    metric_name: str
    lower_is_better: bool
    n_ideas: int
    n_decisions: int
    status_counts: dict[str, int]
    verdict_counts: dict[int, dict[str, int]]  # tier -> verdict -> count
    champions: tuple[ChampionRow, ...]
    latest_source: str
    leaderboard: tuple[LeaderRow, ...]
    correlations: tuple[Correlation, ...]
    levels: dict[tuple[int, int], float] = field(default_factory=dict)  # (tier, version)


def file_query(con: duckdb.DuckDBPyConnection) -> Query:
    """A Query over an open ledger file (best opened read-only)."""

    def query(sql: str) -> pa.Table:
        cursor = con.cursor()
        try:
            relation = cursor.sql(sql)
            if relation is None:
                raise ValueError(f"not a query that returns rows: {sql.strip()[:80]}")
            return relation.to_arrow_table()
        finally:
            cursor.close()

    return query


def _rows(query: Query, sql: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = query(sql).to_pylist()
    return rows


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def load(query: Query, lower_is_better: bool = True) -> ReportData:
    rows = _rows(query, RUNS_SQL)
    runs = tuple(
        RunPoint(
            int(r["tier"]),
            int(r["champion_version"]),
            r["idea_id"] or "",
            r["status"],
            _float(r["metric"]),
        )
        for r in rows
    )
    names = Counter(r["metric_name"] for r in rows if r["metric_name"])
    counts = _rows(query, COUNTS_SQL)[0]
    verdicts: dict[int, dict[str, int]] = {}
    for r in _rows(query, VERDICTS_SQL):
        verdicts.setdefault(int(r["tier"]), {})[r["verdict"]] = int(r["n"])
    champions = tuple(
        ChampionRow(
            int(r["version"]),
            int(r["parent_version"]),
            r["kind"],
            r["idea_id"] or "",
            r["author"] or "",
            r["hypothesis"] or "",
            r["reason"] or "",
            r["patch"] or "",
        )
        for r in _rows(query, LINEAGE_SQL)
    )
    latest = _rows(query, LATEST_SOURCE_SQL)
    order = "ASC" if lower_is_better else "DESC"
    rank = f"l.mean_metric - b.mean_metric {order} NULLS LAST, l.mean_metric {order}, l.idea_id"
    board_sql = LEADERBOARD_SQL.format(champion=CHAMPION, rank=rank, top=TOP_IDEAS)
    board = tuple(
        LeaderRow(
            int(r["tier"]),
            int(r["champion_version"]),
            r["idea_id"],
            r["author"] or "",
            r["hypothesis"] or "",
            float(r["mean_metric"]),
            int(r["n_runs"]),
            _float(r["baseline_mean"]),
        )
        for r in _rows(query, board_sql)
    )
    tiers = {run.tier for run in runs}
    return ReportData(
        runs=runs,
        metric_name=names.most_common(1)[0][0] if names else "metric",
        lower_is_better=lower_is_better,
        n_ideas=int(counts["ideas"]),
        n_decisions=int(counts["decisions"]),
        status_counts={r["status"]: int(r["n"]) for r in _rows(query, STATUS_SQL)},
        verdict_counts=verdicts,
        champions=champions,
        latest_source=(latest[0]["source"] or "") if latest else "",
        leaderboard=board,
        correlations=_correlations(query, sorted(k for k in tiers if k + 1 in tiers)),
        levels={
            (int(r["tier"]), int(r["champion_version"])): float(r["level"])
            for r in _rows(query, LEVELS_SQL)
            if r["level"] is not None
        },
    )


def _correlations(query: Query, low_tiers: Sequence[int]) -> tuple[Correlation, ...]:
    pairs: dict[int, list[tuple[float, float]]] = {k: [] for k in low_tiers}
    for r in _rows(query, PAIRS_SQL.format(champion=CHAMPION)):
        pairs.setdefault(int(r["tier"]), []).append((r["low_mean"], r["high_mean"]))
    return tuple(
        Correlation(k, len(xy), spearman([x for x, _ in xy], [y for _, y in xy]))
        for k, xy in sorted(pairs.items())
    )


def _ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks; tied values share the mean of the ranks they span."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for i in order[start : end + 1]:
            ranks[i] = (start + end) / 2 + 1
        start = end + 1
    return ranks


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Spearman's rank correlation (ties get averaged ranks); None for fewer than 3 pairs or
    when either side is constant (the correlation is undefined)."""
    if len(xs) != len(ys):
        raise ValueError(f"spearman needs pairs, got {len(xs)} xs and {len(ys)} ys")
    if len(xs) < 3:
        return None
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    vx = sum((a - mx) ** 2 for a in rx)
    vy = sum((b - my) ** 2 for b in ry)
    if vx == 0 or vy == 0:
        return None
    return max(-1.0, min(1.0, cov / math.sqrt(vx * vy)))
