"""Workers agree on the data: the ladder records each champion and tier's corpus hash (its
first baseline run's), RunSpecs carry it, a trainer with other data refuses the run saying
why, and the ladder never pairs runs made on different data."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest
from nats.aio.client import Client

from bus.messages import RunResult, RunSpec, RunStatus, Verdict
from bus.nats_bus import enqueue_run
from bus.subjects import JOBS_STREAM, ensure_trainer_consumer, trainer_consumer_name
from scale_ladder import baselines
from tests.ladder_sim import Sim, decisions, make_ladder, ok_runner
from tests.training_helpers import tiny_spec
from training.targets import BytelmTarget
from training.trainer import Trainer, TrainerOptions, WrongTarget


def on_data(hashes: dict[str, str]) -> object:
    """A runner whose runs report the corpus of the trainer that ran them: `hashes` maps an
    idea id ("" for the baseline) to its trainer's data; others run on "data-a"."""

    def runner(spec: RunSpec, source: str) -> RunResult:
        result = ok_runner(spec, source)
        return dataclasses.replace(result, corpus_hash=hashes.get(spec.idea_id, "data-a"))

    return runner


def test_specs_carry_the_recorded_corpus_and_other_data_is_never_paired(tmp_path: Path) -> None:
    sim = Sim(make_ladder(tmp_path), on_data({"idea-elsewhere": "data-b"}))  # type: ignore[arg-type]
    sim.step()
    sim.run_all()
    assert sim.ladder.baselines.corpus == "data-a"
    sim.propose("idea-here", "LR = 1.0->LR = 2.0")
    sim.propose("idea-elsewhere", "LR = 1.0->LR = 2.5")
    sim.run_all()
    specs = [s for s in sim.log if isinstance(s, RunSpec) and s.idea_id and s.tier == 0]
    assert specs and all(s.corpus_hash == "data-a" for s in specs)
    here = decisions(sim, "idea-here")
    assert here[0].verdict is Verdict.PROMOTE  # a real gain, on the recorded data
    (elsewhere,) = decisions(sim, "idea-elsewhere")
    assert elsewhere.verdict is Verdict.REJECT and elsewhere.delta is None  # nothing paired
    assert "corpus data-b" in elsewhere.rule and "data-a recorded for the swarm" in elsewhere.rule


def test_the_record_is_the_first_baseline_run_of_a_tier_seed_and_never_changes(
    tmp_path: Path,
) -> None:
    """A result for a seed no tier uses (a forged one) records nothing; a later baseline run
    on other data (a retry taken by another worker) does not flip the record, and is left out
    of the pairs."""
    ladder = make_ladder(tmp_path)
    sim = Sim(ladder)
    sim.step()
    spec = sim.queue.pop(0)
    forged = RunResult("run-forged", 0, 424242, 1, RunStatus.OK, metric=9.9, corpus_hash="evil")
    sim.feed(forged)
    assert ladder.baselines.corpus == ""
    sim.feed(dataclasses.replace(result_of(sim, spec), corpus_hash="data-a"))
    assert ladder.baselines.corpus == "data-a"
    other_seed = ladder.seed(0, 1)
    stray = dataclasses.replace(
        result_of(sim, spec), run_id="run-base-v1-t0-other", seed=other_seed, corpus_hash="data-b"
    )
    sim.feed(stray)
    assert ladder.baselines.corpus == "data-a"
    assert other_seed not in baselines.metrics(ladder, 1, 0)
    assert spec.seed in baselines.metrics(ladder, 1, 0)


def result_of(sim: Sim, spec: RunSpec) -> RunResult:
    return ok_runner(spec, sim.ladder.champions[spec.champion_version].source)


async def test_a_trainer_with_other_data_hands_the_job_back_and_stops(
    nc: Client, tmp_path: Path, corpus_dir: Path
) -> None:
    """Running it would give a result the ladder cannot pair, and the idea would be rejected
    for a worker's mistake: the job goes back for another trainer, untouched."""
    js = nc.jetstream()
    await ensure_trainer_consumer(js, 0)
    await enqueue_run(js, dataclasses.replace(tiny_spec(seed=1), corpus_hash="f" * 64))
    options = TrainerOptions((0,), "cpu", tmp_path / "scratch", tmp_path / "logs", {})
    trainer = Trainer(nc, BytelmTarget(corpus_dir), options)
    with pytest.raises(WrongTarget, match="but the swarm runs on corpus ffffffffffffffff"):
        await asyncio.wait_for(trainer.run(asyncio.Event()), 60)
    info = await js.consumer_info(JOBS_STREAM, trainer_consumer_name(0))
    assert info.num_ack_pending + info.num_pending == 1  # handed back, not run, not lost
