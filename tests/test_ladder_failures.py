"""The ladder outlives its own failures: one on an idea refuses that idea, naming it; one
outside any idea is logged once by the service, which acts again later.

The ladder driven without a bus (tests/ladder_sim.py), then a real embedded nats-server and the
real LadderService, as `swarm ladder` runs it.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from nats.aio.client import Client

import scale_ladder.service as service
from bus.champion_store import champion_bucket
from bus.messages import Verdict
from bus.nats_bus import queued_run_ids
from scale_ladder import lineage, promotion
from scale_ladder.ladder import Ladder
from scale_ladder.service import LadderOptions, LadderService
from scale_ladder.tiers import load_tiers
from tests.conftest import wait_for_async
from tests.ladder_sim import champions, decisions, make_ladder, started
from training.target_info import RECIPE


def test_an_idea_the_ladder_fails_on_is_refused_and_the_rest_go_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure inside the ladder on one idea (the red team's 1.8e154 metric overflowed the
    noise pool) ended the ladder, and again at every replay: a crash loop. Now that idea is
    refused with the failure named, the others are decided, and a replay of the record acts
    on nothing twice."""
    real = promotion.sigma_for

    def overflows_for_one(ladder: object, version: int, tier: int, idea_id: str) -> float:
        if idea_id == "idea-bad":
            raise OverflowError("int too large to convert to float")
        return real(ladder, version, tier, idea_id)  # type: ignore[arg-type]

    monkeypatch.setattr(promotion, "sigma_for", overflows_for_one)
    sim = started(make_ladder(tmp_path))
    sim.propose("idea-bad", "LR = 1.0->LR = 2.0")
    sim.propose("idea-good", "LR = 1.0->LR = 2.5")
    sim.run_all()
    (bad,) = decisions(sim, "idea-bad")
    assert bad.verdict is Verdict.REFUSED
    assert (
        bad.rule
        == "the ladder failed on this idea (OverflowError: int too large to convert to float)"
    )
    assert champions(sim)[-1].idea_id == "idea-good"
    replayed = make_ladder(tmp_path)
    for message in sim.log:
        replayed.observe(message)
    assert replayed.act() == []


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
