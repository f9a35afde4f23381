"""`swarm audit`: the ledger's rows read back as the messages they were, and every kind of damage
a crash could do to the record (a lost result, an experiment or decision made twice, a broken
champion lineage, a ladder that acted on less than the ledger holds) is found and named."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from bus.messages import (
    AgentEvent,
    AgentEventKind,
    ChampionChange,
    Decision,
    Message,
    RunResult,
    RunSpec,
    Trace,
    Verdict,
    new_id,
)
from ledger.duckdb_store import LedgerStore, open_database
from ledger.readback import KIND_ORDER, read_messages
from ledger.schema import TIMESTAMP_FIELDS
from swarm.audit import Audit, audit_ledger
from tests.conftest import run_swarm
from tests.ladder_sim import Sim, first_tries_fail, make_ladder, started


def a_swarm_history(tmp_path: Path) -> list[Message]:
    """A real ladder's events: a win stacked into v2, a loss rejected, all drained."""
    sim = started(make_ladder(tmp_path))
    sim.propose("idea-good", "LR = 1.0->LR = 2.0")
    sim.propose("idea-bad", "WD = 0.1->WD = 0.9")
    sim.run_all()
    return sim.log


def audit(tmp_path: Path, history: list[Message], name: str = "ledger.duckdb") -> Audit:
    path = tmp_path / name
    store = LedgerStore(path)
    store.write_batch(history, list(range(1, len(history) + 1)))  # the stream's order
    store.close()
    return audit_ledger(path, make_ladder(tmp_path))


def test_rows_read_back_as_the_messages_written(tmp_path: Path) -> None:
    history = a_swarm_history(tmp_path)
    store = LedgerStore(tmp_path / "ledger.duckdb")
    store.write_batch(history, list(range(1, len(history) + 1)))
    store.close()
    con = open_database(tmp_path / "ledger.duckdb", read_only=True)
    try:
        back = read_messages(con, KIND_ORDER)
    finally:
        con.close()

    # The ledger keeps timestamps in whole microseconds.
    def stored(m: Message) -> Message:
        times = {f: int(getattr(m, f) * 1e6) / 1e6 for f in TIMESTAMP_FIELDS if hasattr(m, f)}
        return dataclasses.replace(m, **times)  # type: ignore[arg-type]

    assert back == [stored(m) for m in history]


def test_a_drained_history_is_clean(tmp_path: Path) -> None:
    report = audit(tmp_path, a_swarm_history(tmp_path))
    assert report.problems(drained=True) == [], report.summary()
    assert report.champion_version == 2 and report.run_specs == report.run_results >= 10


def test_a_lost_result_is_unfinished_work(tmp_path: Path) -> None:
    history = a_swarm_history(tmp_path)
    lost = next(m for m in history if isinstance(m, RunResult) and m.idea_id == "idea-bad")
    report = audit(tmp_path, [m for m in history if m is not lost])
    assert report.unfinished == [lost.run_id]
    assert f"unfinished run {lost.run_id}" in report.problems(drained=True)
    assert report.problems(drained=False) == []  # a swarm stopped mid-run just has work queued


def test_duplicated_experiments_and_decisions_are_named(tmp_path: Path) -> None:
    history = a_swarm_history(tmp_path)
    spec = next(m for m in history if isinstance(m, RunSpec) and m.idea_id == "idea-bad")
    reject = next(m for m in history if isinstance(m, Decision) and m.verdict is Verdict.REJECT)
    again = dataclasses.replace(spec, run_id=spec.run_id + "-again")
    twice = dataclasses.replace(reject, decision_id=reject.decision_id + "-again")
    rerun = next(m for m in history if isinstance(m, RunResult) and m.run_id == spec.run_id)
    report = audit(
        tmp_path, [*history, again, dataclasses.replace(rerun, run_id=again.run_id), twice]
    )
    assert report.duplicated == [
        f"idea-bad at v1 tier 0 seed {spec.seed}: asked for 2x, 2 successful results",
        f"idea-bad closed 2x at tier {reject.tier} on v1",
    ]


