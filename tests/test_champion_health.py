"""`swarm start` stops when the champion cannot be measured at a tier: its own runs there all
failed since this start. Read from the real ledger over the bus, as `swarm start` reads it."""

from __future__ import annotations

import time

from nats.aio.client import Client

from bus.messages import ChampionChange, ChangeKind, RunStatus
from bus.nats_bus import publish_event
from ledger.service import LedgerService
from swarm.champion_health import broken_champion
from swarm.sql_client import ask_ledger
from tests.conftest import make_result, wait_for_async


async def test_a_champion_that_fails_only_at_tier_1_stops_the_swarm(
    nc: Client, ledger: LedgerService
) -> None:
    """It runs at tier 0 and fails at tier 1 (its time limit there, say): every idea that
    reached tier 1 asked for seed after seed, then was rejected for want of pairs (a red team)."""
    js = nc.jetstream()
    since = time.time() - 1
    await publish_event(js, ChampionChange(1, 0, ChangeKind.INITIAL, "sha", source="LR = 1\n"))
    now = time.time()
    runs = [
        make_result(
            i,
            tier=tier,
            seed=i,
            idea_id="",
            status=status,
            metric=metric,
            reason=reason,
            finished_at=now,
        )
        for i, (tier, status, metric, reason) in enumerate(
            [
                (0, RunStatus.OK, 3.0, ""),
                (0, RunStatus.OK, 3.1, ""),
                (1, RunStatus.TIMEOUT, None, "time limit of 300 s reached"),
                (1, RunStatus.TIMEOUT, None, "time limit of 300 s reached"),
            ]
        )
    ]
    for run in runs[:3]:
        await publish_event(js, run)

    async def stored(n: int) -> bool:
        rows = (await ask_ledger(nc, "select count(*) as n from runs", 5)).table.to_pylist()
        return int(rows[0]["n"]) == n

    await wait_for_async(lambda: stored(3), 30, 0.2)
    assert await broken_champion(nc, 5, since) == ""  # one failure at tier 1 is not yet a stop
    await publish_event(js, runs[3])
    await wait_for_async(lambda: stored(4), 30, 0.2)
    why = await broken_champion(nc, 5, since)
    assert why.startswith("the champion's own runs at tier 1 all failed (2 of 2)"), why
    assert "time limit of 300 s reached" in why and "swarm run --tier 1" in why
