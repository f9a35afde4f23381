"""The live view: rendering a hand-made snapshot, both kinds of console, and gathering a snapshot
from a real ledger and real JetStream queues."""

from __future__ import annotations

import io
import time
from dataclasses import replace

from nats.aio.client import Client
from rich.console import Console

from bus.messages import (
    AgentEvent,
    AgentEventKind,
    BudgetKind,
    ChampionChange,
    ChangeKind,
    Decision,
    Idea,
    LlmCall,
    RunSpec,
    RunStatus,
    Trace,
    Verdict,
    new_id,
)
from bus.nats_bus import enqueue_run, publish_event
from bus.subjects import JOBS_STREAM, ensure_trainer_consumer, job_subject, trainer_consumer_name
from ledger.service import LedgerService
from swarm.live_snapshot import (
    AgentRow,
    ChampionRow,
    Experiment,
    LiveSnapshot,
    Standing,
    TierQueue,
    gather_snapshot,
)
from swarm.live_view import LiveView, render
from swarm.sql_client import ask_ledger
from tests.conftest import make_result, wait_for_async

NOW = 1_700_000_000.0
HYPOTHESIS = "Raise the learning rate and lengthen the warmup so the bigger models train as well"


def snapshot(**fields: object) -> LiveSnapshot:
    values: dict[str, object] = {
        "elapsed_s": 754.0,
        "minutes": 30.0,
        "max_experiments": 500,
        "taken_at": NOW,
        "agents": (
            AgentRow("researcher-0-explorer", 2, "propose", "idea-aaa: LR 0.001→0.002", NOW - 30),
            AgentRow("researcher-1-ablator", 0),
            AgentRow("h-2-anthropic-combiner", 0, "stopped", "stopped: budget is spent", NOW - 5),
        ),
        "queues": (TierQueue(0, 17, 4), TierQueue(1, 3, 2)),
        "experiments": (
            Experiment(1, "idea-aaa", 1, 300.0, running=True, run_s=150.0, progress=0.5),
            Experiment(0, "", 2, 20.0, running=True, run_s=20.0),
            Experiment(0, "idea-bbb", 3, 5.0, running=False),
        ),
        "leaderboard": (
            Standing(1, 3, "idea-aaa", "researcher-0-explorer", HYPOTHESIS, "val_bpb", 1.2, 3),
            Standing(1, 3, "(champion)", "", "", "val_bpb", 1.23456, 6),
        ),
        "champions": (
            ChampionRow(3, "STACK", "idea-ccc", "researcher-1-ablator", HYPOTHESIS, NOW - 100),
            ChampionRow(1, "INITIAL", "", "", "", NOW - 800),
        ),
        "runs_by_status": {"OK": 40, "CRASH": 2},
        "decisions_by_verdict": {"PROMOTE": 3, "REJECT": 5},
    }
    values.update(fields)
    return LiveSnapshot(**values)  # type: ignore[arg-type]


def plain_console(terminal: bool = False) -> Console:
    return Console(file=io.StringIO(), width=100, force_terminal=terminal, color_system=None)


def output(console: Console) -> str:
    return console.file.getvalue()  # type: ignore[attr-defined, no-any-return]


def test_render_shows_agents_queues_progress_leaderboard_and_champions() -> None:
    console = plain_console()
    console.print(render(snapshot()))
    text = output(console)
    assert all(len(line) <= 100 for line in text.splitlines())
    assert "elapsed 12m34s/30m00s" in text and "experiments 42/500" in text
    assert "champion v3" in text and "CRASH 2" in text and "REJECT 5" in text
    assert "researcher-0-explorer" in text and "researcher-1-ablator" in text
    assert "explorer" in text and "idea-aaa: LR 0.001→0.002" in text
    assert "heuristic" in text and "anthropic" in text and "stopped: budget is spent" in text
    assert "17" in text and "running" in text
    assert "██████░░░░░░  50% 2m30s" in text  # tier 1's running experiment, half way
    assert "lower is better" in text
    assert "running 20s" in text and "queued 5s" in text and "baseline" in text
    assert "(champion)" in text and "1.2346" in text and "Raise the learning rate" in text
    assert "STACK" in text and "INITIAL" in text and "idea-ccc" in text


