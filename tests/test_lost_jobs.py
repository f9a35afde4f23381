"""A job the bus lost is put back: a restarted ladder finds runs with no result that are not on
the work queue (a kill -9 of the nats-server can lose what it had just acknowledged; a person
may purge the queue) and enqueues them again, and leaves alone the jobs still queued.

A real embedded nats-server and the real LadderService, as `swarm ladder` runs it.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from nats.aio.client import Client

import scale_ladder.service as service
from bus.champion_store import champion_bucket
from bus.messages import RunSpec
from bus.nats_bus import queued_run_ids
from bus.subjects import JOBS_STREAM
from scale_ladder.ladder import Ladder
from scale_ladder.service import LadderOptions, LadderService
from scale_ladder.tiers import load_tiers
from tests.conftest import wait_for_async
from training.target_info import RECIPE


async def ladder_for(nc: Client, stop: asyncio.Event) -> tuple[LadderService, asyncio.Task[None]]:
    ladder = Ladder(load_tiers(), "recipe.py", RECIPE.read_text())
    running = LadderService(nc, ladder, LadderOptions())
    return running, asyncio.ensure_future(running.run(stop))


async def test_a_restarted_ladder_puts_back_lost_jobs_and_only_those(
    nc: Client, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(service, "SETTLE_S", 0.2)
    js = nc.jetstream()
    await champion_bucket(js)
    stop = asyncio.Event()
    first, task = await ladder_for(nc, stop)
    # The new champion's first baselines: RunSpecs in the event stream, jobs on the queue.
    await wait_for_async(_holds(lambda: len(first.ladder.runs.unfinished) > 0), 30)
    made = set(first.ladder.runs.unfinished)
    await wait_for_async(_queued(nc, made), 30)
    stop.set()
    await task

    caplog.set_level(logging.WARNING, logger=service.__name__)
    stop = asyncio.Event()
    kept, task = await ladder_for(nc, stop)  # nothing lost: nothing put back
    await wait_for_async(_holds(kept.caught_up.is_set), 30)
    await asyncio.sleep(1.0)
    stop.set()
    await task
    assert "lost jobs" not in caplog.text
    assert (await js.stream_info(JOBS_STREAM)).state.messages == len(made)

    await js.purge_stream(JOBS_STREAM)  # as a crash of the bus could, or a person
    assert await queued_run_ids(js) == set()
    stop = asyncio.Event()
    _, task = await ladder_for(nc, stop)
    await wait_for_async(_queued(nc, made), 30)
    stop.set()
    await task
    assert f"put back {len(made)} lost jobs" in caplog.text
    assert (await js.stream_info(JOBS_STREAM)).state.messages == len(made)


async def test_no_job_goes_out_before_its_runspec_event(
    nc: Client, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The bus refuses the RunSpecs' events and the ladder is told to stop meanwhile: none of
    their jobs may reach the queue, or a trainer runs them into results of no RunSpec (the kill
    -9 test found one when jobs went first). Their RunSpecs are made again by the next ladder."""
    js = nc.jetstream()
    await champion_bucket(js)
    stop = asyncio.Event()
    real = service.publish_event

    async def refused(js_: object, message: object, *args: object) -> None:
        if isinstance(message, RunSpec):
            stop.set()  # a stop arrives while the bus refuses
            raise TimeoutError("the bus is slow")
        await real(js_, message, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(service, "publish_event", refused)
    caplog.set_level(logging.WARNING, logger=service.__name__)
    running, task = await ladder_for(nc, stop)
    await asyncio.wait_for(task, 30)
    assert running.ladder.runs.unfinished  # it made RunSpecs
    assert "unpublished" in caplog.text
    assert await queued_run_ids(js) == set()


def _queued(nc: Client, run_ids: set[str]):  # type: ignore[no-untyped-def]
    async def check() -> bool:
        return await queued_run_ids(nc.jetstream()) == run_ids

    return check


def _holds(condition):  # type: ignore[no-untyped-def]
    async def check() -> bool:
        return bool(condition())

    return check


def test_a_run_whose_result_came_before_its_spec_is_not_lost() -> None:
    """Ladders before 2026-11-29 enqueued a job before they published its spec, so in streams
    they wrote an instant run's result can come first; a ladder replaying that order must not
    count the run as lost (it put such runs back at every start, and trainers ran them
    again)."""
    from bus.messages import ChampionChange, RunResult, RunSpec, RunStatus

    made = Ladder(load_tiers(), "recipe.py", RECIPE.read_text()).act()
    specs = [m for m in made if isinstance(m, RunSpec)]
    first = specs[0]
    result = RunResult(
        first.run_id, first.tier, first.seed, first.champion_version, RunStatus.OK,
        idea_id=first.idea_id, metric=3.0,
    )  # fmt: skip
    replayed = Ladder(load_tiers(), "recipe.py", RECIPE.read_text())
    for message in [*(m for m in made if isinstance(m, ChampionChange)), result, *specs]:
        replayed.observe(message)
    assert set(replayed.runs.unfinished) == {s.run_id for s in specs[1:]}
