"""Whether the champion itself can be measured: a swarm whose champion fails at tier 0 (a typo in
the run command, a metric the command never prints, a time limit too short) can only reject
every idea against no baseline. `swarm start` stops on it and says why, instead of spending its
whole budget on CRASH results and exiting 0 (found by a newcomer's first tries)."""

from __future__ import annotations

from nats.aio.client import Client

from bus.untrusted import for_terminal
from ledger.sql_protocol import SqlError
from swarm.sql_client import LedgerUnavailable, ask_ledger

FAILED_RUNS = 2  # failed baseline runs, and not one OK, before the swarm gives up
TAIL_CHARS = 1200  # of the last failed run's log, shown with the reason

# The latest champion's baseline runs at tier 0 that got a verdict of their own (not SKIPPED),
# finished (or, for a run refused before it started, recorded) since this start: the failures
# that stopped the last start are what the user fixed since (a restart on the same workspace
# stopped again at its first look, before any run).
BASELINE_SQL = """
SELECT status, reason, log_tail FROM runs
WHERE idea_id = '' AND tier = 0 AND status <> 'SKIPPED'
  AND champion_version = (SELECT max(version) FROM champions)
  AND epoch(coalesce(finished_at, ingested_at)) >= {since!r}
ORDER BY finished_at"""


async def broken_champion(nc: Client, timeout_s: float, since: float, swarm: str = "swarm") -> str:
    """Why the champion cannot be measured at tier 0, judged on its runs finished since
    `since` (epoch seconds), or "" while it can (or is not run yet, or the ledger is not
    answering: the next look asks again). `swarm` is how the hint names this program."""
    sql = BASELINE_SQL.format(since=float(since))
    try:
        rows = (await ask_ledger(nc, sql, timeout_s)).table.to_pylist()
    except (LedgerUnavailable, SqlError):
        return ""
    if len(rows) < FAILED_RUNS or any(row["status"] == "OK" for row in rows):
        return ""
    last = rows[-1]
    tail = for_terminal(str(last["log_tail"] or "").rstrip()[-TAIL_CHARS:])
    shown = f"\n--- the end of its log ---\n{tail}" if tail else ""
    return (
        f"the champion's own runs at tier 0 all failed ({len(rows)} of {len(rows)}): every idea "
        f"would be judged against nothing. The last one: {last['status']}: "
        f"{for_terminal(str(last['reason']))}{shown}\nTry it by hand (`{swarm} run --tier 0`), fix "
        "the command or the config, and start again."
    )