def test_render_of_an_empty_snapshot_says_what_went_wrong() -> None:
    console = plain_console()
    console.print(render(LiveSnapshot(3.0, None, 0, error="ledger: no ledger is answering")))
    text = output(console)
    assert "elapsed 3s" in text and "champion v0" in text
    assert "ledger: no ledger is answering" in text


def test_plain_view_prints_one_status_line_per_update() -> None:
    console = plain_console()
    view = LiveView(console)
    view.update(snapshot())
    view.update(snapshot(runs_by_status={"OK": 41, "CRASH": 2}))
    view.close()
    view.close()
    view.update(snapshot())  # after close: ignored
    lines = output(console).splitlines()
    assert len(lines) == 2
    assert "runs 42/500" in lines[0] and "runs 43/500" in lines[1]
    assert "tier0 17q/4r" in lines[0] and "champion v3" in lines[0]
    assert "best@tier1 idea-aaa 1.2000" in lines[0]


def test_terminal_view_draws_in_place_and_closes_once() -> None:
    console = plain_console(terminal=True)
    view = LiveView(console)
    view.update(snapshot())
    view.update(snapshot(queues=(TierQueue(0, 99, 4),)))
    view.close()
    view.close()
    text = output(console)
    assert "researcher-0-explorer" in text and "99" in text


async def test_gather_snapshot_without_a_ledger_reports_the_error_and_the_queues(
    nc: Client,
) -> None:
    await ensure_trainer_consumer(nc.jetstream(), 1)
    result = await gather_snapshot(nc, time.monotonic() - 5, None, 0, timeout_s=1)
    assert result.error.startswith("ledger:")
    assert result.elapsed_s >= 5 and result.agents == ()
    assert result.queues == (TierQueue(1, 0, 0),)
    # Just after `swarm start` the ledger is still starting: said so, not read as a failure.
    assert result.error == "ledger: starting" and "| ledger: starting" in result.line()
    later = await gather_snapshot(nc, time.monotonic() - 60, None, 0, timeout_s=1)
    assert later.error == "ledger: no ledger is answering on the bus (is it restarting?)"
    assert "error: ledger: no ledger is answering" in later.line()


