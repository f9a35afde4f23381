"""`swarm whatif` (issue 19, item 2): a recorded history decided again under other settings,
with only the runs that exist. The histories are made by the real ladder (tests/ladder_sim.py);
the what-if runs the real ladder again over them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from bus.messages import (
    ChampionChange,
    Decision,
    Message,
    RunResult,
    RunSpec,
    RunStatus,
    Verdict,
)
from scale_ladder.admission import patched_source
from scale_ladder.ladder import Ladder
from scale_ladder.tiers import load_ladder
from scale_ladder.whatif import (
    OPEN,
    compare,
    decide_again,
    recorded,
    runs_differ,
    specs_differ,
)
from swarm.config import ConfigError
from swarm.whatif_command import sweep_settings
from tests.ladder_sim import SIM_LADDER, make_ladder, ok_runner, started

IDEAS = [
    ("big", "LR = 1.0->LR = 3.0"),  # far better at both tiers: stacked
    ("worse", "WD = 0.1->WD = 0.9"),  # far worse
    ("tiny", "LR = 1.0->LR = 1.01"),  # within the noise
    ("better", "LR = 1.0->LR = 2.0"),  # better; proposed on v1, so rebased after "big"
]


def history(tmp_path: Path, extra: str = "") -> tuple[list[Message], Ladder]:
    sim = started(make_ladder(tmp_path / "made", extra=extra))
    for idea_id, change in IDEAS:
        sim.propose(idea_id, change)
        sim.run_all()
    return sim.log, sim.ladder


def fresh(tmp_path: Path, extra: str = "", small_minimum: str = "") -> Ladder:
    """A new ladder like the history's; `small_minimum`: the small tier's min_improvement."""
    (tmp_path / "other").mkdir(exist_ok=True)
    ladder = make_ladder(tmp_path / "other", extra=extra)
    if small_minimum:
        path = tmp_path / "other" / "ladder.toml"
        text = SIM_LADDER.format(extra=extra)
        path.write_text(text.replace("min_improvement = 0.001", small_minimum, 1))
        ladder.tiers = load_ladder(path).tiers
    return ladder


def test_the_recorded_settings_decide_the_recorded_history_again(tmp_path: Path) -> None:
    (tmp_path / "made").mkdir()
    log, ladder = history(tmp_path)
    record = recorded(log)
    assert record.stacked  # the history has something to reproduce
    again = decide_again(log, fresh(tmp_path))
    report = compare(record, again, ladder.tiers)
    assert report.whatif_stacks == report.recorded_stacks
    for tier in report.tiers:
        assert tier.decided > 0 and tier.same == tier.decided
        assert (tier.changed, tier.open, tier.reached, tier.earlier, tier.later, tier.diverged) == (
            [],
        ) * 6
        assert (tier.unmeasured, tier.not_needed) == (0, 0)
        assert tier.runs == tier.recorded_runs


def test_a_gate_no_idea_can_clear_stacks_nothing_and_names_what_it_could_not_measure(
    tmp_path: Path,
) -> None:
    (tmp_path / "made").mkdir()
    log, ladder = history(tmp_path)
    record = recorded(log)
    promoted_small = {
        i for (i, t), d in record.verdicts.items() if t == 0 and d.verdict.value == "PROMOTE"
    }
    assert promoted_small
    again = decide_again(log, fresh(tmp_path, extra="sigmas = 1000.0"))
    report = compare(record, again, ladder.tiers)
    assert report.whatif_stacks == []
    small, large = report.tiers
    # every idea the record promoted at the small tier is now rejected there, or waits on a
    # seed nobody ran (this gate would have asked for more seeds than the record has)
    moved = {c.idea_id: c for c in small.changed + small.open}
    assert promoted_small <= set(moved)
    for idea_id in promoted_small:
        assert moved[idea_id].whatif in (Verdict.REJECT.value, OPEN)
        if moved[idea_id].whatif == OPEN:
            assert "unmeasured" in moved[idea_id].why
    # the ideas left open wait on their seeds and the champion's ("" is its baseline)
    waiting = {s.idea_id for s in again.unmeasured[0]}
    assert waiting == {c.idea_id for c in small.open} | {""}
    assert all(isinstance(s, RunSpec) and s.tier == 0 for s in again.unmeasured[0])
    # nothing reached the large tier: the runs the record made there (ideas and the champions
    # its stacks made) were not needed, and nothing was decided there
    assert large.runs < large.recorded_runs and large.not_needed > 0
    assert large.same == 0 and {c.whatif for c in large.open} == {OPEN}


def test_a_minimum_no_idea_reaches_rejects_on_no_more_runs(tmp_path: Path) -> None:
    (tmp_path / "made").mkdir()
    log, ladder = history(tmp_path)
    record = recorded(log)
    again = decide_again(log, fresh(tmp_path, small_minimum="min_improvement = 0.5"))
    report = compare(record, again, ladder.tiers)
    small = report.tiers[0]
    # a minimum of 50% of the baseline: nothing is promoted; what was, changes verdict, on no
    # more runs than the record used (a clear shortfall needs no extra seed)
    assert report.whatif_stacks == []
    assert small.changed and all(c.whatif == Verdict.REJECT.value for c in small.changed)
    assert all(c.whatif_seeds <= c.recorded_seeds for c in small.changed)
    # "worse" was tested, in the record, on the champion "big" made (its WD change carried
    # over); with nothing stacked its recipe is another one, which nobody ran: it stays open,
    # and its runs are the unmeasured ones
    assert [(c.idea_id, c.whatif) for c in small.open] == [("worse", OPEN)]
    assert record.verdicts[("worse", 0)].champion_version == 2
    assert {s.idea_id for s in again.unmeasured[0]} == {"worse"}


def test_a_ladder_whose_runs_are_other_experiments_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ladder.toml"
    path.write_text(SIM_LADDER.format(extra=""))
    other = tmp_path / "other.toml"
    other.write_text(SIM_LADDER.format(extra="").replace("budget = 2000", "budget = 4000"))
    why = runs_differ(load_ladder(path).tiers, load_ladder(other).tiers)
    assert why is not None and "tier 1 (large)" in why and "budget" in why
    assert runs_differ(load_ladder(path).tiers, load_ladder(path).tiers) is None


def test_sweeps_set_one_key_and_name_what_is_wrong(tmp_path: Path) -> None:
    path = tmp_path / "ladder.toml"
    path.write_text(SIM_LADDER.format(extra=""))
    settings = sweep_settings(path, "bytelm", "sigmas=1,2.5")
    assert [s.label for s in settings] == [
        "ladder.toml with sigmas=1",
        "ladder.toml with sigmas=2.5",
    ]
    assert [[t.rule.sigmas for t in s.ladder.tiers] for s in settings] == [[1, 1], [2.5, 2.5]]
    one = sweep_settings(path, "bytelm", "small.top_fraction=0.5")[0]
    assert [t.rule.top_fraction for t in one.ladder.tiers] == [0.5, 0.0]
    for bad, says in [
        ("budget=5", "KEY one of"),
        ("sigmas", "KEY=V1,V2"),
        ("sigmas=two", "'two' is not a number"),
        ("huge.sigmas=1", "no tier named 'huge'"),
        ("large.sigmas=0", "must be at least 1"),  # checked as a ladder file is
        ("sigmas=" + ",".join(["2"] * 9), "at most 8"),  # each replays the whole history
    ]:
        with pytest.raises((ConfigError, ValueError), match=says):
            sweep_settings(path, "bytelm", bad)


def test_a_run_the_record_skipped_is_no_measurement_where_the_champion_stayed(
    tmp_path: Path,
) -> None:
    """A run skipped because its champion had moved on (in the record) answers nothing in a
    what-if where that champion is still the current one: the idea waits on it, unmeasured,
    instead of being rejected for a run that never happened."""
    (tmp_path / "made").mkdir()
    sim = started(make_ladder(tmp_path / "made"))

    def runner(spec: RunSpec, source: str) -> RunResult:
        if spec.champion_version < sim.ladder.current:  # what a trainer does: SKIPPED
            return RunResult(spec.run_id, spec.tier, spec.seed, spec.champion_version,
                             RunStatus.SKIPPED, idea_id=spec.idea_id)  # fmt: skip
        return ok_runner(spec, source)

    sim.runner = runner
    sim.propose("big", "LR = 1.0->LR = 3.0")
    sim.propose("late", "WD = 0.1->WD = 0.11")
    # "big" climbs and is stacked while "late"'s first run waits: then it is skipped
    sim.run_all(hold=lambda spec: spec.idea_id == "late")
    assert sim.ladder.current == 2
    sim.run_all()
    late = [m for m in sim.log if isinstance(m, RunResult) and m.idea_id == "late"]
    assert any(r.status is RunStatus.SKIPPED for r in late)
    record = recorded(sim.log)
    again = decide_again(sim.log, fresh(tmp_path, extra="sigmas = 1000.0"))  # nothing stacks
    assert again.stacked == []
    verdict = again.verdicts.get(("late", 0))
    assert verdict is None or "SKIPPED" not in verdict.rule
    assert "late" in {s.idea_id for s in again.unmeasured[0]}
    assert record.stacked == ["big"]


def test_a_ladder_file_edited_since_the_swarm_ran_is_not_taken_for_its_settings(
    tmp_path: Path,
) -> None:
    (tmp_path / "made").mkdir()
    log, ladder = history(tmp_path)
    assert specs_differ(ladder.tiers, log) is None
    path = tmp_path / "edited.toml"
    path.write_text(SIM_LADDER.format(extra="").replace("budget = 1000", "budget = 500"))
    why = specs_differ(load_ladder(path).tiers, log)
    assert why is not None and "tier 0 (small) has budget 500" in why and "1000" in why


def test_results_that_came_together_are_decided_together_again(tmp_path: Path) -> None:
    """The live ladder folds every event waiting and then acts once; a replay acting after each
    event decided an idea on one result where the swarm had decided on two (a pooled σ_d a
    pair short flips a verdict at the gate, and what follows it). The replay acts where the
    record says the ladder acted: the same verdicts, on the same runs, every time."""
    (tmp_path / "made").mkdir()
    sim = started(make_ladder(tmp_path / "made"))
    # small steps up from LR 1.0: some clear the gate at once, some at its edge
    changes = [f"LR = 1.0->LR = {1.0 + 0.002 * i:.4f}" for i in range(1, 25)]
    for i, change in enumerate(changes):
        sim.propose(f"edge{i}", change)
    while sim.queue:  # in waves: every run queued now, its results in one batch, one act
        wave, sim.queue = sim.queue, []
        for spec in wave:
            base = sim.ladder.champions[spec.champion_version].source
            source = patched_source(base, spec.patch, "recipe.py") if spec.patch else base
            result = ok_runner(spec, source)
            sim.log.append(result)
            sim.ladder.observe(result)
        sim.step()
    record = recorded(sim.log)
    report = compare(record, decide_again(sim.log, fresh(tmp_path)), sim.ladder.tiers)
    assert report.tiers[0].decided >= len(changes)
    assert report.whatif_stacks == report.recorded_stacks
    for tier in report.tiers:
        assert tier.same == tier.decided, tier
        assert (tier.changed, tier.open, tier.reached, tier.earlier, tier.later) == ([],) * 5
        assert tier.runs == tier.recorded_runs
    assert report.notes == []
    # A record from before schema v1.3 does not say where the ladder acted: replayed acting
    # after every event, and the answer says so.
    old = [
        replace(m, after_event="") if isinstance(m, RunSpec | Decision | ChampionChange) else m
        for m in sim.log
    ]
    again = decide_again(old, fresh(tmp_path))
    assert again.notes and "before schema v1.3" in again.notes[0]
    assert compare(record, again, sim.ladder.tiers).whatif_stacks != report.recorded_stacks
