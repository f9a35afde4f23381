"""Trainers on the real work queue: results for every job, dead letters for garbage, and a
trainer killed mid-run has its job completed elsewhere with exactly one result."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from nats.aio.client import Client

import training.trainer as trainer_module
from bus.embedded_server import EmbeddedNatsServer
from bus.messages import BudgetKind, RunStatus
from bus.nats_bus import enqueue_run
from bus.subjects import (
    JOBS_STREAM,
    ensure_trainer_consumer,
    job_subject,
    trainer_consumer_config,
    trainer_consumer_name,
)
from ledger.service import LedgerService
from swarm.sql_client import ask_ledger
from tests.conftest import swarm_cmd, wait_for_async
from tests.helpers_process import alive, descendants
from tests.training_helpers import TINY_LADDER, inject, tiny_spec
from training.run_limits import MIN_FREE_BYTES
from training.synthetic import SyntheticTarget
from training.trainer import Trainer, TrainerOptions, WrongTarget


@pytest.fixture
def worker_config(tmp_path: Path) -> Path:
    (tmp_path / "ladder.toml").write_text(TINY_LADDER)
    config = tmp_path / "worker.toml"
    config.write_text(
        f'[ladder]\npath = "{tmp_path / "ladder.toml"}"\n[trainers]\ndevice = "cpu"\n'
    )
    return config


def start_worker(
    server: EmbeddedNatsServer, workspace: Path, config: Path
) -> subprocess.Popen[bytes]:
    env = {**os.environ, "SWARM_NATS_TOKEN": server.token}
    command = swarm_cmd(workspace, "--config", str(config), "worker", "--nats", server.url)
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def serve_until_stored(nc: Client, options: TrainerOptions, runs: int) -> None:
    """A synthetic-target trainer in this process, serving until the ledger holds `runs` runs."""
    stop = asyncio.Event()
    serving = asyncio.create_task(Trainer(nc, SyntheticTarget(), options).run(stop))
    try:

        async def done() -> bool:
            return len(await rows(nc, "select run_id from runs")) == runs

        await wait_for_async(done, 30, 0.2)
    finally:
        stop.set()
        await serving


async def rows(nc: Client, sql: str) -> list[dict[str, object]]:
    return (await ask_ledger(nc, sql, 10)).table.to_pylist()  # type: ignore[no-any-return]


async def test_trainer_serves_every_job_and_survives_bad_ones(
    nc: Client,
    ledger: LedgerService,
    nats_server: EmbeddedNatsServer,
    tmp_path: Path,
    worker_config: Path,
) -> None:
    js = nc.jetstream()
    await ensure_trainer_consumer(js, 0)
    specs = [tiny_spec(inject("1 / 0")), tiny_spec("not a patch"), tiny_spec()]
    for spec in specs:
        await enqueue_run(js, spec)
    await js.publish(job_subject(0), b"{garbage")
    worker = start_worker(nats_server, tmp_path / "ws", worker_config)
    try:

        async def done() -> bool:
            return len(await rows(nc, "select run_id from runs")) == 3

        await wait_for_async(done, 90, 0.5)
        results = {r["run_id"]: r for r in await rows(nc, "select * from runs")}
        assert results[specs[0].run_id]["status"] == RunStatus.CRASH
        assert "ZeroDivisionError" in str(results[specs[0].run_id]["reason"])
        assert results[specs[1].run_id]["status"] == RunStatus.REFUSED
        assert results[specs[2].run_id]["status"] == RunStatus.OK

        async def lettered() -> bool:
            return len(await rows(nc, "select * from dead_letters where consumer='trainer'")) == 1

        await wait_for_async(lettered, 10)
        agents = await rows(nc, "select role, last_event from agents")
        assert agents == [{"role": "trainer", "last_event": "JOINED"}]
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(30)
    assert worker.returncode == 0


async def test_killed_trainer_job_is_completed_elsewhere_exactly_once(
    nc: Client,
    ledger: LedgerService,
    nats_server: EmbeddedNatsServer,
    tmp_path: Path,
    worker_config: Path,
) -> None:
    js = nc.jetstream()
    await ensure_trainer_consumer(js, 0)
    spec = tiny_spec(budget=6.0, kind=BudgetKind.SECONDS)
    await enqueue_run(js, spec)
    first = start_worker(nats_server, tmp_path / "ws", worker_config)
    second = None
    try:

        async def running() -> bool:  # the trainer's fork server has forked an experiment
            return len(descendants(first.pid)) >= 2

        await wait_for_async(running, 60, 0.2)
        await asyncio.sleep(1.0)  # mid-run
        below = descendants(first.pid)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        deadline = asyncio.get_running_loop().time() + 10
        while any(map(alive, below)) and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.1)
        assert not any(map(alive, below)), "the experiment outlived its trainer"
        assert await rows(nc, "select * from runs") == []

        second = start_worker(nats_server, tmp_path / "ws2", worker_config)

        async def finished() -> bool:
            return len(await rows(nc, "select run_id from runs")) == 1

        await wait_for_async(finished, 90, 0.5)  # after the job's ack_wait, on the second trainer
        await asyncio.sleep(2)
        (result,) = await rows(nc, f"select * from runs where run_id = '{spec.run_id}'")
        assert result["status"] == RunStatus.OK, result["reason"]
        assert len(await rows(nc, "select * from runs")) == 1
    finally:
        for worker in (first, second):
            if worker is not None and worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
                worker.wait(30)


async def test_a_trainer_takes_the_highest_tier_first_without_waiting_on_empty_ones(
    nc: Client, ledger: LedgerService, tmp_path: Path
) -> None:
    """Jobs on tiers 0 and 2 (tier 1 empty): every tier-2 job runs before any tier-0 one."""
    js = nc.jetstream()
    specs = [
        replace(tiny_spec(seed=s), tier=t, target="synthetic") for t in (0, 2) for s in range(3)
    ]
    for tier in (0, 1, 2):
        await ensure_trainer_consumer(js, tier)
    for spec in specs:
        await enqueue_run(js, spec)
    options = TrainerOptions(
        (0, 1, 2), "cpu", tmp_path / "scratch", tmp_path / "logs", {}, max_concurrent={}
    )
    await serve_until_stored(nc, options, len(specs))
    order = await rows(nc, "select tier from runs order by started_at")
    assert [r["tier"] for r in order] == [2, 2, 2, 0, 0, 0]


async def test_an_instant_target_is_served_in_batches_exactly_once_highest_tier_first(
    nc: Client, ledger: LedgerService, tmp_path: Path
) -> None:
    """The synthetic target's trainer takes up to 32 jobs per fetch and publishes their results
    together: each job still gets one result and one ack, tier 2 still goes first, and its cap
    holds (a trainer never asks for more jobs than a capped tier's cap)."""
    js = nc.jetstream()
    specs = [
        replace(tiny_spec(seed=s), tier=t, target="synthetic") for t in (0, 2) for s in range(40)
    ]
    caps = {0: 0, 1: 0, 2: 2}
    for tier, cap in caps.items():
        await ensure_trainer_consumer(js, tier, cap)
    for spec in specs:
        await enqueue_run(js, spec)
    options = TrainerOptions(
        (0, 1, 2),
        "cpu",
        tmp_path / "scratch",
        tmp_path / "logs",
        {},
        max_concurrent=caps,
        instant_target=True,
    )
    await serve_until_stored(nc, options, len(specs))
    runs = await rows(nc, "select run_id, tier, status from runs order by started_at")
    assert sorted(r["run_id"] for r in runs) == sorted(s.run_id for s in specs)
    assert [r["tier"] for r in runs] == [2] * 40 + [0] * 40
    assert {r["status"] for r in runs} == {RunStatus.OK}
    for tier in (0, 2):
        info = await js.consumer_info(JOBS_STREAM, trainer_consumer_name(tier))
        assert (info.num_pending, info.num_ack_pending) == (0, 0)  # every job acked


async def test_a_capped_tier_recovers_a_job_handed_to_a_pull_that_timed_out(
    nc: Client, ledger: LedgerService, tmp_path: Path
) -> None:
    """Tier 2 runs one job at a time. A job the server handed to a pull that had already given
    up counts against that cap until its ack_wait passes, and comes back only on a new pull: the
    trainer must pull again then, not wait for a free slot forever (a 30-minute soak stalled so)."""
    js = nc.jetstream()
    await ensure_trainer_consumer(js, 0)
    capped = trainer_consumer_config(2, max_concurrent=1)
    await js.add_consumer(JOBS_STREAM, replace(capped, ack_wait=1.0))  # a short ack_wait
    specs = [replace(tiny_spec(seed=s), tier=2, target="synthetic") for s in range(3)]
    for spec in specs:
        await enqueue_run(js, spec)
    lost = await js.pull_subscribe_bind(trainer_consumer_name(2), stream=JOBS_STREAM)
    assert len(await lost.fetch(1, timeout=5)) == 1  # delivered, never acked: the cap is full
    options = TrainerOptions(
        (0, 2), "cpu", tmp_path / "scratch", tmp_path / "logs", {}, max_concurrent={2: 1}
    )
    await serve_until_stored(nc, options, len(specs))


async def test_a_higher_tier_job_whose_trainer_died_is_run_with_no_job_after_it(
    nc: Client, ledger: LedgerService, tmp_path: Path
) -> None:
    """The last job at tier 2 was taken by a trainer that died. Nothing new arrives there, so
    the server says no job is pending; the job is only held. A trainer must still pull it once
    its ack_wait has passed (a drained fault test left such a job undone for good)."""
    js = nc.jetstream()
    await ensure_trainer_consumer(js, 0)
    await js.add_consumer(JOBS_STREAM, replace(trainer_consumer_config(2), ack_wait=1.0))
    spec = replace(tiny_spec(seed=5), tier=2, target="synthetic")
    await enqueue_run(js, spec)
    dead = await js.pull_subscribe_bind(trainer_consumer_name(2), stream=JOBS_STREAM)
    assert len(await dead.fetch(1, timeout=5)) == 1  # taken, never acked
    info = await js.consumer_info(JOBS_STREAM, trainer_consumer_name(2))
    assert (info.num_pending, info.num_ack_pending) == (0, 1)
    options = TrainerOptions((0, 2), "cpu", tmp_path / "scratch", tmp_path / "logs", {})
    await serve_until_stored(nc, options, 1)


async def test_a_trainer_for_another_target_hands_the_job_back_and_stops(
    nc: Client, tmp_path: Path
) -> None:
    js = nc.jetstream()
    await ensure_trainer_consumer(js, 0)
    spec = tiny_spec(seed=1)  # a bytelm job
    await enqueue_run(js, spec)
    options = TrainerOptions((0,), "cpu", tmp_path / "scratch", tmp_path / "logs", {})
    with pytest.raises(WrongTarget, match="start it with --target bytelm"):
        await asyncio.wait_for(Trainer(nc, SyntheticTarget(), options).run(asyncio.Event()), 30)
    info = await js.consumer_info(JOBS_STREAM, trainer_consumer_name(0))
    assert info.num_ack_pending + info.num_pending == 1  # handed back, not run, not lost


async def test_a_trainer_takes_no_job_while_its_disk_is_full(
    nc: Client, ledger: LedgerService, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that failed for want of space would be charged to its idea: the job waits on the
    queue, the trainer says why, and it runs once there is room."""
    js = nc.jetstream()
    await ensure_trainer_consumer(js, 0)
    free = [1024]  # bytes where runs write, as the trainer reads them
    monkeypatch.setattr(trainer_module, "free_bytes", lambda folder: free[0])
    monkeypatch.setattr(trainer_module, "DISK_WAIT_S", 0.2)
    spec = replace(tiny_spec(seed=1), target="synthetic")
    await enqueue_run(js, spec)
    options = TrainerOptions((0,), "cpu", tmp_path / "scratch", tmp_path / "logs", {})
    stop = asyncio.Event()
    serving = asyncio.create_task(Trainer(nc, SyntheticTarget(), options).run(stop))
    try:

        async def said() -> bool:
            notes = await rows(nc, "select detail from agent_events where kind = 'NOTE'")
            return any("taking no job" in str(n["detail"]) for n in notes)

        await wait_for_async(said, 30, 0.2)
        await asyncio.sleep(1.0)
        info = await js.consumer_info(JOBS_STREAM, trainer_consumer_name(0))
        assert info.num_pending == 1 and info.num_ack_pending == 0  # not taken, not lost
        assert await rows(nc, "select run_id from runs") == []
        free[0] = MIN_FREE_BYTES

        async def ran() -> bool:
            return len(await rows(nc, "select run_id from runs where status = 'OK'")) == 1

        await wait_for_async(ran, 30, 0.2)
    finally:
        stop.set()
        await serving