async def test_gather_snapshot_reads_the_ledger_and_the_queues(
    nc: Client, ledger: LedgerService
) -> None:
    js = nc.jetstream()
    r0, r1 = "researcher-0-explorer", "researcher-1-ablator"
    t = time.time()
    for agent, role in ((r0, "researcher"), (r1, "researcher"), ("trainer-0", "trainer")):
        await publish_event(js, AgentEvent(new_id("ev"), agent, AgentEventKind.JOINED, role=role))
    ideas = [("idea-a", r0), ("idea-b", r0), ("idea-c", r1)]
    for idea_id, author in ideas:
        await publish_event(js, Idea(idea_id, author, f"{idea_id} {HYPOTHESIS}", "", 1))
    await publish_event(js, Trace(new_id("tr"), r0, "propose", proposed="idea-b", created_at=t - 9))
    await publish_event(js, Trace(new_id("tr"), r0, "propose", proposed="idea-a: LR", created_at=t))
    spent = "stopped proposing: the swarm's LLM budget is spent ($1.0100 of $1.00)"
    await publish_event(js, Trace(new_id("tr"), r1, "stopped", why=spent, created_at=t))
    await publish_event(
        js,
        LlmCall(
            new_id("llm"), r1, "propose", "anthropic", "m", "ok", "p", "x", "", "", cost_usd=1.01
        ),
    )
    # idea-a waits for a retest (in play), idea-b is rejected, idea-c was stacked into v2.
    for idea_id, verdict in (("idea-a", Verdict.RETEST), ("idea-b", Verdict.REJECT)):
        await publish_event(js, Decision(new_id("d"), idea_id, 0, verdict, 1, "rule"))
    await publish_event(js, Decision(new_id("d"), "idea-c", 1, Verdict.PROMOTE, 1, "rule"))
    await publish_event(js, ChampionChange(1, 0, ChangeKind.INITIAL, "sha1"))
    await publish_event(js, ChampionChange(2, 1, ChangeKind.STACK, "sha2", idea_id="idea-c"))
    ok, crash = RunStatus.OK, RunStatus.CRASH
    results = [  # (tier, champion version, idea, status, metric): each ran ~50 s
        make_result(
            i,
            tier=tier,
            champion_version=v,
            idea_id=idea,
            status=status,
            metric=metric,
            train_seconds=40.0,
            startup_seconds=6.0,
            eval_seconds=4.0,
        )
        for i, (tier, v, idea, status, metric) in enumerate(
            [
                (0, 1, "idea-a", ok, 1.5),
                (0, 2, "", ok, 1.4),
                (0, 2, "idea-a", ok, 1.3),
                (1, 1, "idea-c", ok, 1.1),
                (0, 2, "", crash, None),
            ]
        )
    ]
    for result in results:
        await publish_event(js, result)
    # Tier 0 has trainers: three jobs queued five minutes ago, then two taken (running); the
    # first started 25 s ago (its first start, 200 s ago, was on a trainer that died), the
    # second's start is not known. Tier 2 is capped: its older RunSpec waits in the ladder (no
    # job, scale_ladder/dispatch.py) while a newer one, sent first, runs.
    await ensure_trainer_consumer(js, 0)
    specs = [
        RunSpec(new_id("run"), 0, seed, 2, BudgetKind.SECONDS, 1.0, created_at=t - 300 + seed)
        for seed in range(3)
    ]
    for spec in specs:
        await enqueue_run(js, spec)
    waiting, sent = (
        RunSpec(new_id("run"), 2, seed, 2, BudgetKind.SECONDS, 1.0, "idea-a", created_at=t - ago)
        for seed, ago in ((0, 100), (1, 50))
    )
    await publish_event(js, waiting)
    await ensure_trainer_consumer(js, 2, 1)
    await enqueue_run(js, sent)
    trainer = await js.pull_subscribe_bind(trainer_consumer_name(0), JOBS_STREAM)
    taken = await trainer.fetch(2, timeout=5)
    assert [m.subject for m in taken] == [job_subject(0)] * 2
    top = await js.pull_subscribe_bind(trainer_consumer_name(2), JOBS_STREAM)
    taken += await top.fetch(1, timeout=5)
    starts = (("started-a", specs[0], 200), ("started-b", specs[0], 25), ("started-c", sent, 10))
    for key, spec, ago in starts:
        start = AgentEvent(key, "trainer-0", AgentEventKind.STARTED, "trainer", spec.run_id)
        await publish_event(js, replace(start, created_at=t - ago))

    async def all_in() -> bool:
        sql = (
            "SELECT (SELECT count(*) FROM runs) + (SELECT count(*) FROM run_specs)"
            " + (SELECT count(*) FROM llm_calls)"
            " + (SELECT count(*) FROM agent_events WHERE kind = 'STARTED') AS n"
        )
        n = (await ask_ledger(nc, sql, 5)).table.column("n")[0].as_py()
        return bool(n == len(results) + 9)

    await wait_for_async(all_in, 20)
    found = await gather_snapshot(nc, time.monotonic() - 60, 10.0, 100)
    assert found.error == ""
    assert found.runs_by_status == {"OK": 4, "CRASH": 1} and found.experiments_run == 5
    assert found.decisions_by_verdict == {"RETEST": 1, "REJECT": 1, "PROMOTE": 1}
    assert [(a.name, a.in_play, a.last_proposed) for a in found.agents] == [
        (r0, 1, "idea-a: LR"),
        (r1, 0, f"stopped: {spent}"),  # why it no longer proposes
    ]
    assert (found.llm_calls, found.llm_usd) == (1, 1.01) and "LLM $1.0100 (1 calls)" in found.line()
    # The run waiting in the ladder is queued; the one sent after it runs.
    assert found.queues == (TierQueue(0, 1, 2), TierQueue(2, 1, 1))
    running = [e for e in found.experiments if e.running]
    assert [(e.tier, e.seed, e.idea_id) for e in running] == [
        (2, 1, "idea-a"),
        (0, 0, ""),
        (0, 1, ""),
    ]
    _, started, unknown = running
    # Measured from its latest start (~25 s of ~50 s), not from its RunSpec (300 s: 0.99).
    assert started.age_s >= 300 and started.run_s is not None and 24 < started.run_s < 40
    assert started.progress is not None and 0.4 < started.progress < 0.8
    assert unknown.age_s >= 299 and (unknown.run_s, unknown.progress) == (None, None)
    assert len(found.experiments) == 5  # the rest are queued, with no progress estimate
    assert all(e.progress is None for e in found.experiments if not e.running)
    console = plain_console()
    console.print(render(found))
    text = output(console)
    shown = [line.split("baseline")[1].split() for line in text.splitlines() if "baseline" in line]
    assert shown[0][0] == "0" and "m" not in shown[0][-1]  # its run time: seconds, not minutes
    assert shown[1] == ["1", "running"]  # no start known: no bar, no time
    assert shown[2][:2] == ["2", "queued"] and shown[2][2].startswith("4m")
    # Latest champion per tier: tier 1 at v1, tier 0 at v2 (v1's row is left out).
    assert [(b.tier, b.champion_version, b.idea_id) for b in found.leaderboard] == [
        (1, 1, "idea-c"),
        (0, 2, "idea-a"),
        (0, 2, "(champion)"),
    ]
    assert found.leaderboard[0].author == r1 and found.leaderboard[0].n_runs == 1
    assert [(c.version, c.kind, c.idea_id) for c in found.champions] == [
        (2, "STACK", "idea-c"),
        (1, "INITIAL", ""),
    ]
    assert found.champion_version == 2 and "best@tier1 idea-c 1.1000" in found.line()
    for msg in taken:
        await msg.ack()


