"""An idea's runs that failed while the champion's failed too are no verdict on the idea
(scale_ladder/shared_failures.py): it waits, undecided, and is tried again once the champion
runs; a failure of its own still rejects it at once."""

from __future__ import annotations

from pathlib import Path

from bus.messages import RunResult, RunSpec, RunStatus, Verdict
from scale_ladder.ladder import Phase
from tests.ladder_sim import Sim, decisions, make_ladder, ok_runner

TYPO = "python: can't open file 'trian.py'"


def failed(spec: RunSpec, reason: str) -> RunResult:
    return RunResult(
        spec.run_id,
        spec.tier,
        spec.seed,
        spec.champion_version,
        RunStatus.CRASH,
        idea_id=spec.idea_id,
        reason=reason,
    )


def broken(spec: RunSpec, source: str) -> RunResult:
    """A run command with a typo: every run fails, the champion's too."""
    return failed(spec, TYPO)


def fixed(spec: RunSpec, source: str) -> RunResult:
    """The typo fixed: only a recipe that crashes by itself (LR 5) fails."""
    return failed(spec, "diverged") if "LR = 5.0" in source else ok_runner(spec, source)


def idea_runs(sim: Sim, idea_id: str) -> list[str]:
    return [m.run_id for m in sim.log if isinstance(m, RunSpec) and m.idea_id == idea_id]


def test_ideas_that_failed_with_the_champion_wait_and_are_tried_again_after_the_fix(
    tmp_path: Path,
) -> None:
    sim = Sim(make_ladder(tmp_path), broken)
    sim.step()
    sim.propose("idea-good", "LR = 1.0->LR = 2.0")
    sim.propose("idea-bad", "LR = 1.0->LR = 5.0")
    sim.run_all()
    # Nothing was learnt of either idea: neither is rejected for the typo.
    assert decisions(sim, "idea-good") == [] and decisions(sim, "idea-bad") == []
    assert sim.ladder.ideas["idea-good"].phase is Phase.TESTING

    # A restart replays the stream into a new ladder: the same ideas wait, nothing is asked.
    again = make_ladder(tmp_path)
    for message in sim.log:
        again.observe(message)
    assert again.act() == []
    assert again.ideas["idea-good"].phase is Phase.TESTING

    # The user fixes the command. A new idea gets the champion run again on fresh seeds (its
    # first ones failed for good); then each waiting idea's failed seeds are tried again.
    sim.runner = fixed
    sim.propose("idea-new", "LR = 1.0->LR = 1.5")
    sim.run_all()
    good = decisions(sim, "idea-good")
    assert good and good[0].tier == 0 and good[0].verdict is Verdict.PROMOTE, good
    assert any(run.endswith("-a1") for run in idea_runs(sim, "idea-good"))
    # The idea that crashes by itself is rejected on its second try, which says so.
    (bad,) = decisions(sim, "idea-bad")
    assert bad.verdict is Verdict.REJECT and "diverged" in bad.rule, bad
    assert "second try" in bad.rule and TYPO not in bad.rule

    # With the champion healthy, a crash is the idea's own: rejected at once, not tried again.
    current = sim.ladder.current
    lr = next(x for x in sim.ladder.champions[current].source.splitlines() if x.startswith("LR ="))
    sim.propose("idea-worse", f"{lr}->LR = 5.0", version=current)
    sim.run_all()
    (worse,) = decisions(sim, "idea-worse")
    assert worse.verdict is Verdict.REJECT and "second try" not in worse.rule, worse
    assert not any(run.endswith("-a1") for run in idea_runs(sim, "idea-worse"))
