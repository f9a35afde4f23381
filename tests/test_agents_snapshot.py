"""A restarted agents host starts from its snapshot and reads only the events after it, reaching
the state a full replay reaches: the shared history and what each researcher was told about its
own ideas. A snapshot it cannot use means a full replay, with the reason logged. A real
nats-server and the real host (agents/host.py); only its ticking is left out, so no researcher
proposes while the test compares what they learned."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
from pathlib import Path

import pytest
from nats.aio.client import Client

import agents.host as host
from agents.brain import Persona
from agents.brain_groups import BrainGroup
from agents.history import History
from agents.host import HostOptions, run_host
from agents.host_snapshot import checkpoint_of
from agents.llm_budget import LlmBudget
from agents.researcher import Researcher
from bus.messages import Idea, Message, RunResult, RunSpec, RunStatus
from bus.nats_bus import publish_event
from tests.ladder_sim import Sim, make_ladder, ok_runner, started

AUTHOR = "h-0-explorer"  # the host's one researcher: prefix h, index 0, persona explorer


def crashing(spec: RunSpec, source: str) -> RunResult:
    if spec.idea_id == "idea-crash":
        return RunResult(
            spec.run_id, spec.tier, spec.seed, spec.champion_version, RunStatus.CRASH,
            idea_id=spec.idea_id, reason="boom", log_tail="Traceback\nboom",
        )  # fmt: skip
    return ok_runner(spec, source)


def options(path: Path | None, target: str = "bytelm") -> HostOptions:
    return HostOptions(
        count=1, name_prefix="h", personas=(Persona.EXPLORER,), max_in_flight=2, seed=0,
        editable="recipe.py", target=target, top_tier=1,
        groups=(BrainGroup("heuristic", 1),), snapshot_path=path,
    )  # fmt: skip


async def publish(nc: Client, messages: list[Message]) -> None:
    js = nc.jetstream()
    for message in messages:
        if isinstance(message, Idea):  # the host's researcher wrote them
            message = dataclasses.replace(message, author=AUTHOR)
        await publish_event(js, message)


async def host_once(nc: Client, path: Path | None, target: str = "bytelm") -> Researcher:
    stop = asyncio.Event()
    (researcher,) = await asyncio.wait_for(run_host(nc, options(path, target), stop), 60)
    return researcher


def learned(r: Researcher) -> dict[str, object]:
    h = r.history
    return {
        "findings": dict(h.findings),
        "sources": dict(h.sources),
        "tried": {v: set(t) for v, t in h.tried.items() if t},
        "failures": list(h.failures),
        "rejected": dict(h.rejected),
        "notes": list(r.notes),
    }


@pytest.fixture(autouse=True)
def no_ticks(monkeypatch: pytest.MonkeyPatch) -> None:
    async def caught_up_then_stop(*args: object) -> None:
        stop = args[3]
        assert isinstance(stop, asyncio.Event)
        stop.set()

    monkeypatch.setattr(host, "_tick", caught_up_then_stop)


async def test_a_restart_reads_only_the_events_after_its_snapshot(
    nc: Client, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sim = started(make_ladder(tmp_path))
    for i, change in enumerate(["LR = 1.0->LR = 1.3", "WD = 0.1->WD = 0.3"]):
        sim.propose(f"idea-{i}", change)
        sim.run_all()
    first = len(sim.log)
    await publish(nc, sim.log)
    snap = tmp_path / "run" / "agents-h.snapshot"
    snap.parent.mkdir(exist_ok=True)
    before = await host_once(nc, snap)
    assert snap.exists() and before.notes  # it was told how its ideas did

    more = Sim(sim.ladder, crashing)
    more.propose("idea-crash", "WD = 0.1->WD = 0.6")
    more.propose("idea-late", "LR = 1.0->LR = 3.0")
    more.run_all()
    await publish(nc, more.log)
    caplog.set_level(logging.INFO, logger="agents.host")
    restarted = await host_once(nc, snap)
    (line,) = [r.getMessage() for r in caplog.records if "from its snapshot" in r.getMessage()]
    at, last = (int(n) for n in re.findall(r"\d+", line.rpartition("at event")[2]))
    assert first <= at <= first + 2  # the first host's events (it announced itself too)
    assert last - at >= len(more.log)  # only these were read again
    replayed = await host_once(nc, None)  # the whole stream, as before snapshots
    assert learned(restarted) == learned(replayed)
    assert "idea-crash" in {f.idea_id for f in restarted.history.failures}
    assert restarted.history.findings["idea-late"].verdict  # decided after the snapshot
    assert list(restarted.notes)[: len(before.notes)] == list(before.notes)


async def test_a_snapshot_for_another_target_is_not_used(
    nc: Client, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sim = started(make_ladder(tmp_path))
    sim.propose("idea-0", "LR = 1.0->LR = 1.3")
    sim.run_all()
    await publish(nc, sim.log)
    snap = tmp_path / "agents-h.snapshot"
    await host_once(nc, snap)
    caplog.set_level(logging.WARNING, logger="agents.host")
    other = await host_once(nc, snap, target="other")
    assert any("not used, replaying the whole stream" in r.getMessage() for r in caplog.records)
    assert not other.history.findings  # bytelm's ideas are not the other target's


def test_no_snapshot_while_an_own_idea_is_not_back_from_the_stream() -> None:
    history, budget = History("recipe.py", "bytelm"), LlmBudget()
    history.checkpoint = (7, "decision-x")
    assert checkpoint_of(history, budget, None) == (7, "decision-x")
    history.sources[1] = "LR = 1.0\n"
    history.propose(Idea("idea-mine", AUTHOR, "h", "", 1))
    assert checkpoint_of(history, budget, None) is None  # proposed, not yet read back
    history.release("idea-mine")  # never sent: gone, as a full replay would have it
    assert "idea-mine" not in history.findings
    assert checkpoint_of(history, budget, None) == (7, "decision-x")


def test_the_accounts_must_stand_at_the_same_event() -> None:
    history, budget = History("recipe.py", "bytelm"), LlmBudget()
    history.checkpoint, budget.checkpoint = (9, "llm_call-b"), (8, "llm_call-a")
    book = object()  # any book: the accounts agent folds
    assert checkpoint_of(history, budget, book) is None  # type: ignore[arg-type]
    budget.checkpoint = (9, "llm_call-b")
    assert checkpoint_of(history, budget, book) == (9, "llm_call-b")  # type: ignore[arg-type]
