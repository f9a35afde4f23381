"""The ladder's state machine: admission, dedup, pairing, promotion, stacking, rebase, STALE,
approvals, reverts, and replay (a rebuilt ladder makes the same decisions and nothing more)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bus.messages import (
    ChangeKind,
    Decision,
    Idea,
    RunResult,
    RunSpec,
    RunStatus,
    Verdict,
)
from scale_ladder.ladder import LadderRefusal, Phase
from tests.ladder_sim import (
    Sim,
    champions,
    decisions,
    failed_result,
    make_ladder,
    ok_runner,
    started,
)


def test_first_act_makes_champion_one_and_its_baselines(tmp_path: Path) -> None:
    sim = Sim(make_ladder(tmp_path))
    sim.step()
    (initial,) = champions(sim)
    assert initial.version == 1 and initial.kind == ChangeKind.INITIAL and initial.source
    tiers = sim.ladder.tiers

    def baselines() -> set[tuple[int, int]]:
        specs = [m for m in sim.log if isinstance(m, RunSpec)]
        assert all(s.idea_id == "" and s.champion_version == 1 for s in specs)
        assert len(specs) == len({(s.tier, s.seed) for s in specs})  # each seed asked once
        return {(s.tier, s.seed) for s in specs}

    def on(tier: int) -> set[tuple[int, int]]:  # the seeds an idea needs for its first verdict
        return {(tier, sim.ladder.seed(tier, i)) for i in range(tiers[tier].seeds)}

    # Tier 0 at once, on the seeds an idea needs there before its first verdict; each tier
    # above once the one below has followed its seed, with no idea anywhere yet: the first idea
    # to reach a tier waits only for its own runs.
    assert baselines() == on(0)
    sim.run_all()
    assert baselines() == set().union(*(on(t.index) for t in tiers)) and len(tiers) > 1


def test_a_real_win_climbs_every_tier_and_is_stacked(tmp_path: Path) -> None:
    sim = started(make_ladder(tmp_path))
    sim.propose("idea-good", "LR = 1.0->LR = 2.0")
    sim.run_all()
    verdicts = [(d.tier, d.verdict) for d in decisions(sim, "idea-good", retests=True)]
    # One seed first; with no noise estimate yet (one idea, so nothing pooled) a second.
    assert verdicts == [
        (0, Verdict.RETEST),
        (0, Verdict.PROMOTE),
        (1, Verdict.RETEST),
        (1, Verdict.PROMOTE),
    ]
    asked = decisions(sim, "idea-good", retests=True)[0]
    assert asked.rule == "1 of 2 paired seeds in" and asked.seeds_wanted == 2 and asked.runs == 1
    first = decisions(sim, "idea-good")[0]
    assert first.delta is not None and first.delta > 0 and first.n == 2 and first.sigma
    assert first.runs == 2  # what the verdict cost, for SQL
    stacked = champions(sim)[-1]
    assert stacked.version == 2 and stacked.kind == ChangeKind.STACK
    assert stacked.idea_id == "idea-good" and "LR = 2.0" in stacked.source
    # Both tiers had baselines on v1. The new champion's are the stacked idea's own runs (a
    # token budget makes a seed's run reproducible): nothing is run again.
    baselines = {
        (s.champion_version, s.tier) for s in sim.log if isinstance(s, RunSpec) and not s.idea_id
    }
    assert baselines == {(1, 0), (1, 1)}
    assert stacked.carried_runs == 4  # 2 tiers x 2 seeds
    for tier in (0, 1):
        carried = sim.ladder.runs.results[("", 2, tier)]
        assert sorted(carried) == sorted(sim.ladder.runs.results[("idea-good", 1, tier)])
        assert all(r.idea_id == "idea-good" for r in carried.values())


def test_a_loss_is_rejected_and_a_noop_or_bad_patch_refused(tmp_path: Path) -> None:
    sim = started(make_ladder(tmp_path))
    sim.propose("idea-bad", "LR = 1.0->LR = 0.5")
    sim.propose("idea-off", "WD = 0.1->WD = 0.1 ")
    sim.propose("idea-other", "LR = 1.0->LR = 2.0", target="command")
    sim.run_all()
    (bad,) = decisions(sim, "idea-bad")
    assert bad.verdict == Verdict.REJECT and bad.delta is not None and bad.delta < 0
    assert decisions(sim, "idea-other")[0].verdict == Verdict.REFUSED
    assert "target" in decisions(sim, "idea-other")[0].rule


def test_a_duplicate_is_refused_with_a_pointer(tmp_path: Path) -> None:
    sim = Sim(make_ladder(tmp_path))
    sim.step()
    sim.propose("idea-a", "WD = 0.1->WD = 0.2")
    sim.propose("idea-b", "WD = 0.1->WD = 0.2")
    (refusal,) = decisions(sim, "idea-b")
    assert refusal.verdict == Verdict.REFUSED and "duplicate of idea-a" in refusal.rule
    assert '"duplicate_of": "idea-a"' in refusal.details


SCHEDULE = """

