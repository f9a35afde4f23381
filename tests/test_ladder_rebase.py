"""A new champion and the ideas still in play: rebased onto it (by line, or by value when all
they do is set constants), their runs kept when their recipe is unchanged, else STALE."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bus.messages import RunResult, RunSpec, Verdict
from scale_ladder.ladder import Ladder, Phase
from scale_ladder.tiers import load_tiers
from tests.ladder_sim import RECIPE, SIM_LADDER, Sim, champions, decisions, make_ladder, started


def idea_specs(sim: Sim, idea_id: str, version: int) -> list[RunSpec]:
    return [
        m
        for m in sim.log
        if isinstance(m, RunSpec) and m.idea_id == idea_id and m.champion_version == version
    ]


def test_champion_change_rebases_ideas_in_play_onto_it(tmp_path: Path) -> None:
    sim = started(make_ladder(tmp_path))
    sim.propose("idea-good", "LR = 1.0->LR = 2.0")
    sim.propose("idea-wd", "WD = 0.1->WD = 0.12")  # another line: still applies after stacking
    held = [s for s in sim.queue if s.idea_id == "idea-wd"]
    sim.queue = [s for s in sim.queue if s.idea_id != "idea-wd"]
    sim.run_all()
    assert champions(sim)[-1].idea_id == "idea-good"
    sim.queue.extend(held)  # its v1 results come in late: recorded, not used for decisions
    sim.run_all()
    wd_specs = [s for s in sim.log if isinstance(s, RunSpec) and s.idea_id == "idea-wd"]
    assert {(s.champion_version, s.tier) for s in wd_specs} >= {(1, 0), (2, 0)}
    rebased = [s for s in wd_specs if s.champion_version == 2]
    assert rebased[0].patch and "LR = 2.0" in rebased[0].patch  # context of v2, not v1
    assert all(d.champion_version == 2 for d in decisions(sim, "idea-wd"))


def test_stale_when_the_patch_no_longer_applies(tmp_path: Path) -> None:
    sim = started(make_ladder(tmp_path))
    sim.propose("idea-good", "LR = 1.0->LR = 2.0")
    sim.propose("idea-clash", "LR = 1.0->LR = 2.5 * 1")  # code on the same line: no value to set
    for spec in list(sim.queue):  # hold idea-clash's runs back until idea-good has stacked
        if spec.idea_id == "idea-clash":
            sim.queue.remove(spec)
    sim.run_all()
    assert champions(sim)[-1].version == 2
    (stale,) = decisions(sim, "idea-clash")
    assert stale.verdict == Verdict.STALE and "v1 to v2" in stale.rule
    assert sim.ladder.ideas["idea-clash"].phase is Phase.DONE


def test_rebase_carries_an_edit_past_a_neighbouring_change_of_the_real_recipe() -> None:
    from recipes.patch import make_patch as diff
    from scale_ladder.admission import NotAdmitted, patched_source, rebase
    from training.target_info import RECIPE

    v1 = RECIPE.read_text()
    v2 = v1.replace("LEARNING_RATE = 3e-3", "LEARNING_RATE = 4e-3", 1)
    batch = diff(v1, v1.replace("BATCH_SIZE = 16", "BATCH_SIZE = 24", 1), "recipe.py")
    carried = rebase(batch, v1, v2, "recipe.py")
    merged = patched_source(v2, carried, "recipe.py")
    assert "BATCH_SIZE = 24" in merged and "LEARNING_RATE = 4e-3" in merged
    # The same line: a change that only sets constants keeps its values on the new champion.
    both = v1.replace("LEARNING_RATE = 3e-3", "LEARNING_RATE = 2e-3", 1)
    both = both.replace("BATCH_SIZE = 16", "BATCH_SIZE = 24", 1)
    merged = patched_source(
        v2, rebase(diff(v1, both, "recipe.py"), v1, v2, "recipe.py"), "recipe.py"
    )
    assert merged == both  # v2's only change was LEARNING_RATE, which the idea sets itself
    code = v1.replace("LEARNING_RATE = 3e-3", "LEARNING_RATE = 2e-3 * 1", 1)
    with pytest.raises(NotAdmitted, match="conflicts with the new champion"):
        rebase(diff(v1, code, "recipe.py"), v1, v2, "recipe.py")
    same = diff(v1, v2, "recipe.py")
    with pytest.raises(NotAdmitted, match="already contains"):
        rebase(same, v1, v2, "recipe.py")


def test_a_time_budget_tier_is_baselined_again_after_a_stack(tmp_path: Path) -> None:
    """Seconds budgets let machine load into the metric: their runs do not carry over."""
    path = tmp_path / "ladder.toml"
    text = SIM_LADDER.format(extra="")
    large = text.index('name = "large"')
    seconds = text[large:].replace('budget_kind = "tokens"', 'budget_kind = "seconds"')
    path.write_text(text[:large] + seconds)
    sim = Sim(Ladder(load_tiers(path), "recipe.py", RECIPE))
    sim.step()
    sim.run_all()
    sim.propose("idea-good", "LR = 1.0->LR = 2.0")
    sim.run_all()
    stacked = champions(sim)[-1]
    tier0 = sorted(s.seed for s in idea_specs(sim, "idea-good", 1) if s.tier == 0)
    assert stacked.version == 2 and stacked.carried_runs == len(tier0)  # tier 0's seeds only
    assert sorted(sim.ladder.runs.results[("", 2, 0)]) == tier0
    assert not sim.ladder.runs.results[("", 2, 1)]
    sim.propose("idea-better", "LR = 2.0->LR = 2.5", version=2)
    sim.run_all()
    again = {
        (s.tier, s.seed)
        for s in sim.log
        if isinstance(s, RunSpec) and s.champion_version == 2 and not s.idea_id
    }
    # Tier 1 is baselined on v2 once an idea reaches it. Tier 0 keeps the carried seeds and runs
    # only seeds racing adds beyond them, if idea-better needs more.
    assert {seed for tier, seed in again if tier == 1}
    assert not {seed for tier, seed in again if tier == 0} & set(tier0)


def _two_ideas_one_stacks_first(tmp_path: Path) -> Sim:
    """idea-good (LR 2.0) stacks while idea-best (LR 3.0, the optimum) is still climbing: the
    stack changes only LR, which idea-best sets itself, so its recipe stays the same."""
    sim = started(make_ladder(tmp_path))
    sim.propose("idea-good", "LR = 1.0->LR = 2.0")
    sim.propose("idea-best", "LR = 1.0->LR = 3.0")
    sim.run_all()
    return sim


def test_an_idea_whose_recipe_a_stack_leaves_unchanged_keeps_its_runs(tmp_path: Path) -> None:
    sim = _two_ideas_one_stacks_first(tmp_path)
    v2, v3 = champions(sim)[-2:]
    assert (v2.idea_id, v3.idea_id) == ("idea-good", "idea-best")
    assert "LR = 3.0" in v3.source
    stacked_at = sim.log.index(v2)
    ran_on_v1 = {
        (m.tier, m.seed)
        for m in sim.log[:stacked_at]
        if isinstance(m, RunResult) and m.idea_id == "idea-best"
    }
    on_v2 = [d for d in decisions(sim, "idea-best", retests=True) if d.champion_version == 2]
    assert [d.tier for d in on_v2 if d.verdict is Verdict.PROMOTE] == [0, 1]
    first = on_v2[0]  # judged against v2 on the runs it made on v1: none made again
    carried = json.loads(first.details)["carried_seeds"]
    assert carried and {(0, s) for s in carried} <= ran_on_v1
    assert first.runs == 0 and first.n == len(carried)
    rerun = {(s.tier, s.seed) for s in idea_specs(sim, "idea-best", 2)}
    assert not rerun & ran_on_v1  # only the seeds it had no result for are run again
    assert not [d for d in decisions(sim, "idea-best") if d.verdict is Verdict.STALE]


def test_a_replayed_ladder_rebuilds_the_carried_ideas_and_acts_no_more(tmp_path: Path) -> None:
    sim = _two_ideas_one_stacks_first(tmp_path)
    replayed = make_ladder(tmp_path)
    for message in sim.log:
        replayed.observe(message)
    assert replayed.act() == []
    assert replayed.current == sim.ladder.current == 3
    assert (
        replayed.lineage.carried == sim.ladder.lineage.carried
        and replayed.lineage.moved == sim.ladder.lineage.moved
    )


def test_a_run_that_finishes_after_its_idea_was_carried_over_is_used(tmp_path: Path) -> None:
    sim = started(make_ladder(tmp_path))
    sim.propose("idea-good", "LR = 1.0->LR = 2.0")
    sim.propose("idea-best", "LR = 1.0->LR = 3.0")
    # idea-best's runs beyond its first stay queued while idea-good climbs and stacks.
    first = next(s for s in sim.queue if s.idea_id == "idea-best")
    sim.run(first)
    sim.queue.remove(first)
    sim.run_all(hold=lambda s: s.idea_id == "idea-best")
    assert champions(sim)[-1].idea_id == "idea-good"
    late = [s for s in sim.queue if s.idea_id == "idea-best" and s.champion_version == 1]
    assert late and sim.ladder.ideas["idea-best"].version == 2
    for spec in late:  # they finish now, after the stack
        sim.queue.remove(spec)
        result = sim.run(spec)
        assert sim.ladder.runs.results[("idea-best", 2, spec.tier)][spec.seed] == result
    sim.run_all()
    assert champions(sim)[-1].idea_id == "idea-best"
