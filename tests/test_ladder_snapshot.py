"""A restarted ladder starts from its snapshot and reads only the events after it, reaching the
state a full replay reaches; a snapshot it cannot trust (corrupt, another configuration) means
a full replay, with the reason logged. A real nats-server and the real LadderService."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from pathlib import Path

import pytest
from nats.aio.client import Client

import scale_ladder.service as service
from bus.champion_store import champion_bucket
from bus.messages import Idea, Message, RunSpec
from bus.nats_bus import publish_event
from scale_ladder.admission import patched_source
from scale_ladder.ladder import Ladder
from scale_ladder.seeds import DEFAULT_SEED_SECRET
from scale_ladder.service import LadderOptions, LadderService
from tests.ladder_sim import make_ladder, ok_runner, patch


def state_of(ladder: Ladder) -> dict[str, object]:
    """What the ladder knows, in a comparable form."""
    return {
        "ideas": {i: (s.phase, s.version, s.tier) for i, s in ladder.ideas.items()},
        "results": {k: sorted(v) for k, v in ladder.results.items() if v},
        "champions": sorted(ladder.champions),
        "gains": {k: dict(v) for k, v in ladder.gains.items() if v},
    }


class Running:
    def __init__(self, nc: Client, ladder: Ladder, path: Path | None) -> None:
        self.service = LadderService(nc, ladder, LadderOptions(snapshot_path=path))
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
                waiting = list(self.service.ladder.unfinished.values())
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
    folded = first.service._folded

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
    await resumed.run_all(nc)
    await resumed.close()

    replayed = Running(nc, make_ladder(tmp_path), None)  # everything, from the first event
    await replayed.caught_up()
    await asyncio.sleep(0.5)
    assert min(replayed.seqs) == 1
    assert state_of(replayed.service.ladder) == state_of(resumed.service.ladder)
    await replayed.close()


@pytest.mark.parametrize("spoil", ["truncate", "reconfigure", "another secret"])
async def test_a_snapshot_it_cannot_trust_means_a_full_replay(
    nc: Client, tmp_path: Path, caplog: pytest.LogCaptureFixture, spoil: str
) -> None:
    snap = tmp_path / "ladder.snapshot"
    first = await swarm_history(nc, tmp_path, snap)
    ladder = make_ladder(tmp_path)
    if spoil == "truncate":
        snap.write_bytes(snap.read_bytes()[: snap.stat().st_size // 2])
        why = "unreadable"
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
    assert min(again.seqs) == 1
    assert set(again.service.ladder.ideas) == set(first.service.ladder.ideas)
