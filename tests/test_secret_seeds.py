"""Seeds and σ (issue 16): seeds a recipe cannot predict, and no promotion on an idea's own σ
from two or three pairs.

Seeds derive from a per-swarm secret kept in the workspace (0600, never recorded): two swarms
run different seeds, one swarm the same seeds across restarts; the champion and an idea share
them, tiers never do. Until a tier has a pooled σ_d, an idea is judged on the larger of its own
σ and a prior from the champion's spread across its seeds there. The real rules, the real
Ladder (tests/ladder_sim.py), and `swarm ladder` on a workspace against a real nats-server and
ledger.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from nats.aio.client import Client

from bus.champion_store import champion_bucket
from bus.messages import Idea, RunResult, RunSpec, Verdict
from bus.nats_bus import BusSettings, publish_event
from ledger.service import LedgerService
from recipes.patch import make_patch
from scale_ladder.ladder import Ladder
from scale_ladder.rules import Evidence, PromotionRule, decide, prior_sigma
from scale_ladder.seeds import DEFAULT_SEED_SECRET, SEED_BITS, tier_seed
from swarm.config import SwarmConfig
from swarm.ladder_process import make_ladder as make_swarm_ladder
from swarm.ladder_process import run_ladder
from swarm.sql_client import ask_ledger
from swarm.workspace import SeedSecretError, Workspace
from tests.conftest import wait_for_async
from tests.ladder_sim import Sim, champions, decisions, make_ladder, ok_result, ok_runner
from training.target_info import BYTELM

OTHER_SECRET = b"another swarm's secret, 32 bytes"


def specs_of(sim: Sim, idea_id: str = "") -> list[RunSpec]:
    return [m for m in sim.log if isinstance(m, RunSpec) and m.idea_id == idea_id]


def climbed(tmp_path: Path, secret: bytes) -> Sim:
    """A ladder under `secret` through which a real win climbs both tiers and is stacked."""
    sim = Sim(make_ladder(tmp_path, seed_secret=secret))
    sim.step()
    sim.run_all()
    sim.propose("idea-good", "LR = 1.0->LR = 2.0")
    sim.run_all()
    assert champions(sim)[-1].idea_id == "idea-good"
    return sim


# --- (a) seeds from a secret ----------------------------------------------------------------


def test_seeds_are_a_keyed_one_to_one_map_of_tier_and_index() -> None:
    grid = [(t, i) for t in range(8) for i in range(64)]
    mine = [tier_seed(t, i, b"swarm one") for t, i in grid]
    assert mine == [tier_seed(t, i, b"swarm one") for t, i in grid]  # the same, always
    assert len(set(mine)) == len(grid)  # no two (tier, i) share a seed: tiers are disjoint
    assert all(0 <= s < 1 << SEED_BITS for s in mine)  # any --seed takes them
    theirs = [tier_seed(t, i, b"swarm two") for t, i in grid]
    assert sum(a == b for a, b in zip(mine, theirs, strict=True)) <= 1  # unrelated
    old = {t * 1000 + i for t, i in grid}  # the predictable seeds of before
    assert not old & set(mine)
    with pytest.raises(ValueError, match="seed"):
        tier_seed(0, 0, b"")


def test_two_secrets_give_two_swarms_different_seeds_each_paired_within_itself(
    tmp_path: Path,
) -> None:
    ours, theirs = climbed(tmp_path, DEFAULT_SEED_SECRET), climbed(tmp_path, OTHER_SECRET)
    for sim in (ours, theirs):
        ladder = sim.ladder
        for tier in (0, 1):
            idea = {s.seed for s in specs_of(sim, "idea-good") if s.tier == tier}
            base = {s.seed for s in specs_of(sim) if s.tier == tier}
            assert idea and idea <= base  # the champion ran every seed the idea ran
            assert idea <= {ladder.seed(tier, i) for i in range(4)}
        tier0, tier1 = ({s.seed for s in sim.log if isinstance(s, RunSpec) and s.tier == t}
                        for t in (0, 1))  # fmt: skip
        assert not tier0 & tier1  # fresh seeds at every tier
    seeds = [
        {(s.tier, s.seed) for s in sim.log if isinstance(s, RunSpec)} for sim in (ours, theirs)
    ]
    assert not seeds[0] & seeds[1]


def test_a_replay_under_the_same_secret_asks_for_nothing_and_another_would(
    tmp_path: Path,
) -> None:
    """A restarted ladder rebuilds its state from the events: with the swarm's secret it has
    nothing left to do; with another one it would ask for a new baseline seed."""
    sim = climbed(tmp_path, OTHER_SECRET)
    same = make_ladder(tmp_path, seed_secret=OTHER_SECRET)
    other = make_ladder(tmp_path, seed_secret=b"a secret lost and made again")
    for ladder in (same, other):
        for message in sim.log:
            ladder.observe(message)
    assert same.act() == []
    assert any(isinstance(m, RunSpec) for m in other.act())


def with_table(tmp_path: Path, table: dict[int, float]) -> Sim:
    """A swarm where an idea changes nothing in training but subtracts a per-seed table of
    offsets, tuned offline, from its metric on the seeds the table names."""

    def tabled(spec: RunSpec, source: str) -> RunResult:
        result = ok_runner(spec, source.replace("WD = 0.1001", "WD = 0.1"))
        if "WD = 0.1001" in source and result.metric is not None:
            return ok_result(spec, result.metric - table.get(spec.seed, 0.0))
        return result

    sim = Sim(make_ladder(tmp_path, seed_secret=OTHER_SECRET), tabled)
    sim.step()
    sim.run_all()
    sim.propose("idea-table", "WD = 0.1->WD = 0.1001")
    sim.run_all()
    return sim


def test_a_per_seed_table_for_predictable_seeds_finds_none_of_them(tmp_path: Path) -> None:
    """The red team's recipe: offsets for seeds k·1000 + i that look like a consistent paired
    win. Under a secret none of its seeds comes up, and the idea is what it is: a change that
    does nothing. The same table made for the swarm's own seeds (a secret that leaked) passes:
    the secret is what stops it."""
    offsets = [0.3 + 0.002 * i for i in range(8)]
    table = {t * 1000 + i: d for t in (0, 1) for i, d in enumerate(offsets)}
    old = with_table(tmp_path, table)
    assert not {s.seed for s in specs_of(old, "idea-table")} & table.keys()
    (last,) = decisions(old, "idea-table")
    assert last.verdict is Verdict.REJECT and len(champions(old)) == 1
    ladder = make_ladder(tmp_path, seed_secret=OTHER_SECRET)
    leaked = {ladder.seed(t, i): d for t in (0, 1) for i, d in enumerate(offsets)}
    assert champions(with_table(tmp_path, leaked))[-1].idea_id == "idea-table"


def test_a_workspace_makes_its_secret_once_private_and_keeps_it(tmp_path: Path) -> None:
    workspace = Workspace(tmp_path / "ws")
    secret = workspace.seed_secret()
    path = workspace.seed_secret_file
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and len(secret) == 32
    assert Workspace(tmp_path / "ws").seed_secret() == secret  # a restart reads it again
    assert Workspace(tmp_path / "other").seed_secret() != secret
    path.chmod(0o644)  # loosened by hand: tightened again when read
    assert workspace.seed_secret() == secret and stat.S_IMODE(path.stat().st_mode) == 0o600
    path.write_text("not a secret\n")  # damaged: named, never silently replaced
    with pytest.raises(SeedSecretError, match="seed_secret: not hexadecimal"):
        workspace.seed_secret()
    path.write_text("abcd\n")
    with pytest.raises(SeedSecretError, match="too short"):
        workspace.seed_secret()
    assert path.read_text() == "abcd\n"


SPECS_SQL = "select idea_id, tier, seed from run_specs order by created_at"


async def run_specs(nc: Client) -> list[tuple[object, ...]]:
    answer = await ask_ledger(nc, SPECS_SQL, 5)
    return [tuple(row.values()) for row in answer.table.to_pylist()]


async def ladder_until(
    config: SwarmConfig, workspace: Workspace, done: Callable[[], Awaitable[bool]]
) -> None:
    """`swarm ladder` (run_ladder, in this process) on the workspace until `done`."""
    task = asyncio.create_task(run_ladder(config, workspace))
    try:
        await wait_for_async(done, 30)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_ladder_keeps_its_workspaces_seeds_across_restarts_and_its_secret_to_itself(
    tmp_path: Path,
    nc: Client,
    bus_settings: BusSettings,
    ledger: LedgerService,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    await champion_bucket(nc.jetstream())  # as `swarm start` makes it
    config = SwarmConfig()  # the built-in target (bytelm) and its shipped ladder
    workspace = Workspace(tmp_path / "ws")
    workspace.create()
    workspace.write_bus_settings(bus_settings)

    def asked(n: int) -> Callable[[], Awaitable[bool]]:
        async def check() -> bool:
            return len(await run_specs(nc)) >= n

        return check

    await ladder_until(config, workspace, asked(2))  # the champion's baseline at tier 0
    baselines = await run_specs(nc)
    key = workspace.seed_secret()
    assert sorted(baselines) == sorted(("", 0, tier_seed(0, i, key)) for i in range(2))
    seed = tier_seed(0, 0, key)
    secret_file = workspace.seed_secret_file
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600

    # Restarted on the same workspace, the ladder replays the stream: an idea proposed now
    # runs the seed the champion ran before the restart, and the baseline is not run again.
    source = BYTELM.initial_source()
    patch = make_patch(source, source.replace("BATCH_SIZE = 16", "BATCH_SIZE = 32"), "recipe.py")
    idea = Idea("idea-after-restart", "tester", "larger batches", patch, 1)
    await publish_event(nc.jetstream(), idea)
    await ladder_until(config, workspace, asked(3))
    assert await run_specs(nc) == [*baselines, (idea.idea_id, 0, seed)]

    # Another workspace: another secret, other seeds.
    other = make_swarm_ladder(config, Workspace(tmp_path / "other").seed_secret())
    (first, *_) = [m for m in other.act() if isinstance(m, RunSpec)]
    assert first.seed != seed

    text = secret_file.read_text().strip()
    secret = bytes.fromhex(text)
    ours = make_swarm_ladder(config, secret)
    assert text not in repr(ours) and repr(secret) not in repr(ours)
    assert text not in caplog.text
    files = [p for p in tmp_path.rglob("*") if p.is_file() and p != secret_file]
    assert any(p.name.startswith("ledger.duckdb") for p in files)
    assert any("jetstream" in p.parts for p in files)
    for path in files:  # the ledger, the event and job streams, the champion store, run state
        try:
            data = path.read_bytes()
        except FileNotFoundError:  # a snapshot's temporary file, renamed meanwhile: read as such
            continue
        assert text.encode() not in data and secret not in data, path


# --- (b) no promotion on an idea's own σ from two or three pairs -----------------------------

RULE = PromotionRule(min_improvement=0.002, sigmas=2.0, seeds=2, max_seeds=4)
BASE = {11: 3.05, 22: 2.95, 33: 3.04, 44: 2.96}  # the champion's seed spread: σ ≈ 0.05


def gained(gains: dict[int, float]) -> dict[int, float]:
    return {seed: BASE[seed] - gain for seed, gain in gains.items()}


def test_gains_that_agree_by_chance_inside_the_seed_noise_are_not_promoted() -> None:
    """Two or three paired gains of 0.02 that agree to 1e-4: their own σ would make a gate of
    2e-4 (promoted, before); the champion's spread across the same seeds says a difference of
    two runs moves by ~0.07, so the idea is inconclusive, then rejected at max_seeds."""
    two = {s: BASE[s] for s in (11, 22)}
    prior = prior_sigma(two)
    assert prior == pytest.approx(2**0.5 * 0.0707, rel=1e-2)
    lucky = decide(RULE, Evidence(gained({11: 0.0201, 22: 0.0199}), two))
    assert lucky.verdict is Verdict.RETEST and lucky.sigma == prior
    assert "(σ_d 0.1, prior: √2 × the baseline's spread; own 0.0001414)" in lucky.rule
    three = decide(RULE, Evidence(gained({11: 0.0201, 22: 0.0199, 33: 0.02}), BASE))
    assert three.verdict is Verdict.RETEST and "prior" in three.rule
    four = decide(RULE, Evidence(gained(dict.fromkeys(BASE, 0.02) | {11: 0.0201}), BASE))
    assert four.verdict is Verdict.REJECT and "inconclusive at 4 seeds (max)" in four.rule
    # A real gain clears the prior's gate on two seeds, as before.
    real = decide(RULE, Evidence(gained({11: 0.5, 22: 0.49}), two))
    assert real.verdict is Verdict.PROMOTE and "prior" in real.rule
    # Once the tier has a pooled σ_d from other ideas' pairs, pairing's benefit is measured:
    # the same consistent small gain is a win (confirmed on a second seed).
    pooled = decide(RULE, Evidence(gained({11: 0.0201, 22: 0.0199}), two, pooled_sigma=0.002))
    assert pooled.verdict is Verdict.PROMOTE and "(σ_d 0.002, pooled)" in pooled.rule


def test_the_larger_of_own_and_prior_is_used_and_named() -> None:
    spread = decide(RULE, Evidence(gained({11: 0.30, 22: 0.02}), {s: BASE[s] for s in (11, 22)}))
    assert spread.sigma is not None and spread.sigma > 0.19  # its own σ, larger than the prior
    assert "(σ_d 0.198, own; prior 0.1)" in spread.rule
    # Equal gains are no noise estimate whatever the prior (seed honesty): never promoted.
    equal = decide(RULE, Evidence(gained({11: 0.5, 22: 0.5, 33: 0.5, 44: 0.5}), BASE))
    assert equal.verdict is Verdict.REJECT and "σ_d ≈ 0" in equal.rule
    # With no prior (one baseline seed, no pooled σ_d) the idea waits for its seeds.
    one = decide(RULE, Evidence(gained({11: 0.5, 22: 0.5}), {11: 3.05}))
    assert one.verdict is Verdict.RETEST and one.rule == "1 of 2 paired seeds in"
    assert prior_sigma({11: 3.05}) is None and prior_sigma({11: 3.0, 22: 3.0}) is None


def test_through_the_ladder_a_lucky_small_gain_waits_and_a_large_one_climbs(
    tmp_path: Path,
) -> None:
    """The red team's case on the real Ladder: an idea 0.02 better on every seed, to 1e-4,
    while the champion's runs spread by ±0.05 across seeds; next to it a gain of 0.5."""
    ladder: Ladder = make_ladder(tmp_path, seed_secret=OTHER_SECRET)
    index = {ladder.seed(t, i): i for t in (0, 1) for i in range(8)}
    spread = [0.05, -0.05, 0.04, -0.04, 0.03, -0.03, 0.02, -0.02]

    def runner(spec: RunSpec, source: str) -> RunResult:
        value = 3.0 + spread[index[spec.seed]]
        if "LR = 1.1" in source:
            value -= 0.02 + (1e-4 if index[spec.seed] % 2 else -1e-4)
        elif "LR = 2.0" in source:
            value -= 0.5 + 0.01 * (index[spec.seed] % 3)
        return ok_result(spec, value)

    sim = Sim(ladder, runner)
    sim.step()
    sim.run_all()
    sim.propose("idea-lucky", "LR = 1.0->LR = 1.1")
    sim.propose("idea-real", "LR = 1.0->LR = 2.0")
    sim.run_all()
    lucky = decisions(sim, "idea-lucky", retests=True)
    assert all(d.verdict is not Verdict.PROMOTE for d in lucky)
    assert all("prior" in d.rule for d in lucky[1:])  # every verdict on its pairs names it
    assert lucky[-1].verdict is Verdict.REJECT and "inconclusive at 4 seeds" in lucky[-1].rule
    real = decisions(sim, "idea-real")
    assert [(d.tier, d.verdict) for d in real] == [(0, Verdict.PROMOTE), (1, Verdict.PROMOTE)]
    assert "prior" in real[0].rule and champions(sim)[-1].idea_id == "idea-real"
