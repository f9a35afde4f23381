"""What `swarm start` prints when it stops: experiments, verdicts per tier, and how far the
champion moved at each tier against the noise band, then where the ledger is and how to ask it."""

from __future__ import annotations

import math
import statistics

from bus.messages import SHOWN_VERDICT_SQL
from scale_ladder.seed_honesty import EQUAL_GAINS
from swarm.config import SwarmConfig
from swarm.follow_up import swarm_command
from swarm.ladder_process import target_info
from swarm.sql_client import read_file
from swarm.workspace import Workspace

RUNS_SQL = "SELECT status, count(*) AS n FROM runs GROUP BY status ORDER BY n DESC"
VERDICTS_SQL = f"""SELECT tier, {SHOWN_VERDICT_SQL} AS verdict, count(*) AS n FROM decisions
    GROUP BY ALL ORDER BY tier, verdict"""
# Baseline metric per tier, champion version and seed (the first OK attempt of each seed; a
# stacked idea's runs count as its new champion's, as the ladder counts them).
BASELINES_SQL = """SELECT tier, champion_version AS version, seed, min(metric) AS metric
    FROM champion_runs GROUP BY ALL ORDER BY tier, version, seed"""
SIGMA_SQL = """SELECT tier, median(sigma) AS sigma FROM decisions
    WHERE sigma IS NOT NULL GROUP BY tier"""
LATEST_SQL = "SELECT max(version) AS v FROM champions"
UNFINISHED_SQL = "SELECT tier, count(*) AS n FROM unfinished_runs GROUP BY tier ORDER BY tier"
# Tiers held as a whole (no idea: the champion scores the same on every seed), latest first.
HELD_SQL = """SELECT tier, arg_max(rule, created_at) AS rule FROM decisions
    WHERE idea_id = '' AND verdict = 'HELD' GROUP BY tier ORDER BY tier"""

# Ideas rejected with no noise estimate: their paired gains were the same on every seed. One
# condition for the count and the query the summary suggests.
UNJUDGED = f"verdict IN ('REJECT', 'PROMOTE') AND rule LIKE '%{EQUAL_GAINS}%'"
UNJUDGED_SQL = f"""SELECT tier, count(DISTINCT idea_id) AS n FROM decisions WHERE {UNJUDGED}
    GROUP BY tier ORDER BY tier"""
UNJUDGED_EXAMPLE = f"select idea_id, tier, delta from decisions where {UNJUDGED}"

EXAMPLES = [
    "select * from leaderboard limit 10",
    "select * from lineage",
    "select tier, verdict, count(*) from decisions group by all order by all",
    "select agent, action, proposed, why from traces order by created_at desc limit 20",
]


def summary_text(config: SwarmConfig, workspace: Workspace) -> str:
    if not workspace.ledger_path.exists():
        return "swarm: no ledger was written"

    def rows(sql: str) -> list[dict[str, object]]:
        found: list[dict[str, object]] = read_file(workspace, config, sql).table.to_pylist()
        return found

    runs = rows(RUNS_SQL)
    total = sum(int(r["n"]) for r in runs)  # type: ignore[call-overload]
    by_status = ", ".join(f"{r['status']} {r['n']}" for r in runs) or "none"
    lines = [f"experiments run: {total} ({by_status})"]
    unfinished = rows(UNFINISHED_SQL)
    if unfinished:  # cut short or still waiting at the stop: a start on this workspace runs them
        where = ", ".join(f"tier {r['tier']} {r['n']}" for r in unfinished)
        left = sum(int(r["n"]) for r in unfinished)  # type: ignore[call-overload]
        lines.append(f"unfinished at the stop: {left} ({where}); a start here runs them again")
    verdicts: dict[int, list[str]] = {}
    for r in rows(VERDICTS_SQL):
        verdicts.setdefault(int(r["tier"]), []).append(f"{r['verdict']} {r['n']}")  # type: ignore[call-overload]
    for tier, counts in sorted(verdicts.items()):
        lines.append(f"tier {tier} verdicts: {', '.join(counts)}")
    sigmas = {int(r["tier"]): float(r["sigma"]) for r in rows(SIGMA_SQL)}  # type: ignore[call-overload, arg-type]
    latest = int(rows(LATEST_SQL)[0]["v"] or 1)  # type: ignore[call-overload]
    lower_is_better = target_info(config).lower_is_better
    lines += champion_moves(rows(BASELINES_SQL), sigmas, latest, lower_is_better)
    lines += [f"tier {r['tier']} held: {r['rule']}" for r in rows(HELD_SQL)]
    swarm = swarm_command(workspace.root)
    unjudged = rows(UNJUDGED_SQL)
    lines += [_unjudged(int(r["tier"]), int(r["n"])) for r in unjudged]  # type: ignore[call-overload]
    if unjudged:
        lines.append(f'  which: {swarm} sql "{UNJUDGED_EXAMPLE}"')
    lines.append(f"ledger: {workspace.ledger_path} (snapshots in {workspace.snapshot_dir})")
    lines.append("ask it, e.g.:")
    lines += [f'  {swarm} sql "{q}"' for q in EXAMPLES]
    return "\n".join(lines)


