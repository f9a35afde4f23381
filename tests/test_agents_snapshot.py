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
from agents.strategy_book import StrategyBook
from bus.messages import (
    ChampionChange,
    ChangeKind,
    Idea,
    LlmCall,
    Message,
    RunResult,
    RunSpec,
    RunStatus,
    StrategyVersion,
)
from bus.nats_bus import publish_event
from swarm.agents_process import _file_safe
from tests.ladder_sim import Sim, make_ladder, ok_runner, started

AUTHOR = "h-0-explorer"  # the host's one researcher: prefix h, index 0, persona explorer


def crashing(spec: RunSpec, source: str) -> RunResult:
    if spec.idea_id == "idea-crash":
        return RunResult(
            spec.run_id, spec.tier, spec.seed, spec.champion_version, RunStatus.CRASH,
            idea_id=spec.idea_id, reason="boom", log_tail="Traceback\nboom",
        )  # fmt: skip
    return ok_runner(spec, source)


def options(path: Path | None, target: str = "bytelm", count: int = 1) -> HostOptions:
    return HostOptions(
        count=count, name_prefix="h", personas=(Persona.EXPLORER,), max_in_flight=2, seed=0,
        editable="recipe.py", target=target, top_tier=1,
        groups=(BrainGroup("heuristic", count),), snapshot_path=path,
    )  # fmt: skip


async def publish(nc: Client, messages: list[Message]) -> None:
    js = nc.jetstream()
    for message in messages:
        if isinstance(message, Idea):  # the host's researcher wrote them
            message = dataclasses.replace(message, author=AUTHOR)
        await publish_event(js, message)


async def host_once(
    nc: Client, path: Path | None, target: str = "bytelm", count: int = 1
) -> Researcher:
    stop = asyncio.Event()
    team = await asyncio.wait_for(run_host(nc, options(path, target, count), stop), 60)
    return team[0]


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


def stop_when_caught_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host run by run_host stops as soon as it has caught up, before any researcher acts."""

    async def caught_up_then_stop(*args: object) -> None:
        stop = args[3]
        assert isinstance(stop, asyncio.Event)
        stop.set()

    monkeypatch.setattr(host, "_tick", caught_up_then_stop)


@pytest.fixture(autouse=True)
def no_ticks(monkeypatch: pytest.MonkeyPatch) -> None:
    stop_when_caught_up(monkeypatch)


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
    await host_once(nc, snap)  # writes a bytelm host's snapshot again
    caplog.clear()
    await host_once(nc, snap, count=2)  # a researcher more: its memory is a replay's to make
    assert any("its researchers were 1, now 2" in r.getMessage() for r in caplog.records)


def test_no_snapshot_while_an_own_idea_is_not_back_from_the_stream() -> None:
    history, budget = History("recipe.py", "bytelm"), LlmBudget()
    history.checkpoint = (7, "decision-x")
    assert checkpoint_of(history, budget, None) == (7, "decision-x")
    history.observe(ChampionChange(1, 0, ChangeKind.INITIAL, "sha", source="LR = 1.0\n"))
    before = {v: set(t) for v, t in history.tried.items()}
    second_look = Idea("idea-mine", AUTHOR, "h", "", 1, parent_ids=("idea-old",), entry_tier=1)
    history.propose(second_look, "fp-mine")
    assert checkpoint_of(history, budget, None) is None  # proposed, not yet read back
    assert "fp-mine" in history.tried[1] and history.looked
    history.release("idea-mine")  # never sent: gone, as a full replay would have it
    assert "idea-mine" not in history.findings
    assert {v: set(t) for v, t in history.tried.items()} == before  # its recipe is untried
    assert not history.looked  # and the second look not taken
    assert checkpoint_of(history, budget, None) == (7, "decision-x")


def test_an_own_idea_takes_its_place_in_stream_order_when_it_comes_back() -> None:
    history = History("recipe.py", "bytelm")
    history.observe(ChampionChange(1, 0, ChangeKind.INITIAL, "sha", source="LR = 1.0\n"))
    mine, other = Idea("idea-mine", AUTHOR, "h", "", 1), Idea("idea-other", "else", "h", "", 1)
    history.propose(mine, "fp-mine")
    history.observe(other)  # in the stream before mine
    history.observe(mine)
    assert list(history.findings) == ["idea-other", "idea-mine"]  # as a replay folds them


def test_the_accounts_must_stand_at_the_same_event(tmp_path: Path) -> None:
    history, budget = History("recipe.py", "bytelm"), LlmBudget()
    history.checkpoint, budget.checkpoint = (9, "llm_call-b"), (8, "llm_call-a")
    book = StrategyBook(tmp_path / "strategies", tmp_path / "seeds")  # the accounts agent folds
    assert checkpoint_of(history, budget, book) is None
    budget.checkpoint = (9, "llm_call-b")
    assert checkpoint_of(history, budget, book) == (9, "llm_call-b")


def test_no_snapshot_while_an_own_llm_call_or_strategy_is_not_back(tmp_path: Path) -> None:
    """Counted and known as they are made: a host stopped with the bus away would have
    kept spend and versions the stream never had."""
    history, budget = History("recipe.py", "bytelm"), LlmBudget()
    book = StrategyBook(tmp_path / "strategies", tmp_path / "seeds")
    history.checkpoint = budget.checkpoint = (9, "idea-x")
    call = LlmCall(
        "call-1", AUTHOR, "propose", "anthropic", "m", "ok", "p", "q", "", "", cost_usd=2.5
    )
    budget.observe(call, own=True)
    assert checkpoint_of(history, budget, book) is None and budget.spent_usd == 2.5
    budget.observe(call)  # back from the stream: counted once
    assert checkpoint_of(history, budget, book) == (9, "idea-x") and budget.spent_usd == 2.5
    version = StrategyVersion("strategy-a-v1", AUTHOR, 1, "text", "sha", "initial", "first")
    book.observe(version, own=True)
    assert checkpoint_of(history, budget, book) is None
    book.observe(version)
    assert checkpoint_of(history, budget, book) == (9, "idea-x")


def test_host_names_that_read_alike_get_snapshots_of_their_own() -> None:
    names = ["lab 1", "lab_1", "gpu:0", "gpu/0", "x" * 100 + "a", "x" * 100 + "b"]
    assert len({_file_safe(n) for n in names}) == len(names)