async def test_the_leaderboard_shows_the_best_first_in_the_targets_direction(
    nc: Client, ledger: LedgerService
) -> None:
    js = nc.jetstream()
    scores = [("", 1.4), ("idea-a", 1.3), ("idea-b", 1.6)]  # tier 0, champion v1
    for i, (idea, metric) in enumerate(scores):
        await publish_event(js, make_result(i, tier=0, idea_id=idea, metric=metric))

    async def all_in() -> bool:
        return len((await ask_ledger(nc, "SELECT run_id FROM runs", 5)).table) == len(scores)

    await wait_for_async(all_in, 20)
    lowest_first = await gather_snapshot(nc, time.monotonic(), None, 0)
    assert [b.idea_id for b in lowest_first.leaderboard] == ["idea-a", "(champion)", "idea-b"]
    highest_first = await gather_snapshot(nc, time.monotonic(), None, 0, lower_is_better=False)
    assert [b.idea_id for b in highest_first.leaderboard] == ["idea-b", "(champion)", "idea-a"]
    assert "best@tier0 idea-b 1.6000" in highest_first.line()
    console = plain_console()
    console.print(render(highest_first))
    assert "higher is better" in output(console)


def test_a_long_proposal_gives_way_to_the_researchers_other_columns() -> None:
    """A model brain's proposal moves many constants: its text wraps, and the brain, persona
    and in-play columns stay (they had disappeared behind it)."""
    long = "idea-ddd: " + ", ".join(f"CONSTANT_{i} 0.001→0.002" for i in range(8))
    agents = (AgentRow("my-host-0-portfolio-explorer", 1, "propose", long, NOW - 30),)
    console = plain_console()
    console.print(render(snapshot(agents=agents)))
    row = next(
        line for line in output(console).splitlines() if "my-host-0-portfolio-explorer" in line
    )
    assert row.split()[:4] == ["my-host-0-portfolio-explorer", "portfolio", "explorer", "1"], row