def champion_moves(
    baselines: list[dict[str, object]],
    sigmas: dict[int, float],
    latest: int = 0,
    lower_is_better: bool = True,
) -> list[str]:
    """Per tier: the first champion's baseline against the latest one measured there, paired
    by seed, and whether a newer champion is still to be measured there. The gain is positive
    when the champion got better, whichever way the metric points, as in the decisions."""
    sign = 1.0 if lower_is_better else -1.0
    table: dict[int, dict[int, dict[int, float]]] = {}
    for r in baselines:
        tier, version, seed = int(r["tier"]), int(r["version"]), int(r["seed"])  # type: ignore[call-overload]
        table.setdefault(tier, {}).setdefault(version, {})[seed] = float(r["metric"])  # type: ignore[arg-type]
    lines = []
    for tier, versions in sorted(table.items()):
        first, last = min(versions), max(versions)
        later = f"; v{latest} not measured here yet" if latest > last else ""
        seeds = sorted(set(versions[first]) & set(versions[last]))
        mean = statistics.fmean(versions[last].values())
        if first == last:
            lines.append(f"tier {tier} champion: v{last} at {mean:.4f} (no change measured{later})")
            continue
        if not seeds:  # their seeds differ (v1's first ones failed for good, say): unpaired
            was = statistics.fmean(versions[first].values())
            lines.append(
                f"tier {tier} champion: v{first} {was:.4f} -> v{last} {mean:.4f} (means over "
                f"different seeds, no pair to measure the change on{later})"
            )
            continue
        gains = [sign * (versions[first][s] - versions[last][s]) for s in seeds]
        delta = statistics.fmean(gains)
        sigma = sigmas.get(tier) or (statistics.stdev(gains) if len(gains) > 1 else None)
        band = (
            "no noise estimate"
            if sigma is None
            else f"noise band ±{2 * sigma / math.sqrt(len(gains)):.4f}"
        )
        was = statistics.fmean(versions[first][s] for s in seeds)
        paired = f"{len(gains)} paired seed" + ("s" if len(gains) > 1 else "")
        lines.append(
            f"tier {tier} champion: v{first} {was:.4f} -> v{last} {was - sign * delta:.4f} "
            f"(gain {delta:+.4f} over {paired}; {band}{later})"
        )
    return lines


def _unjudged(tier: int, ideas: int) -> str:
    """Why ideas that gained were still rejected: pairing removed all the noise (a newcomer's
    script added seed noise the same for every recipe, and saw nothing improve, no reason)."""
    return (
        f"tier {tier}: {ideas} idea{'s' if ideas != 1 else ''} rejected with no noise estimate: "
        "their paired gains were identical on every seed (σ_d ≈ 0), so the metric's noise does "
        "not depend on the recipe and gives no yardstick. If the metric is exact given the "
        "seed, declare the tier `deterministic = true` in the ladder file; if not, its runs "
        "should vary with what the recipe does"
    )
