"""The whole research loop through real processes: `swarm start --agents 3` on a project where a
known-good change exists (the learning rate is far below its optimum), a two-tier ladder of
sub-second runs. Ideas are proposed, admitted, run, decided, promoted and stacked; the ledger
answers SQL while it runs; the summary and the report are written at exit; nothing is left."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from tests.conftest import RunningSwarm, run_swarm, wait_for
from tests.helpers_process import alive, pids_matching

PARAMS = """\
LEARNING_RATE = 0.01  # step size (its optimum is near 0.1)
WARMUP_FRACTION = 0.1  # share of steps spent warming up
BATCH_SIZE = 16  # examples per step
"""

RUN = """\
import math, os, random
from params import BATCH_SIZE, LEARNING_RATE, WARMUP_FRACTION

seed = int(os.environ["SWARM_SEED"])
noise = random.Random(seed).gauss(0, 0.01)  # shared by every recipe on this seed
# and a little of each recipe's own, as training has: a gain exactly equal on every seed is no
# noise estimate (scale_ladder/rules.py), and would never pass the gate
own = random.Random(f"{seed} {LEARNING_RATE} {WARMUP_FRACTION} {BATCH_SIZE}").gauss(0, 0.002)
loss = 1.0 + 0.3 * (math.log10(LEARNING_RATE) + 1.0) ** 2 + 0.1 * abs(WARMUP_FRACTION - 0.1)
loss += 0.05 * abs(BATCH_SIZE - 16) / 16 + noise + own
print(f"val_loss: {loss:.6f}")
"""

TIER = """
[[tier]]
name = "{name}"
depth = {depth}
width = 32
context = 16
budget_kind = "seconds"
budget = 5
time_limit_s = 30
eval_tokens = 64
seeds = 2
max_seeds = 3
min_improvement = 0.001
"""


def swarm_project(
    tmp_path: Path,
    agents: int = 3,
    extra: str = "",
    run: str = RUN,
    tier: str = TIER,
    top: str = "",  # more settings of the top tier
) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    (project / "params.py").write_text(PARAMS)
    (project / "run.py").write_text(run)
    ladder = tmp_path / "ladder.toml"
    small, big = tier.format(name="small", depth=1), tier.format(name="big", depth=2)
    ladder.write_text(extra + small + big + top)
    config = tmp_path / "swarm.toml"
    config.write_text(
        f"""
