"""A restarted ladder starts from its snapshot and reads only the events after it, reaching the
state a full replay reaches; a snapshot it cannot trust (corrupt, another configuration) means
a full replay, with the reason logged. A real nats-server and the real LadderService."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from pathlib import Path

import pytest
from nats.aio.client import Client

import scale_ladder.service as service
from bus.champion_store import champion_bucket
from bus.messages import Idea, Message, RunSpec
from bus.nats_bus import publish_event, queued_run_ids
from bus.snapshot_file import Checkpoint
from scale_ladder import snapshot
from scale_ladder.admission import patched_source
from scale_ladder.ladder import Ladder
from scale_ladder.noise_pool import earlier_noise
from scale_ladder.seeds import DEFAULT_SEED_SECRET
from scale_ladder.service import LadderOptions, LadderService
from tests.ladder_sim import make_ladder, ok_runner, patch, started


def state_of(ladder: Ladder) -> dict[str, object]:
    """What the ladder knows, in a comparable form."""
    return {
        "ideas": {i: (s.phase, s.version, s.tier) for i, s in ladder.ideas.items()},
        "results": {k: sorted(v) for k, v in ladder.runs.results.items() if v},
        "champions": sorted(ladder.champions),
        "gains": {k: dict(v) for k, v in ladder.promotion.gains.items() if v},
    }


class Running:
    def __init__(self, nc: Client, ladder: Ladder, path: Path | None, limit: int = 0) -> None:
        options = LadderOptions(snapshot_path=path, max_specs=limit)
        self.service = LadderService(nc, ladder, options)
        self.seqs: list[int] = []
        receive = self.service._receive

        async def counting(message: Message | None, seq: int) -> None:
            self.seqs.append(seq)
            await receive(message, seq)

        self.service._receive = counting  # type: ignore[method-assign]
        self.stop = asyncio.Event()
        self.task = asyncio.ensure_future(self.service.run(self.stop))

    async def caught_up(self) -> None:
        await asyncio.wait_for(self.service.caught_up.wait(), 30)

    async def run_all(self, nc: Client, rounds: int = 40) -> None:
        """A trainer: an OK result for every run the ladder waits for, until none is left."""
        js = nc.jetstream()
        for _ in range(rounds):
            await asyncio.sleep(0.2)
            async with self.service._lock:
                waiting = list(self.service.ladder.runs.unfinished.values())
            if not waiting:
                return
            for spec in waiting:
                await publish_event(js, result_of(self.service.ladder, spec))

    async def close(self) -> None:
        self.stop.set()
        await self.task


def result_of(ladder: Ladder, spec: RunSpec) -> Message:
    base = ladder.champions[spec.champion_version].source
    source = patched_source(base, spec.patch, "recipe.py") if spec.patch else base
    return ok_runner(spec, source)


async def swarm_history(nc: Client, tmp_path: Path, snap: Path) -> Running:
    """A ladder that decided two ideas and stopped (writing its snapshot)."""
    await champion_bucket(nc.jetstream())
    first = Running(nc, make_ladder(tmp_path), snap)
    await first.caught_up()
    await first.run_all(nc)

    source = first.service.ladder.champions[1].source
    for name, (old, new) in {"a": ("LR = 1.0", "LR = 2.0"), "b": ("WD = 0.1", "WD = 0.3")}.items():
        idea = Idea(f"idea-{name}", "tester", "h", patch(old, new, source), 1)
        await publish_event(nc.jetstream(), idea)
    await first.run_all(nc)
    await first.close()
    return first


async def test_a_restart_reads_only_the_events_after_its_snapshot(
    nc: Client, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    snap = tmp_path / "ladder.snapshot"
    first = await swarm_history(nc, tmp_path, snap)
    assert snap.exists() and snap.stat().st_mode & 0o777 == 0o600  # a pickle: ours alone
    folded = json.loads(snap.read_bytes().split(b"\n")[0])["seq"]

    source = first.service.ladder.champions[1].source
    late = Idea("idea-late", "tester", "h", patch("LR = 1.0", "LR = 2.5", source), 1)
    await publish_event(nc.jetstream(), late)  # while no ladder runs

    caplog.set_level(logging.INFO, logger=service.__name__)
    resumed = Running(nc, make_ladder(tmp_path), snap)
    await resumed.caught_up()
    await asyncio.sleep(0.5)
    assert f"from its snapshot at event {folded}" in caplog.text
    assert resumed.seqs and min(resumed.seqs) > folded  # only the tail was read
    assert "idea-late" in resumed.service.ladder.ideas
    # ...and its jobs went to the trainers: the recipes they name come from the restored state
    # (a work queue kept with the ladder it was built with sent none after a restart)
    late_runs = {
        r for r, s in resumed.service.ladder.runs.unfinished.items() if s.idea_id == "idea-late"
    }
    assert late_runs and late_runs <= await queued_run_ids(nc.jetstream())
    await resumed.run_all(nc)
    await resumed.close()

    replayed = Running(nc, make_ladder(tmp_path), None)  # everything, from the first event
    await replayed.caught_up()
    await asyncio.sleep(0.5)
    assert min(replayed.seqs) == min(first.seqs)  # its first event of a kind it folds
    assert state_of(replayed.service.ladder) == state_of(resumed.service.ladder)
    await replayed.close()


# A snapshot as the build before the ladder's state was split in parts wrote it: format 2, that
# build's digest of its state's classes, and a pickle of one LadderState (a module this build
# no longer has).
OLD_LAYOUT_CLASSES = "5fff1a06a2cb830d"
OLD_LAYOUT_STATE = b"\x80\x05cscale_ladder.ladder_state\nLadderState\n)\x81."

SPOILS = [
    "old layout",
    "truncate",
    "reconfigure",
    "another secret",
    "event gone",
    "another build",
    "readable by others",
    "a link",
]


@pytest.mark.parametrize("spoil", SPOILS)
async def test_a_snapshot_it_cannot_trust_means_a_full_replay(
    nc: Client, tmp_path: Path, caplog: pytest.LogCaptureFixture, spoil: str
) -> None:
    snap = tmp_path / "ladder.snapshot"
    first = await swarm_history(nc, tmp_path, snap)
    ladder = make_ladder(tmp_path)
    if spoil == "old layout":
        header = json.loads(snap.read_bytes().partition(b"\n")[0])
        header.update(format=2, classes=OLD_LAYOUT_CLASSES)
        snap.write_bytes(json.dumps(header).encode() + b"\n" + OLD_LAYOUT_STATE)
        why = f"format 2, this build writes {snapshot.FORMAT}"
    elif spoil == "truncate":
        snap.write_bytes(snap.read_bytes()[: snap.stat().st_size // 2])
        why = "unreadable"
    elif spoil == "event gone":  # the stream lost its tail (a crash before its disk sync)
        header = json.loads(snap.read_bytes().split(b"\n")[0])
        await nc.jetstream().delete_msg("SWARM_EVENTS", header["seq"])
        why = f"the stream no longer holds its event {header['seq']}"
    elif spoil == "another build":  # its state's classes had other fields
        head, _, body = snap.read_bytes().partition(b"\n")
        header = json.loads(head)
        snap.write_bytes(json.dumps({**header, "classes": "0" * 16}).encode() + b"\n" + body)
        why = "written by another build"
    elif spoil == "readable by others":
        snap.chmod(0o644)
        why = "not a private file of this user"
    elif spoil == "a link":  # the pickle is not the ladder's own file
        target = tmp_path / "elsewhere"
        snap.rename(target)
        snap.symlink_to(target)
        why = "cannot be opened as a plain file"
    elif spoil == "another secret":  # its seeds are not the snapshot's seeds
        ladder = make_ladder(tmp_path, seed_secret=b"another workspace's secret")
        why = "the ladder's seed secret changed since"
        assert snap.read_bytes().count(DEFAULT_SEED_SECRET) == 0  # the secret stays in its file
    else:
        rule = dataclasses.replace(ladder.tiers[0].rule, sigmas=3.0)
        ladder.tiers = [dataclasses.replace(ladder.tiers[0], rule=rule), *ladder.tiers[1:]]
        why = "the ladder's tiers changed since"
    caplog.set_level(logging.INFO)
    again = Running(nc, ladder, snap)
    await again.caught_up()
    await asyncio.sleep(0.3)
    await again.close()
    assert why in caplog.text and "replaying the whole stream" in caplog.text
    assert min(again.seqs) == min(first.seqs)  # from its first event of a kind it folds
    assert set(again.service.ladder.ideas) == set(first.service.ladder.ideas)


def test_a_snapshot_holds_every_part_of_the_ladder(tmp_path: Path) -> None:
    """Saved and loaded, the ladder is the one it was in every part (runs, admission indexes,
    baselines, pooled noise, promotions, lineage), with its secret from its own file."""
    sim = started(make_ladder(tmp_path))
    for name, change in {"a": "LR = 1.0->LR = 2.0", "b": "WD = 0.1->WD = 0.3"}.items():
        sim.propose(f"idea-{name}", change)
    sim.run_all(hold=lambda spec: spec.idea_id == "idea-b")  # idea-b's runs stay out
    assert sim.ladder.current > 1 and sim.ladder.runs.unfinished
    path = tmp_path / "ladder.snapshot"
    saved = snapshot.Snapshot(sim.ladder, Checkpoint(1, "idea-idea-a", "stream"), frozenset())
    snapshot.save(path, saved)
    loaded = snapshot.load(path, make_ladder(tmp_path), "stream", 1).ladder
    assert loaded == sim.ladder
    assert loaded.lineage.current == loaded.current > 1


async def test_an_idea_a_kill_left_waiting_is_decided_after_a_restart(
    nc: Client, tmp_path: Path
) -> None:
    """Killed between queueing a job and publishing its RunSpec, the ladder leaves the stream
    an idea and its run's result but no RunSpec. A full replay looks at every idea and decides
    it; a start from the snapshot must too, or no start ever would."""
    snap = tmp_path / "ladder.snapshot"
    first = await swarm_history(nc, tmp_path, snap)
    ladder = first.service.ladder
    v, source = ladder.current, ladder.champions[ladder.current].source
    old = next(line for line in source.splitlines() if line.startswith("WD = "))
    idea = Idea("idea-x", "tester", "h", patch(old, "WD = 0.12", source), v)
    await publish_event(nc.jetstream(), idea)
    seed, corpus = ladder.seed(0, 0), ladder.baselines.corpus
    spec = ladder.tiers[0].run_spec(
        f"run-idea-x-v{v}-t0-s{seed}", seed, v, "idea-x", idea.patch, ladder.target, corpus
    )
    await publish_event(nc.jetstream(), result_of(ladder, spec))  # the trainer ran the job
    again = Running(nc, make_ladder(tmp_path), snap)
    await again.caught_up()
    await again.run_all(nc)
    await again.close()
    decided = [k for k in again.service.ladder.seen if k.startswith("decision-dec-idea-x-")]
    assert decided  # a verdict (WD 0.12 is a small loss: rejected, or retested first)


async def test_a_start_without_a_limit_keeps_the_count_a_later_limit_needs(
    nc: Client, tmp_path: Path
) -> None:
    """`--max-experiments N` counts every RunSpec the workspace holds, those made by a start
    that had no limit too: a later limited start from its snapshot sends no more than N."""
    snap = tmp_path / "ladder.snapshot"
    first = await swarm_history(nc, tmp_path, snap)
    made = len(first.service._specs)
    assert made > 0
    limited = Running(nc, make_ladder(tmp_path), snap, limit=made)
    await limited.caught_up()
    source = limited.service.ladder.champions[limited.service.ladder.current].source
    more = Idea("idea-more", "tester", "h", patch("WD = 0.1", "WD = 0.05", source), 0)
    await publish_event(nc.jetstream(), dataclasses.replace(more, champion_version=1))
    await asyncio.sleep(1.0)
    await limited.close()
    specs = [s for s in limited.service.ladder.runs.unfinished if "idea-more" in s]
    assert len(limited.service._specs) == made and limited.service._held >= set(specs)


def test_the_racing_prior_is_the_same_whenever_an_old_champions_result_came(
    tmp_path: Path,
) -> None:
    """A result of a champion that was just replaced can reach the stream after the change (the
    ladder publishes the change after writing the champion store). Its noise counts in the
    prior either way, so a ladder that saw the change first (live, and its snapshot) and one
    that replays the stream's order pool the same."""
    from tests.ladder_sim import started

    sim = started(make_ladder(tmp_path))
    for name, change in {"a": "LR = 1.0->LR = 1.3", "b": "WD = 0.1->WD = 0.2"}.items():
        sim.propose(f"idea-{name}", change)
    second = sim.ladder.seed(0, 1)  # idea-b's second seed ends late: a pair for the pool

    def held(spec: RunSpec) -> bool:
        return spec.idea_id == "idea-b" and spec.seed == second

    sim.run_all(hold=held)
    late = [s for s in sim.queue if held(s)]
    sim.propose("idea-win", "LR = 1.0->LR = 3.0")
    sim.run_all(hold=held)
    assert sim.ladder.current > 1 and late
    for spec in late:  # idea-b's v1 runs end after v2 was made
        sim.run(spec)
    live = [earlier_noise(sim.ladder, t.index) for t in sim.ladder.tiers]
    replayed = Ladder(sim.ladder.tiers, "recipe.py", sim.ladder.initial_source)
    log = list(sim.log)
    changes = [m for m in log if getattr(m, "KIND", "") == "champion_change" and m.version > 1]
    tail = [m for m in log if getattr(m, "run_id", "") in {s.run_id for s in late}]
    reordered = [m for m in log if m not in tail]
    cut = reordered.index(changes[0])
    for message in [*reordered[:cut], *tail, *reordered[cut:]]:
        replayed.observe(message)
    assert [earlier_noise(replayed, t.index) for t in replayed.tiers] == live
    without = Ladder(sim.ladder.tiers, "recipe.py", sim.ladder.initial_source)
    for message in reordered:  # the late runs make a difference to the pool
        without.observe(message)
    assert [earlier_noise(without, t.index) for t in without.tiers] != live
