"""Whether the champion itself can be measured: a swarm whose champion fails at a tier (a typo in
the run command, a metric the command never prints, a time limit too short) can only reject
every idea there against no baseline. `swarm start` stops on it and says why, instead of
spending its whole budget on CRASH results and exiting 0 (found by a newcomer's first tries).
Every tier is watched: a champion that runs at tier 0 and fails at tier 1 (its time limit, its
memory) had every idea that reached tier 1 asking for seed after seed until the rules rejected
it for want of pairs (a red team)."""

from __future__ import annotations

from nats.aio.client import Client

from bus.untrusted import for_terminal
from ledger.sql_protocol import SqlError
from swarm.sql_client import LedgerUnavailable, ask_ledger

FAILED_RUNS = 2  # failed baseline runs, and not one OK, before the swarm gives up
TAIL_CHARS = 1200  # of the last failed run's log, shown with the reason

# The latest champion's baseline runs at each tier that got a verdict of their own (not SKIPPED),
# finished (or, for a run refused before it started, recorded) since this start: the failures
# that stopped the last start are what the user fixed since (a restart on the same workspace
# stopped again at its first look, before any run).
BASELINE_SQL = """
SELECT tier, status, reason, log_tail FROM runs
WHERE idea_id = '' AND status <> 'SKIPPED'
  AND champion_version = (SELECT max(version) FROM champions)
  AND epoch(coalesce(finished_at, ingested_at)) >= {since!r}
ORDER BY tier, finished_at"""


async def broken_champion(nc: Client, timeout_s: float, since: float, swarm: str = "swarm") -> str:
    """Why the champion cannot be measured at a tier, judged on its runs there finished since
    `since` (epoch seconds), or "" while it can (or is not run yet, or the ledger is not
    answering: the next look asks again). `swarm` is how the hint names this program."""
    sql = BASELINE_SQL.format(since=float(since))
    try:
        rows = (await ask_ledger(nc, sql, timeout_s)).table.to_pylist()
    except (LedgerUnavailable, SqlError):
        return ""
    by_tier: dict[int, list[dict[str, object]]] = {}
    for row in rows:
        by_tier.setdefault(int(row["tier"]), []).append(row)
    for tier, runs in sorted(by_tier.items()):
        if len(runs) >= FAILED_RUNS and all(run["status"] != "OK" for run in runs):
            return _broken(tier, runs, swarm)
    return ""


def _broken(tier: int, rows: list[dict[str, object]], swarm: str) -> str:
    """The stop's reason: the tier, the count, the last failure and the end of its log."""
    last = rows[-1]
    tail = for_terminal(str(last["log_tail"] or "").rstrip()[-TAIL_CHARS:])
    shown = f"\n--- the end of its log ---\n{tail}" if tail else ""
    why = for_terminal(str(last["reason"]))
    return (
        f"the champion's own runs at tier {tier} all failed ({len(rows)} of {len(rows)}): every "
        f"idea there would be judged against nothing. The last one: {last['status']}: {why}"
        f"{shown}\nTry it by hand (`{swarm} run --tier {tier}`), fix the command or the config, "
        "and start again."
    )