[ledger]
snapshot_interval_s = 0.5
restart_delay_s = 0.2
[status]
interval_s = 0.5
[trainers]
count = 2
[agents]
count = {agents}
[target]
kind = "command"
project = "{project}"
edit = "params.py"
run = "{sys.executable} run.py"
metric = "val_loss"
[ladder]
path = "{ladder}"
"""
    )
    return config


def sql(swarm: RunningSwarm, query: str) -> list[dict[str, object]]:
    done = run_swarm(swarm.workspace.root, "sql", query, "--format", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


@pytest.mark.timeout(240)
def test_three_agents_promote_a_real_win_through_two_tiers(tmp_path: Path) -> None:
    # The top tier capped at one, as shipped: its jobs wait in the ladder and go out in turn,
    # through the bus's role permissions (a ladder refused the consumer's state sent none).
    swarm = RunningSwarm(tmp_path / "ws", swarm_project(tmp_path, top="max_concurrent = 1\n"))
    try:
        swarm.wait_ready()

        def stacked() -> bool:
            runs = sql(swarm, "select count(*) as n from runs")[0]["n"]
            versions = sql(swarm, "select count(*) as n from champions")[0]["n"]
            return int(runs) >= 10 and int(versions) >= 2  # type: ignore[call-overload]

        wait_for(stacked, timeout=150, interval=1.0)
        agents = sql(swarm, "select agent_id from agents where role = 'researcher'")
        assert len(agents) == 3
        traces = sql(swarm, "select agent, why, idea_id from traces where action = 'propose'")
        assert traces and all(t["why"] and t["idea_id"] for t in traces)
    finally:
        output = swarm.stop()
    assert "experiments run:" in output and "tier 1 verdicts:" in output
    lineage = run_swarm(swarm.workspace.root, "champion", "show")
    assert lineage.returncode == 0 and "STACK" in lineage.stdout
    climbed = run_swarm(
        swarm.workspace.root,
        "sql",
        "select idea_id from decisions where verdict = 'PROMOTE' and tier = 1",
        "--format",
        "json",
    )
    assert json.loads(climbed.stdout), "no idea passed the top tier"
    diff = run_swarm(swarm.workspace.root, "champion", "diff")
    assert diff.returncode == 0 and "LEARNING_RATE" in diff.stdout + json.dumps(lineage.stdout)
    reports = swarm.workspace.root / "reports"
    assert (reports / "progress.png").stat().st_size > 1000
    assert (
        "stacked" in (reports / "report.html").read_text()
        or "STACK" in (reports / "report.html").read_text()
    )


@pytest.mark.timeout(240)
def test_ladder_killed_mid_run_rebuilds_its_state_and_people_approve_and_revert(
    tmp_path: Path,
) -> None:
    """require_approval: a top-tier winner is HELD; the ladder is killed with SIGKILL and comes
    back knowing it (replayed from the stream), so `swarm approve` stacks it; `swarm champion
    revert 1` makes v1's recipe the champion again. No idea gets two final verdicts."""
    config = swarm_project(tmp_path, agents=2, extra="require_approval = true\n")
    swarm = RunningSwarm(tmp_path / "ws", config)
    root = swarm.workspace.root
    try:
        swarm.wait_ready()
        wait_for(lambda: "idea-" in run_swarm(root, "review").stdout, timeout=150, interval=1.0)
        (ladder,) = pids_matching(str(root), "ladder", last_arg="ladder")
        os.kill(ladder, signal.SIGKILL)
        wait_for(lambda: not alive(ladder), timeout=10)
        held = sql(swarm, HELD)[0]["idea_id"]
        assert isinstance(held, str)

        def approved() -> bool:  # the restarted ladder must know the idea is HELD
            done = run_swarm(root, "approve", held)
            return done.returncode == 0 and "champion-2" in done.stdout

        wait_for(approved, timeout=60, interval=1.0)
        (ladder_again,) = pids_matching(str(root), "ladder", last_arg="ladder")
        assert ladder_again != ladder
        refused = run_swarm(root, "approve", held)
        assert refused.returncode == 2 and "not waiting for approval" in refused.stderr
        reverted = run_swarm(root, "champion", "revert", "1")
        assert reverted.returncode == 0, reverted.stderr
        lineage = sql(swarm, "select version, kind, idea_id from champions order by version")
        assert [r["kind"] for r in lineage[:3]] == ["INITIAL", "STACK", "REVERT"]
        assert lineage[1]["idea_id"] == held
        export = tmp_path / "a" / "v1.py"  # a folder not there yet (the README's a/recipe.py)
        assert run_swarm(root, "champion", "export", "1", "--out", str(export)).returncode == 0
        assert export.read_text() == PARAMS
        twice = sql(
            swarm,
            "select idea_id from decisions where verdict in ('PROMOTE', 'REJECT') "
            "and decided_by = 'ladder' group by idea_id, champion_version, tier "
            "having count(distinct verdict) > 1",
        )
        assert twice == []
        stale_specs = sql(swarm, "select count(*) - count(distinct run_id) as n from run_specs")
        assert stale_specs[0]["n"] == 0
    finally:
        swarm.stop()


HELD = "select idea_id from decisions where verdict = 'HELD' order by created_at limit 1"


KEY = "sk-ant-e2e-SECRET-0071"
LLM_VALUES = ("0.03", "0.05", "0.1", "0.02", "0.07", "0.04", "0.08", "0.06", "0.15", "0.2")
META_ANSWER = """REASON: raising the learning rate keeps passing; keep going.
<strategy>
# Strategy
Keep raising LEARNING_RATE toward 0.1; leave BATCH_SIZE alone.
</strategy>"""


class ClaudeStandIn:
    """What the stub API answers: a malformed answer first (so one repair round runs), then
    SEARCH/REPLACE edits moving LEARNING_RATE through a list of values; the meta-agent's
    requests get a new strategy."""

    def __init__(self) -> None:
        self.proposals = 0

    def __call__(self, api: str, request: dict[str, object], headers: dict[str, str]) -> object:
        from tests.llm_stub_server import Reply

        text = json.dumps(request)
        if "You coach one researcher" in text:
            return Reply(text=META_ANSWER)
        self.proposals += 1
        if self.proposals == 1:
            return Reply(text="I would try a bigger learning rate.")  # no edits: repaired
        value = LLM_VALUES[(self.proposals - 2) % len(LLM_VALUES)]
        current = next(line for line in PARAMS.splitlines() if line.startswith("LEARNING_RATE"))
        search = current
        for line in str(request.get("system", "")).split("\\n"):
            if line.startswith("LEARNING_RATE ="):
                search = line  # the champion's line, as the prompt shows it
        answer = (
            f"HYPOTHESIS: LEARNING_RATE {value} trains further in the same steps.\n"
            f"params.py\n<<<<<<< SEARCH\n{search}\n=======\n"
            f"LEARNING_RATE = {value}  # step size\n>>>>>>> REPLACE\n"
        )
        return Reply(text=answer)


