"""A capped tier's runs go to the trainers best first, and none is lost to a restart.

The order is read from the real Ladder's state, driven as the swarm drives it (tests/ladder_sim);
the service half runs the real LadderService on a real embedded nats-server, with a trainer's
consumer on the work queue as `swarm trainer` makes it.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from pathlib import Path

import pytest
from nats.aio.client import Client

import scale_ladder.dispatch as dispatch
import scale_ladder.service as service
from bus.champion_store import champion_bucket
from bus.messages import RunResult, RunSpec
from bus.nats_bus import publish_event, queued_jobs, queued_run_ids
from bus.subjects import JOBS_STREAM, ensure_trainer_consumer, trainer_consumer_name
from scale_ladder.dispatch import Dispatch
from scale_ladder.ladder import Ladder
from scale_ladder.service import LadderOptions, LadderService
from scale_ladder.tiers import load_tiers
from tests.conftest import wait_for_async
from tests.ladder_sim import make_ladder, metric, ok_result, ok_runner, started
from training.target_info import RECIPE

TOP = 1  # the sim ladder's top tier


def _names(parked: list[dispatch.Parked]) -> list[str]:
    return [p.spec.idea_id or f"baseline@{p.spec.seed}" for p in parked]


def _park(specs: list[RunSpec], cap: int = 1) -> Dispatch:
    waiting = Dispatch({TOP: cap})
    for spec in specs:
        assert waiting.park(spec)
    return waiting


def test_the_idea_promoted_with_the_larger_gain_runs_first_whatever_came_first(
    tmp_path: Path,
) -> None:
    sim = started(make_ladder(tmp_path))
    sim.propose("idea-small", "LR = 1.0->LR = 1.4")  # first in, a small gain at tier 0
    sim.propose("idea-large", "LR = 1.0->LR = 2.9")
    sim.run_all(hold=lambda s: s.tier == TOP)
    arrived = [s.idea_id for s in sim.queue]
    assert arrived == ["idea-small", "idea-large"]  # what a first-come queue would run

    waiting = _park(sim.queue)
    assert waiting.park(sim.queue[0]) and len(waiting.waiting) == 2  # parked once
    first = waiting.release(sim.ladder, TOP, queued=1)  # cap 1, one more may wait
    assert _names(first) == ["idea-large"]
    assert waiting.release(sim.ladder, TOP, queued=2) == []  # the queue is full
    assert _names(waiting.release(sim.ladder, TOP, queued=1)) == ["idea-small"]
    assert waiting.tiers() == []


def test_evidence_at_the_tier_itself_outranks_the_gain_it_came_with(tmp_path: Path) -> None:
    """The measured case: an idea promoted with a large gain, level with the champion on its
    first top-tier seed (so the rules ask for more), waits behind a fresh idea's first seed."""
    sim = started(make_ladder(tmp_path))
    champion = sim.ladder.champions[1].source

    def level_at_the_top(spec: RunSpec, source: str) -> RunResult:
        if spec.tier == TOP and spec.idea_id == "idea-level":
            return ok_result(spec, metric(champion, spec.seed) - 0.002)
        return ok_runner(spec, source)

    sim.runner = level_at_the_top
    sim.propose("idea-level", "LR = 1.0->LR = 2.9")
    sim.run_all(hold=lambda s: s.tier == TOP)
    (first_seed,) = sim.queue
    sim.queue = []
    sim.run(first_seed)  # level with the champion: the rules ask for another seed
    assert sim.ladder.ideas["idea-level"].tier == TOP and len(sim.queue) == 1
    sim.propose("idea-fresh", "LR = 1.0->LR = 1.6")  # a smaller gain below than idea-level's
    sim.run_all(hold=lambda s: s.tier == TOP)
    assert [s.idea_id for s in sim.queue] == ["idea-level", "idea-fresh"]

    waiting = _park(sim.queue, cap=5)
    assert _names(waiting.release(sim.ladder, TOP, queued=0)) == ["idea-fresh", "idea-level"]


def test_runs_for_an_older_champion_go_at_once_and_a_decided_ideas_go_last(
    tmp_path: Path,
) -> None:
    sim = started(make_ladder(tmp_path))
    sim.propose("idea-a", "LR = 1.0->LR = 2.9")
    sim.propose("idea-b", "LR = 1.0->LR = 2.0")
    sim.run_all(hold=lambda s: s.tier == TOP)
    a, b = sim.queue
    old = replace(a, run_id="run-old", champion_version=0)  # made before a champion change
    sim.ladder.runs.observe_spec(old)
    waiting = _park([a, b, old])
    sim.ladder.ideas["idea-a"].phase = dispatch.Phase.DONE  # rejected meanwhile
    assert _names(waiting.release(sim.ladder, TOP, queued=5)) == ["idea-a"]  # the old one
    assert _names(waiting.release(sim.ladder, TOP, queued=0)) == ["idea-b", "idea-a"]


def test_a_baseline_run_goes_with_the_best_idea_waiting_on_its_seed(tmp_path: Path) -> None:
    sim = started(make_ladder(tmp_path))
    sim.propose("idea-small", "LR = 1.0->LR = 1.4")
    sim.propose("idea-large", "LR = 1.0->LR = 2.9")
    sim.run_all(hold=lambda s: s.tier == TOP)
    small, large = sim.queue
    assert small.seed == large.seed
    # The champion's run on their seed, as a ladder asks for one it lost.
    baseline = replace(large, run_id="run-baseline", idea_id="", patch="")
    loner = replace(baseline, run_id="run-loner", seed=large.seed + 1)  # no idea waits on it
    for spec in (baseline, loner):
        sim.ladder.runs.observe_spec(spec)
    waiting = _park([small, large, baseline, loner], cap=10)
    released = _names(waiting.release(sim.ladder, TOP, queued=0))
    assert released == [
        f"baseline@{loner.seed}",
        "idea-large",
        f"baseline@{large.seed}",
        "idea-small",
    ]


