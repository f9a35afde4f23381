"""An idea's runs that failed where the champion's run on the same seed failed too are no
verdict on the idea (scale_ladder/shared_failures.py); a failure of its own still rejects it
at once. And an idea may not take the name its runs' ids give the champion's."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from bus.messages import RunResult, RunSpec, RunStatus, Verdict
from scale_ladder.baselines import BASELINE_ATTEMPTS
from scale_ladder.ladder import Phase
from tests.ladder_sim import (
    Sim,
    decisions,
    failed_result,
    first_tries_fail,
    make_ladder,
    ok_runner,
)

TYPO = "python: can't open file 'trian.py'"


def broken(spec: RunSpec, source: str) -> RunResult:
    """A run command with a typo: every run fails, the champion's too."""
    return failed_result(spec, TYPO)


def fixed(spec: RunSpec, source: str) -> RunResult:
    """The typo fixed: only a recipe that crashes by itself (LR 5) fails."""
    return failed_result(spec, "diverged") if "LR = 5.0" in source else ok_runner(spec, source)


def idea_runs(sim: Sim, idea_id: str) -> list[str]:
    return [m.run_id for m in sim.log if isinstance(m, RunSpec) and m.idea_id == idea_id]


def champion_failures(sim: Sim) -> int:
    return sum(
        isinstance(m, RunResult) and not m.idea_id and m.status is not RunStatus.OK for m in sim.log
    )


def test_ideas_that_failed_with_the_champion_are_judged_after_the_fix(tmp_path: Path) -> None:
    """The swarm's own stop (champion_health) comes once the champion's first tier-0 seeds
    failed for good; the ideas that failed meanwhile get no verdict against them, and after
    the fix they are judged on their merits."""
    sim = Sim(make_ladder(tmp_path), broken)
    sim.step()
    sim.propose("idea-good", "LR = 1.0->LR = 2.0")
    sim.propose("idea-bad", "LR = 1.0->LR = 5.0")
    while sim.queue and champion_failures(sim) < 2 * BASELINE_ATTEMPTS:
        sim.run(sim.queue.pop(0))
    assert champion_failures(sim) == 2 * BASELINE_ATTEMPTS  # the swarm stops here
    said = [d for i in ("idea-good", "idea-bad") for d in decisions(sim, i)]
    assert all(d.verdict is not Verdict.REJECT for d in said), said
    assert sim.ladder.ideas["idea-good"].phase is Phase.TESTING

    # A restart replays the stream into a new ladder: the same state, nothing more to ask.
    again = make_ladder(tmp_path)
    for message in sim.log:
        again.observe(message)
    assert again.act() == []
    assert again.ideas["idea-good"].phase is Phase.TESTING

    # The user fixes the command; the runs still to do are done (a start puts them back).
    sim.runner = fixed
    sim.run_all()
    good = decisions(sim, "idea-good")
    assert good and good[0].tier == 0 and good[0].verdict is Verdict.PROMOTE, good
    (bad,) = decisions(sim, "idea-bad")
    assert bad.verdict is Verdict.REJECT and "diverged" in bad.rule and TYPO not in bad.rule


def test_a_seed_the_champion_needed_two_tries_for_is_tried_again_for_the_idea(
    tmp_path: Path,
) -> None:
    ladder = make_ladder(tmp_path)
    sim = Sim(ladder, first_tries_fail(ladder.seed(0, 0), then=fixed))
    sim.step()
    sim.propose("idea-good", "LR = 1.0->LR = 2.0")
    sim.propose("idea-bad", "LR = 1.0->LR = 5.0")
    sim.run_all()
    assert any(r.endswith("-a1") for r in idea_runs(sim, "idea-good"))
    good = decisions(sim, "idea-good")
    assert good[0].verdict is Verdict.PROMOTE and good[0].runs == 3, good[0]  # 2 seeds, 1 again
    (bad,) = decisions(sim, "idea-bad")
    assert bad.verdict is Verdict.REJECT and "diverged" in bad.rule and "second try" in bad.rule

    # With the champion healthy on a seed, a crash there is the idea's own: rejected at once.
    current = sim.ladder.current
    lr = next(x for x in sim.ladder.champions[current].source.splitlines() if x.startswith("LR ="))
    sim.propose("idea-worse", f"{lr}->LR = 5.0", version=current)
    sim.run_all()
    (worse,) = decisions(sim, "idea-worse")
    assert worse.verdict is Verdict.REJECT and "second try" not in worse.rule, worse
    assert not any(run.endswith("-a1") for run in idea_runs(sim, "idea-worse"))


def test_an_idea_named_as_the_champions_runs_is_refused(tmp_path: Path) -> None:
    """Its runs' ids would be the champion's baseline runs' (a red team: its RunSpec was
    dropped as seen, the idea never ran, and a replay disagreed with the live ladder)."""
    sim = Sim(make_ladder(tmp_path), fixed)
    sim.step()
    sim.propose("base", "LR = 1.0->LR = 2.0")
    sim.run_all()
    (refused,) = decisions(sim, "base")
    assert refused.verdict is Verdict.REFUSED and "champion's own runs" in refused.rule


def test_runs_count_second_tries_whatever_rejects_the_idea(tmp_path: Path) -> None:
    """A red team's case: the idea's runs came from a trainer with other data (rejected for
    that), one of them a second try; the Decision's `runs` counted the seeds, not the runs."""
    ladder = make_ladder(tmp_path)

    def other_data(spec: RunSpec, source: str) -> RunResult:
        result = ok_runner(spec, source)
        return replace(result, corpus_hash="other" if spec.idea_id else "swarm's")

    sim = Sim(ladder, first_tries_fail(ladder.seed(0, 0), then=other_data))
    sim.step()
    sim.propose("idea-elsewhere", "LR = 1.0->LR = 2.0")
    sim.run_all()
    (d,) = decisions(sim, "idea-elsewhere")
    assert d.verdict is Verdict.REJECT and "corpus" in d.rule, d
    assert d.runs == len(idea_runs(sim, "idea-elsewhere")) == 2  # one seed, tried twice