def schedule(step, total):
    warm = max(1, total // 10)
    if step < warm:
        return LR * (step + 1) / warm
    progress = (step - warm) / max(1, total - warm)
    return LR * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))
"""


def test_a_near_duplicate_is_refused_with_a_pointer(tmp_path: Path) -> None:
    sim = Sim(make_ladder(tmp_path))
    sim.step()
    sim.propose("idea-a", "LR = 1.0->LR = 2.0")
    sim.propose("idea-comment", "LR = 1.0  # learning rate->LR = 2.0  # learning rate, doubled")
    sim.propose("idea-space", "LR = 1.0->LR=2.0")
    sim.propose("idea-digits", "LR = 1.0->LR = 2.001")  # the same value at 2 significant digits
    sim.propose("idea-other", "LR = 1.0->LR = 2.5")  # another value: another idea
    sim.propose("idea-wd", "WD = 0.1->WD = 0.2")  # another constant
    for idea_id in ("idea-comment", "idea-space", "idea-digits"):
        (refusal,) = decisions(sim, idea_id)
        assert refusal.verdict == Verdict.REFUSED
        assert refusal.rule == (
            "near-duplicate of idea-a (similarity 1.00 ≥ 0.90; at tier 0, testing) on champion v1"
        )
        assert json.loads(refusal.details) == {"near_duplicate_of": "idea-a", "similarity": 1.0}
    for idea_id in ("idea-other", "idea-wd"):
        assert decisions(sim, idea_id) == [] and sim.ladder.ideas[idea_id].phase is Phase.TESTING


def test_a_renamed_variable_in_a_large_edit_is_a_near_duplicate(tmp_path: Path) -> None:
    sim = Sim(make_ladder(tmp_path))
    sim.step()
    sim.propose("idea-big", "DEPTH = 2\n->DEPTH = 2\nimport math\n" + SCHEDULE)
    renamed = SCHEDULE.replace("progress", "fraction_done")
    sim.propose("idea-renamed", "DEPTH = 2\n->DEPTH = 2\nimport math\n" + renamed)
    sim.propose("idea-shorter", "DEPTH = 2\n->DEPTH = 2\nimport math\n" + SCHEDULE[:-60] + "\n")
    (refusal,) = decisions(sim, "idea-renamed")
    details = json.loads(refusal.details)
    assert refusal.verdict == Verdict.REFUSED and details["near_duplicate_of"] == "idea-big"
    assert 0.9 <= details["similarity"] < 1.0
    assert f"(similarity {details['similarity']:.2f} ≥ 0.90;" in refusal.rule
    # Another schedule (its last line dropped: other tokens, other numbers) is another idea.
    assert decisions(sim, "idea-shorter") == []


def test_a_threshold_of_one_refuses_identical_normalised_changes_only(tmp_path: Path) -> None:
    ladder = make_ladder(tmp_path)
    ladder.near_duplicate_similarity = 1.0
    sim = Sim(ladder)
    sim.step()
    sim.propose("idea-big", "DEPTH = 2\n->DEPTH = 2\nimport math\n" + SCHEDULE)
    renamed = SCHEDULE.replace("progress", "fraction_done")
    sim.propose("idea-renamed", "DEPTH = 2\n->DEPTH = 2\nimport math\n" + renamed)
    commented = SCHEDULE.replace("// 10)\n", "// 10)  # a tenth\n")
    sim.propose("idea-commented", "DEPTH = 2\n->DEPTH = 2\nimport math  # for cos\n" + commented)
    assert decisions(sim, "idea-renamed") == []
    (refusal,) = decisions(sim, "idea-commented")
    assert refusal.rule.startswith("near-duplicate of idea-big (similarity 1.00 ≥ 1.00;")


def test_a_replayed_ladder_makes_the_same_near_duplicate_decision(tmp_path: Path) -> None:
    sim = started(make_ladder(tmp_path))
    sim.propose("idea-a", "LR = 1.0->LR = 2.0")
    sim.propose("idea-wd", "WD = 0.1->WD = 0.3")
    sim.run_all()  # idea-a is stacked: v2; idea-wd is carried over to it
    assert sim.ladder.current == 2
    sim.propose("idea-b", "WD = 0.1->WD = 0.25", version=2)
    twin = sim.propose("idea-twin", "WD = 0.1  # weight decay->WD = 0.2500  # wd", version=2)
    (live,) = decisions(sim, "idea-twin")
    assert live.verdict == Verdict.REFUSED and '"near_duplicate_of": "idea-b"' in live.details
    cut = sim.log.index(twin)
    replayed = make_ladder(tmp_path)
    for message in sim.log[:cut]:
        replayed.observe(message)
    assert replayed.act() == []
    assert replayed.intake.changes == sim.ladder.intake.changes  # rebuilt from the RunSpecs
    replayed.observe(twin)
    (again,) = replayed.act()
    assert isinstance(again, Decision)
    assert (again.decision_id, again.rule, again.details) == (
        live.decision_id,
        live.rule,
        live.details,
    )


def test_near_duplicate_similarity_is_read_and_checked(tmp_path: Path) -> None:
    from scale_ladder.tiers import LadderConfigError, load_ladder

    tier = (
        "[[tier]]\nname='t'\ndepth=1\nwidth=32\ncontext=8\nbudget_kind='tokens'\nbudget=64\n"
        "time_limit_s=1\neval_tokens=1\nseeds=1\n"
    )
    path = tmp_path / "ladder.toml"
    path.write_text(tier)
    assert load_ladder(path).near_duplicate_similarity == 0.9
    path.write_text("near_duplicate_similarity = 1\n" + tier)
    assert load_ladder(path).near_duplicate_similarity == 1.0
    for bad in ("0", "1.5", "-0.2", "'high'", "true"):
        path.write_text(f"near_duplicate_similarity = {bad}\n" + tier)
        with pytest.raises(LadderConfigError, match="near_duplicate_similarity must be"):
            load_ladder(path)
    shipped = load_ladder(Path(__file__).resolve().parents[1] / "configs/ladder.toml")
    assert shipped.near_duplicate_similarity == 0.9


def test_patch_that_does_not_apply_is_refused_with_the_reason(tmp_path: Path) -> None:
    sim = Sim(make_ladder(tmp_path))
    sim.step()
    sim.feed(Idea("idea-x", "t", "h", "--- a/other.py\n+++ b/other.py\n@@ -1 +1 @@\n-a\n+b\n", 1))
    sim.feed(Idea("idea-y", "t", "h", "not a diff", 1))
    sim.feed(Idea("idea-z", "t", "h", "", 7))
    for idea_id in ("idea-x", "idea-y", "idea-z"):
        (d,) = decisions(sim, idea_id)
        assert d.verdict == Verdict.REFUSED and d.rule
    assert "v7" in decisions(sim, "idea-z")[0].rule


def test_crashing_idea_is_rejected_with_its_reason(tmp_path: Path) -> None:
    def crash_lr5(spec: RunSpec, source: str) -> RunResult:
        if "LR = 5.0" in source:
            return failed_result(spec, "boom")
        return ok_runner(spec, source)

    sim = Sim(make_ladder(tmp_path), crash_lr5)
    sim.step()
    sim.propose("idea-crash", "LR = 1.0->LR = 5.0")
    sim.run_all()
    (d,) = decisions(sim, "idea-crash")
    assert d.verdict == Verdict.REJECT and "CRASH" in d.rule and "boom" in d.rule


def test_failed_baselines_are_retried_then_left_out(tmp_path: Path) -> None:
    ladder = make_ladder(tmp_path)
    second = ladder.seed(0, 1)

    def flaky(spec: RunSpec, source: str) -> RunResult:
        if not spec.idea_id and spec.seed == second:
            return RunResult(
                spec.run_id,
                spec.tier,
                spec.seed,
                spec.champion_version,
                RunStatus.TIMEOUT,
                reason="slow",
            )
        return ok_runner(spec, source)

    sim = Sim(ladder, flaky)
    sim.step()
    sim.run_all()
    sim.propose("idea-good", "LR = 1.0->LR = 2.0")  # its second seed needs the baseline's
    sim.run_all()
    tries = [
        s
        for s in sim.log
        if isinstance(s, RunSpec) and not s.idea_id and s.seed == second and s.tier == 0
    ]
    assert len(tries) == 3 and len({s.run_id for s in tries}) == 3


def test_a_baseline_seed_that_always_fails_does_not_block_the_tier(tmp_path: Path) -> None:
    """The champion's first seed fails for good at tier 0: ideas run further seeds to get
    their pairs instead of all being rejected for want of one."""

    ladder = make_ladder(tmp_path)
    first_seed = ladder.seed(0, 0)

    def broken_first_seed(spec: RunSpec, source: str) -> RunResult:
        if not spec.idea_id and spec.tier == 0 and spec.seed == first_seed:
            return RunResult(
                spec.run_id, 0, first_seed, spec.champion_version, RunStatus.CRASH, reason="flaky"
            )
        return ok_runner(spec, source)

    sim = Sim(ladder, broken_first_seed)
    sim.step()
    sim.run_all()
    sim.propose("idea-good", "LR = 1.0->LR = 3.0")
    sim.run_all()
    (first, *_) = decisions(sim, "idea-good")
    assert (first.tier, first.verdict) == (0, Verdict.PROMOTE)
    assert first_seed not in json.loads(first.details)["seeds"]  # paired where there is one
    assert champions(sim)[-1].idea_id == "idea-good"


def test_require_approval_holds_then_approve_stacks(tmp_path: Path) -> None:
    sim = Sim(make_ladder(tmp_path, require_approval=True))
    sim.step()
    sim.run_all()
    sim.propose("idea-good", "LR = 1.0->LR = 2.0")
    sim.run_all()
    assert decisions(sim, "idea-good")[-1].verdict == Verdict.HELD
    assert len(champions(sim)) == 1
    with pytest.raises(LadderRefusal, match="no idea idea-nope"):
        sim.ladder.approve("idea-nope", "ann")
    out = sim.ladder.approve("idea-good", "ann")
    assert [type(m).__name__ for m in out][:2] == ["Decision", "ChampionChange"]
    assert out[0].decided_by == "ann"  # type: ignore[union-attr]
    with pytest.raises(LadderRefusal, match="not waiting for approval"):
        sim.ladder.approve("idea-good", "ann")


def test_reject_by_a_person_and_revert(tmp_path: Path) -> None:
    sim = Sim(make_ladder(tmp_path, require_approval=True))
    sim.step()
    sim.run_all()
    sim.propose("idea-good", "LR = 1.0->LR = 2.0")
    sim.run_all()
    out = sim.ladder.reject("idea-good", "bob")
    assert out[0].verdict == Verdict.REJECT  # type: ignore[union-attr]
    assert sim.ladder.ideas["idea-good"].phase is Phase.DONE
    with pytest.raises(LadderRefusal, match="same recipe"):
        sim.ladder.revert(1, "bob")
    with pytest.raises(LadderRefusal, match="no champion v9"):
        sim.ladder.revert(9, "bob")


def test_replay_rebuilds_the_same_state_and_acts_no_more(tmp_path: Path) -> None:
    sim = started(make_ladder(tmp_path))
    for i, change in enumerate(["LR = 1.0->LR = 2.0", "WD = 0.1->WD = 0.3", "LR = 1.0->LR = 1.2"]):
        sim.propose(f"idea-{i}", change)
    sim.run_all()
    replayed = make_ladder(tmp_path)
    for message in sim.log:
        replayed.observe(message)
    assert replayed.act() == []
    assert replayed.current == sim.ladder.current
    assert {i: s.phase for i, s in replayed.ideas.items()} == {
        i: s.phase for i, s in sim.ladder.ideas.items()
    }


def test_same_inputs_give_the_same_decisions(tmp_path: Path) -> None:
    def run_once() -> list[tuple[str, str, int, str]]:
        sim = Sim(make_ladder(tmp_path))
        sim.step()
        sim.run_all()
        for i, change in enumerate(
            ["LR = 1.0->LR = 2.0", "WD = 0.1->WD = 0.3", "LR = 1.0->LR = 1.1"]
        ):
            sim.propose(f"idea-{i}", change)
            sim.run_all()
        return [
            (d.decision_id, d.verdict.value, d.n, f"{d.delta}")
            for d in sim.log
            if isinstance(d, Decision)
        ]

    assert run_once() == run_once()


def test_retest_adds_fresh_seeds_up_to_max(tmp_path: Path) -> None:
    ladder = make_ladder(tmp_path)
    sim = Sim(ladder)
    sim.step()
    sim.run_all()
    sim.propose("idea-tiny", "WD = 0.1->WD = 0.1001")  # within noise: inconclusive
    sim.run_all()
    specs = [s for s in sim.log if isinstance(s, RunSpec) and s.idea_id == "idea-tiny"]
    assert len({s.seed for s in specs if s.tier == 0}) <= 4
    assert decisions(sim, "idea-tiny")[-1].verdict in (Verdict.REJECT, Verdict.PROMOTE)
    fresh = {(t, ladder.seed(t, i)) for t in (0, 1) for i in range(8)}  # each tier's own
    assert all((s.tier, s.seed) in fresh for s in specs)


def test_a_patch_that_changes_no_code_or_cannot_compile_safely_is_refused(tmp_path: Path) -> None:
    """A comment-only idea would pair to exactly zero and pull the noise estimate down; an
    expression nested thousands deep made compile() raise RecursionError, which crashed the
    ladder on every replay (a red team's find). Both are refused with the reason."""
    sim = Sim(make_ladder(tmp_path))
    sim.step()
    sim.propose("idea-comment", "LR = 1.0  # learning rate->LR = 1.0  # the learning rate")
    sim.propose("idea-deep", "DEPTH = 2\n->DEPTH = 2\nY = " + "-" * 20_000 + "1\n")
    comment = decisions(sim, "idea-comment")[0]
    assert comment.verdict is Verdict.REFUSED and "only comments or layout" in comment.rule
    deep = decisions(sim, "idea-deep")[0]
    assert deep.verdict is Verdict.REFUSED and "nested too deeply" in deep.rule


def test_an_idea_that_moves_a_constant_held_fixed_is_refused(tmp_path: Path) -> None:
    """An LLM's patch is free text: whatever its prompt said, admission refuses a change to a
    constant the project holds fixed (target.fixed, the run command, `# search: fixed`)."""
    ladder = make_ladder(tmp_path)
    ladder.fixed = frozenset({"W*"})
    sim = started(ladder)
    sim.propose("idea-wd", "WD = 0.1->WD = 0.2")
    refusal = decisions(sim, "idea-wd")[0]
    assert refusal.verdict is Verdict.REFUSED and "it changes WD, held fixed" in refusal.rule
    sim.propose("idea-lr", "LR = 1.0->LR = 2.0")  # not fixed: admitted and run
    sim.run_all()
    assert decisions(sim, "idea-lr")[0].verdict is Verdict.PROMOTE