def test_jobs_just_sent_count_before_the_queue_shows_them(tmp_path: Path) -> None:
    """The server counts a job on the queue a moment after it took it: an act in between read
    an empty queue and sent the next job too (two on a queue capped at one, under load)."""
    sim = started(make_ladder(tmp_path))
    for i, lr in enumerate(("2.9", "2.0", "1.6", "1.4")):
        sim.propose(f"idea-{i}", f"LR = 1.0->LR = {lr}")
    sim.run_all(hold=lambda s: s.tier == TOP)
    waiting = _park(sim.queue)
    assert len(waiting.release(sim.ladder, TOP, queued=0, now=0.0)) == 2  # cap 1, one more
    assert waiting.release(sim.ladder, TOP, queued=0, now=0.1) == []  # not counted yet
    assert waiting.release(sim.ladder, TOP, queued=2, now=0.2) == []  # counted: full
    assert len(waiting.release(sim.ladder, TOP, queued=1, now=0.3)) == 1  # one taken and done
    # A count that never shows them (a person purged the queue) holds the slots a while only.
    assert waiting.release(sim.ladder, TOP, queued=0, now=0.4) == []
    assert len(waiting.release(sim.ladder, TOP, queued=0, now=0.3 + dispatch.VISIBLE_S + 1)) == 1


def test_an_uncapped_tier_is_never_held(tmp_path: Path) -> None:
    sim = started(make_ladder(tmp_path))
    sim.propose("idea-a", "LR = 1.0->LR = 2.9")
    assert sim.queue and all(s.tier == 0 for s in sim.queue)
    assert not Dispatch({TOP: 1}).park(sim.queue[0])
    assert not Dispatch({0: 0}).park(sim.queue[0])


# --- the service ----------------------------------------------------------------------------


async def test_a_capped_tier_gets_its_jobs_in_turn_and_a_restart_loses_none(
    nc: Client, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Tier 0 capped at one, nothing waiting beyond it: of the new champion's first baselines
    one job is on the queue and the rest wait in the ladder, every RunSpec in the event stream.
    A result frees the slot for the next; a restarted ladder parks the waiting ones again,
    neither flooding the queue nor losing one."""
    monkeypatch.setattr(service, "SETTLE_S", 0.2)
    monkeypatch.setattr(dispatch, "LOOKAHEAD", 0)
    js = nc.jetstream()
    await champion_bucket(js)
    await ensure_trainer_consumer(js, 0, 1)  # what a trainer of tier 0 makes at its start
    tiers = load_tiers()
    tiers[0] = replace(tiers[0], max_concurrent=1)

    async def start() -> tuple[LadderService, asyncio.Event, asyncio.Task[None]]:
        ladder = Ladder(tiers, "recipe.py", RECIPE.read_text())
        running = LadderService(nc, ladder, LadderOptions())
        stop = asyncio.Event()
        return running, stop, asyncio.ensure_future(running.run(stop))

    first, stop, task = await start()
    await wait_for_async(_holds(lambda: len(first.ladder.runs.unfinished) >= 2), 30)
    specs = {r: s for r, s in first.ladder.runs.unfinished.items() if s.tier == 0 and not s.idea_id}
    assert len(specs) >= 2
    await wait_for_async(_queue_is(nc, 1), 30)
    await asyncio.sleep(1.5)  # a second act: still one
    assert await queued_jobs(js, 0) == 1
    stop.set()
    await task

    caplog.set_level(logging.INFO, logger=service.__name__)
    second, stop, task = await start()
    await wait_for_async(_holds(second.caught_up.is_set), 30)
    await asyncio.sleep(1.5)  # past SETTLE_S: the waiting ones are found on no queue
    assert await queued_jobs(js, 0) == 1
    assert len(second._jobs.dispatch.waiting) == len(specs) - 1
    # waiting their turn, not lost: nothing said lost, nothing put on the queue twice
    assert f"{len(specs) - 1} jobs of capped tiers wait their turn again" in caplog.text
    assert "lost jobs" not in caplog.text
    done: list[str] = []
    for _ in range(len(specs)):  # as a trainer: take the job, publish its result, ack
        sub = await js.pull_subscribe_bind(trainer_consumer_name(0), stream=JOBS_STREAM)
        (msg,) = await sub.fetch(1, timeout=30)
        run_id = (msg.headers or {})["Nats-Msg-Id"].split(":")[0]
        spec = specs[run_id]
        await publish_event(js, ok_result(spec, 3.0 + len(done) / 100))
        await msg.ack()
        await sub.unsubscribe()
        done.append(run_id)
    assert set(done) == set(specs)  # each exactly once
    await wait_for_async(_holds(lambda: not (set(second.ladder.runs.unfinished) & set(specs))), 30)
    assert await queued_run_ids(js) & set(specs) == set()
    stop.set()
    await task


def _queue_is(nc: Client, n: int):  # type: ignore[no-untyped-def]
    async def check() -> bool:
        return await queued_jobs(nc.jetstream(), 0) == n

    return check


def _holds(condition):  # type: ignore[no-untyped-def]
    async def check() -> bool:
        return bool(condition())

    return check