@pytest.mark.timeout(240)
def test_a_mixed_swarm_of_a_claude_researcher_and_a_heuristic_one_records_every_llm_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--brain anthropic:1,heuristic:1` against a stub of the Messages API: both kinds of
    researcher propose; every LLM call (the repaired one too), its cost and the meta-agent's
    strategy rewrite reach the ledger; an LLM idea's reasoning reads back in order; the key is
    nowhere in the workspace."""
    from tests.llm_stub_server import StubLlmServer

    repo = Path(__file__).resolve().parent.parent
    with StubLlmServer(ClaudeStandIn()) as stub:  # type: ignore[arg-type]
        config = swarm_project(tmp_path, agents=2)
        agents = (
            '[agents]\nbrain = "anthropic:1,heuristic"\n'
            f'program = "{repo / "configs" / "program.md"}"\n'
            f'strategies = "{repo / "configs" / "strategies"}"\n'
        )
        config.write_text(
            config.read_text().replace("[agents]\n", agents)
            + f"""
[llm]
anthropic_base_url = "{stub.url}"
prices = "{repo / "configs" / "llm_prices.toml"}"
cooldown_s = 0.5
[meta]
interval_s = 2
min_outcomes = 2
"""
        )
        monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
        swarm = RunningSwarm(tmp_path / "ws", config)
        root = swarm.workspace.root
        try:
            swarm.wait_ready()

            def rewritten() -> bool:
                meta = sql(swarm, "select count(*) as n from strategies where author like '%meta'")
                return int(meta[0]["n"]) >= 1  # type: ignore[call-overload]

            wait_for(rewritten, timeout=150, interval=1.0)
        finally:
            swarm.stop()
    # The stopped swarm's ledger file, as it was left: nothing may be missing from it.
    calls = sql(swarm, "select * from llm_calls order by created_at")
    decided = sql(
        swarm,
        "select d.idea_id from decisions d join ideas i using (idea_id) "
        "where i.author like '%-anthropic-%' limit 1",
    )
    authors = sql(swarm, "select distinct author from ideas order by author")
    costs = sql(swarm, "select * from llm_costs")
    reasoning = sql(
        swarm,
        "select step, text from idea_reasoning where idea_id = "
        f"'{decided[0]['idea_id']}' order by happened_at",
    )
    hit_rates = sql(swarm, "select * from strategy_hit_rates where version = 2")
    assert {a["author"] for a in authors} == {"local-0-anthropic-explorer", "local-1-exploiter"}
    first, repaired = calls[0], calls[1]
    assert (first["status"], repaired["purpose"], repaired["status"]) == ("refused", "repair", "ok")
    assert first["response"] == "I would try a bigger learning rate." and first["error"]
    assert all(c["cost_usd"] > 0 and c["prefix_sha"] for c in calls)
    assert any(c["purpose"] == "meta" for c in calls)
    assert sum(c["cost_usd"] for c in costs) == pytest.approx(sum(c["cost_usd"] for c in calls))
    steps = [r["step"] for r in reasoning]
    assert steps[0].startswith("prompt (propose)") and any(s.startswith("decision") for s in steps)
    assert any(
        s.startswith("answer (repair, ok)") or s.startswith("answer (propose, ok)") for s in steps
    )
    assert hit_rates and hit_rates[0]["agent"] == "local-0-anthropic-explorer"
    assert (
        (root / "strategies" / "local-0-anthropic-explorer.md")
        .read_text()
        .startswith("# Strategy\nKeep raising")
    )
    leaked = [p for p in root.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]
    assert leaked == []


# The seed's noise only, the same for every recipe: pairing removes all of it (a newcomer's
# first script), so no paired comparison has a noise estimate.
SEED_NOISE_ONLY = RUN.replace(" + own\n", "\n")


@pytest.mark.timeout(240)
def test_gains_with_no_noise_estimate_are_explained_and_a_deterministic_tier_stacks_them(
    tmp_path: Path,
) -> None:
    assert SEED_NOISE_ONLY != RUN
    unclear = RunningSwarm(tmp_path / "ws", swarm_project(tmp_path, agents=1, run=SEED_NOISE_ONLY))
    try:
        unclear.wait_ready()
        query = "select count(*) as n from decisions where rule like '%equal on every seed%'"
        wait_for(lambda: int(sql(unclear, query)[0]["n"]) > 0, timeout=150, interval=1.0)  # type: ignore[call-overload]
    finally:
        output = unclear.stop()
    assert "rejected with no noise estimate" in output, output
    assert "declare the tier `deterministic = true`" in output
    which = next(line for line in output.splitlines() if line.strip().startswith("which:"))
    command = which.split("which: ", 1)[1]
    assert "sql" in command and "equal on every seed" in command

    exact = TIER.replace("seeds = 2\nmax_seeds = 3\n", "deterministic = true\n")
    again = tmp_path / "again"
    again.mkdir()
    declared = RunningSwarm(
        again / "ws", swarm_project(again, agents=1, run=SEED_NOISE_ONLY, tier=exact)
    )
    try:
        declared.wait_ready()
        stacks = "select count(*) as n from champions where kind = 'STACK'"
        wait_for(lambda: int(sql(declared, stacks)[0]["n"]) > 0, timeout=150, interval=1.0)  # type: ignore[call-overload]
    finally:
        declared.stop()
