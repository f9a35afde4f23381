"""Recipes by content address (issue 18, item 5): the ladder names and stores the recipe of every
RunSpec, a trainer runs exactly the recipe a RunSpec names and applies no patch, and what cannot
be had (not stored, not text, not the recipe its address names) is refused with the reason."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest
from nats.aio.client import Client

from bus.messages import Idea, RunSpec, RunStatus, Verdict
from bus.nats_bus import enqueue_run
from bus.subjects import ensure_trainer_consumer
from ledger.service import LedgerService
from recipes.identity import recipe_sha
from recipes.patch import MAX_FILE_CHARS, PatchRefused, apply, make_patch
from recipes.store import RecipeMissing, RecipeStore, recipe_bucket
from tests.conftest import wait_for_async
from tests.ladder_sim import decisions, make_ladder, patch, started
from tests.test_trainer import rows
from tests.training_helpers import tiny_spec
from training.run_limits import RunLimits
from training.synthetic import SyntheticTarget, loss, read_values
from training.trainer import Trainer, TrainerOptions

TARGET = SyntheticTarget()


def options(tmp_path: Path) -> TrainerOptions:
    return TrainerOptions(
        tiers=(0,),
        device="cpu",
        scratch_dir=tmp_path / "scratch",
        log_dir=tmp_path / "logs",
        default_limits={0: RunLimits(time_limit_s=10)},
        instant_target=True,
    )


async def test_the_store_gives_back_only_the_recipe_an_address_names(nc: Client) -> None:
    store = RecipeStore(nc.jetstream())
    source = TARGET.initial_source()
    sha = await store.put(source)
    assert sha == recipe_sha(source) and len(sha) == 64
    assert await RecipeStore(nc.jetstream()).get(sha) == source  # a fresh reader, no cache

    missing = recipe_sha("LR = 1\n")
    with pytest.raises(RecipeMissing, match=f"recipe {missing[:12]} is not in the store"):
        await RecipeStore(nc.jetstream()).get(missing)
    with pytest.raises(RecipeMissing, match="not a recipe's address"):
        await RecipeStore(nc.jetstream()).get("../etc/passwd")

    # A value put by hand under another recipe's address is not that recipe: refused, not run.
    kv = await recipe_bucket(nc.jetstream())
    forged = recipe_sha(source.replace("0.001", "0.004"))
    await kv.put(forged, source.encode())
    with pytest.raises(RecipeMissing, match="is not the recipe it names"):
        await RecipeStore(nc.jetstream()).get(forged)
    await kv.put(missing, b"\xff\xfe not text")
    with pytest.raises(RecipeMissing, match="is not text"):
        await RecipeStore(nc.jetstream()).get(missing)


async def test_a_trainer_runs_the_recipe_a_spec_names_and_applies_no_patch(
    nc: Client, ledger: LedgerService, tmp_path: Path
) -> None:
    js = nc.jetstream()
    await ensure_trainer_consumer(js, 0)
    champion = TARGET.initial_source()
    better = champion.replace("LR = 0.001", "LR = 0.004")
    assert better != champion
    sha = await RecipeStore(js).put(better)
    # Named by address: its patch (garbage) is never applied, the stored recipe runs.
    by_address = replace(tiny_spec("not a patch"), recipe_sha=sha, target="synthetic")
    # Named by an address nothing was stored under: refused, naming it.
    unknown = recipe_sha("LR = 9\n")
    not_stored = replace(tiny_spec(), recipe_sha=unknown, target="synthetic")
    # A RunSpec of schema v1.1 (no address): its champion with its patch, as before.
    legacy = replace(tiny_spec(patch("LR = 0.001", "LR = 0.004", champion)), target="synthetic")
    for spec in (by_address, not_stored, legacy):
        await enqueue_run(js, spec)
    stop = asyncio.Event()
    serving = asyncio.create_task(Trainer(nc, TARGET, options(tmp_path)).run(stop))
    try:

        async def done() -> bool:
            return len(await rows(nc, "select run_id from runs")) == 3

        await wait_for_async(done, 30, 0.2)
    finally:
        stop.set()
        await serving
    results = {r["run_id"]: r for r in await rows(nc, "select * from runs")}
    expected = loss(read_values(better), 0, by_address.seed)
    assert results[by_address.run_id]["status"] == RunStatus.OK
    assert results[by_address.run_id]["metric"] == pytest.approx(expected)
    assert results[not_stored.run_id]["status"] == RunStatus.REFUSED
    assert f"recipe {unknown[:12]} is not in the store" in str(results[not_stored.run_id]["reason"])
    assert results[legacy.run_id]["status"] == RunStatus.OK
    assert results[legacy.run_id]["metric"] == pytest.approx(expected)


def test_an_idea_naming_another_recipe_than_its_patch_makes_is_refused(tmp_path: Path) -> None:
    sim = started(make_ladder(tmp_path))
    base = sim.ladder.champions[1].source
    change = patch("LR = 1.0", "LR = 2.0", base)
    wrong = recipe_sha(base.replace("LR = 1.0", "LR = 3.0"))
    sim.feed(Idea("idea-lies", "tester", "h", change, 1, recipe_sha=wrong))
    right = recipe_sha(base.replace("LR = 1.0", "LR = 2.0"))
    sim.feed(Idea("idea-true", "tester", "h", change.replace("2.0", "2.5"), 1, recipe_sha=""))
    sim.feed(Idea("idea-named", "tester", "h", change, 1, recipe_sha=right))
    sim.run_all()
    (lies,) = decisions(sim, "idea-lies")
    assert lies.verdict is Verdict.REFUSED
    assert f"the idea names recipe {wrong!r}" in lies.rule and f"makes recipe {right}" in lies.rule
    # Named rightly, or not named (an older researcher): admitted, and its RunSpecs name it.
    assert decisions(sim, "idea-named")[0].verdict is not Verdict.REFUSED
    specs = [m for m in sim.log if isinstance(m, RunSpec) and m.idea_id == "idea-named"]
    assert specs and {s.recipe_sha for s in specs} == {right}
    baselines = [m for m in sim.log if isinstance(m, RunSpec) and not m.idea_id]
    assert {s.recipe_sha for s in baselines if s.champion_version == 1} == {recipe_sha(base)}
    assert decisions(sim, "idea-true")[0].verdict is not Verdict.REFUSED


def test_a_false_name_is_refused_on_an_older_champion_too(tmp_path: Path) -> None:
    """Not STALE, which says the champion moved on: the idea itself is wrong."""
    sim = started(make_ladder(tmp_path))
    sim.propose("idea-win", "LR = 1.0->LR = 2.0")
    sim.run_all()
    assert sim.ladder.current == 2
    base = sim.ladder.champions[1].source
    change = patch("WD = 0.1", "WD = 0.2", base)
    sim.feed(Idea("idea-old-lie", "tester", "h", change, 1, recipe_sha="0" * 64))
    (lie,) = decisions(sim, "idea-old-lie")
    assert lie.verdict is Verdict.REFUSED and "the idea names recipe" in lie.rule


def test_a_recipe_too_large_for_one_bus_message_is_refused_at_admission() -> None:
    """Counted in UTF-8 bytes, not characters: three-byte characters tripled a recipe past the
    bus's message size, and the ladder retried storing it forever."""
    lines = [f"# {i:06d} " + "a" * 90 + "\n" for i in range(5000)]
    champion = "X = 1\n" + "".join(lines)  # about 500,000 characters, as many bytes
    wide = "X = 1\n" + "".join(
        line.replace("a", "—") if i < 280 else line for i, line in enumerate(lines)
    )
    assert len(wide) <= MAX_FILE_CHARS < len(wide.encode())
    with pytest.raises(PatchRefused, match="bytes in UTF-8"):
        apply(champion, make_patch(champion, wide, "recipe.py"), "recipe.py")
