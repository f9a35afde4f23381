"""A trainer says when it starts a run (an AgentEvent STARTED, detail: the run id), so the live
view measures a run from its start rather than from when it was queued. A real trainer on the
synthetic target, a real nats-server and the ledger service in this process."""

from __future__ import annotations

import asyncio
from pathlib import Path

from nats.aio.client import Client

from bus.messages import BudgetKind, RunSpec, new_id
from bus.nats_bus import enqueue_run
from bus.subjects import ensure_trainer_consumer
from ledger.service import LedgerService
from swarm.sql_client import ask_ledger
from tests.conftest import wait_for_async
from training.synthetic import SyntheticTarget
from training.trainer import Trainer, TrainerOptions


def synthetic_spec(seed: int) -> RunSpec:
    return RunSpec(new_id("run"), 0, seed, 1, BudgetKind.UNITS, 1.0, target="synthetic")


async def rows(nc: Client, sql: str) -> list[dict[str, object]]:
    return (await ask_ledger(nc, sql, 10)).table.to_pylist()  # type: ignore[no-any-return]


async def serve(nc: Client, options: TrainerOptions, specs: list[RunSpec]) -> str:
    """Run `specs` on a trainer until their results and its LEFT event are in; its name."""
    js = nc.jetstream()
    await ensure_trainer_consumer(js, 0)
    for spec in specs:
        await enqueue_run(js, spec)
    trainer = Trainer(nc, SyntheticTarget(), options)
    stop = asyncio.Event()
    serving = asyncio.create_task(trainer.run(stop))
    try:

        async def done() -> bool:
            return len(await rows(nc, "SELECT run_id FROM runs")) == len(specs)

        await wait_for_async(done, 30, 0.2)
    finally:
        stop.set()
        await serving

    async def left() -> bool:  # published last: what the trainer published before is in too
        return bool(await rows(nc, "SELECT 1 FROM agent_events WHERE kind = 'LEFT'"))

    await wait_for_async(left, 10, 0.1)
    return trainer.name


async def test_a_trainer_records_when_it_starts_each_run(
    nc: Client, ledger: LedgerService, tmp_path: Path
) -> None:
    specs = [synthetic_spec(seed) for seed in range(2)]
    options = TrainerOptions((0,), "cpu", tmp_path / "scratch", tmp_path / "logs", {})
    name = await serve(nc, options, specs)
    started = await rows(
        nc,
        "SELECT e.event_key, e.agent, e.role, e.detail, epoch(e.created_at) AS at,"
        " epoch(s.created_at) AS queued, epoch(r.started_at) AS ran FROM agent_events e"
        " JOIN run_specs s ON s.run_id = e.detail JOIN runs r ON r.run_id = e.detail"
        " WHERE e.kind = 'STARTED' ORDER BY e.created_at",
    )
    assert [(e["detail"], e["agent"], e["role"]) for e in started] == [
        (spec.run_id, name, "trainer") for spec in specs
    ]
    # One per delivery (a re-publish adds nothing; a job taken again starts again).
    assert [e["event_key"] for e in started] == [f"started-{s.run_id}-1" for s in specs]
    for e in started:  # after it was queued, before the experiment itself began
        assert e["queued"] <= e["at"] <= e["ran"]  # type: ignore[operator]
    # A run's start says what the trainer does, not how it is: its last event is still LEFT.
    agents = await rows(nc, "SELECT agent_id, last_event, events FROM agents")
    assert agents == [{"agent_id": name, "last_event": "LEFT", "events": 2 + len(specs)}]


async def test_an_instant_target_announces_no_starts(
    nc: Client, ledger: LedgerService, tmp_path: Path
) -> None:
    """Instant runs end before anyone could look: a start event each would only add load."""
    options = TrainerOptions(
        (0,), "cpu", tmp_path / "scratch", tmp_path / "logs", {}, instant_target=True
    )
    await serve(nc, options, [synthetic_spec(seed) for seed in range(5)])
    kinds = await rows(nc, "SELECT kind FROM agent_events ORDER BY created_at")
    assert [k["kind"] for k in kinds] == ["JOINED", "LEFT"]