def test_a_second_try_after_a_shared_failure_is_no_duplicate(tmp_path: Path) -> None:
    """A seed that failed for every recipe once: the champion's run and the idea's are tried
    again (scale_ladder/shared_failures.py), which the audit must not call a duplicate."""
    ladder = make_ladder(tmp_path)
    sim = Sim(ladder, first_tries_fail(ladder.seed(0, 0)))
    sim.step()
    sim.propose("idea-good", "LR = 1.0->LR = 2.0")
    sim.run_all()
    assert any(m.run_id.endswith("-a1") for m in sim.log if isinstance(m, RunSpec) and m.idea_id)
    report = audit(tmp_path, sim.log)
    assert report.problems(drained=True) == [], report.summary()


def test_a_broken_lineage_is_named(tmp_path: Path) -> None:
    history = a_swarm_history(tmp_path)
    v2 = next(m for m in history if isinstance(m, ChampionChange) and m.version == 2)
    forged = dataclasses.replace(v2, source=v2.source + "EXTRA = 1\n", idea_id="idea-bad")
    report = audit(tmp_path, [forged if m is v2 else m for m in history])
    assert report.lineage == [
        "champion v2's sha does not match its source",
        "champion v2 stacks idea-bad, never promoted at the top tier",
    ]


def test_a_run_spec_naming_another_recipe_than_it_tested_is_named(tmp_path: Path) -> None:
    history = a_swarm_history(tmp_path)
    spec = next(m for m in history if isinstance(m, RunSpec) and m.idea_id == "idea-bad")
    other = "0" * 64
    report = audit(
        tmp_path, [dataclasses.replace(spec, recipe_sha=other) if m is spec else m for m in history]
    )
    made = next(m for m in history if isinstance(m, RunSpec) and m.idea_id == "idea-bad")
    assert report.replay == [
        f"{spec.run_id} names recipe {other[:12]}; its champion v1 and patch make {made.recipe_sha}"
    ]


def test_a_ladder_that_acted_on_less_than_the_ledger_holds_is_caught(tmp_path: Path) -> None:
    # An idea reached the ledger but the ladder never acted on it: a replay would admit it.
    history = a_swarm_history(tmp_path)
    idea = next(m for m in history if m.KIND == "idea")
    orphan = dataclasses.replace(idea, idea_id="idea-never-seen", champion_version=2)  # type: ignore[call-arg]
    report = audit(tmp_path, [*history, orphan])
    assert report.unfinished == []
    assert any("would still publish" in p for p in report.problems(drained=True)), report.left_to_do


def test_audit_names_what_it_cannot_check(tmp_path: Path) -> None:
    done = run_swarm(tmp_path / "ws", "audit")
    assert done.returncode == 2
    assert "no ledger in" in done.stderr and "no swarm has run there" in done.stderr


def test_an_idea_proposed_but_never_received_is_noted(tmp_path: Path) -> None:
    """A researcher traced proposing two ideas the ledger never got: one given back with a
    note (the bus refused it), one not, after which its author went quiet."""
    history = a_swarm_history(tmp_path)

    def proposed(idea_id: str, agent: str, at: float) -> Trace:
        return Trace(new_id("tr"), agent, "propose", idea_id=idea_id, created_at=at)

    refused = AgentEvent(
        new_id("ev"), "agent-1", AgentEventKind.NOTE, role="researcher",
        detail="idea-refused was never sent, so it is out of play: the bus refused it",
    )  # fmt: skip
    extra = [
        proposed("idea-good", "agent-0", 100.0),  # received: not noted
        proposed("idea-refused", "agent-1", 110.0),
        refused,
        proposed("idea-lost", "agent-2", 120.0),
        proposed("idea-late", "agent-1", 130.0),
        proposed("idea-after", "agent-1", 190.0),
    ]
    report = audit(tmp_path, [*history, *extra])
    assert report.unsent == [
        "idea-lost by agent-2: proposed, never received; its author proposed nothing after it",
        "idea-late by agent-1: proposed, never received; its author proposed again 60 s later",
        "idea-after by agent-1: proposed, never received; its author proposed nothing after it",
    ]
    assert report.problems(drained=True) == []  # a host killed mid-proposal leaves these too
    assert report.summary().endswith("unsent ideas 3")
