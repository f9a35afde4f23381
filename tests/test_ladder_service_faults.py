"""The ladder service outlives a failure of the ladder: it logs it once and acts again later.

A real embedded nats-server and the real LadderService, as `swarm ladder` runs it. (A failure
on one idea is refused as that idea's verdict: tests/test_ladder.py.)
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from nats.aio.client import Client

import scale_ladder.service as service
from bus.champion_store import champion_bucket
from bus.nats_bus import queued_run_ids
from scale_ladder import lineage
from scale_ladder.ladder import Ladder
from scale_ladder.service import LadderOptions, LadderService
from scale_ladder.tiers import load_tiers
from tests.conftest import wait_for_async
from training.target_info import RECIPE


async def test_a_ladder_that_cannot_act_keeps_serving_and_acts_when_it_can(
    nc: Client, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A failure outside any one idea (here the champion's start) used to end the service, and
    the supervisor's restart replayed into it again. Now it is logged once, the service keeps
    folding events, and what the ladder makes once it can act is sent."""
    real, failures = lineage.start, []

    def fails_three_times(ladder: Ladder) -> None:
        if len(failures) < 3:
            failures.append(1)
            raise RuntimeError("the champion could not be read")
        real(ladder)

    monkeypatch.setattr(lineage, "start", fails_three_times)
    caplog.set_level(logging.ERROR, logger=service.__name__)
    js = nc.jetstream()
    await champion_bucket(js)
    stop = asyncio.Event()
    running = LadderService(
        nc, Ladder(load_tiers(), "recipe.py", RECIPE.read_text()), LadderOptions()
    )
    task = asyncio.ensure_future(running.run(stop))
    try:

        async def baselines_queued() -> bool:
            made = set(running.ladder.runs.unfinished)
            return bool(made) and made <= await queued_run_ids(js)

        await wait_for_async(baselines_queued, 30)
        assert not task.done() and len(failures) == 3
        assert caplog.text.count("the ladder could not act") == 1
    finally:
        stop.set()
        await task
