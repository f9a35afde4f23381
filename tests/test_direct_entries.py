"""Direct entries: while a proxy tier's promotions fail one tier up, a share of fresh ideas
starts above it, and meets there a noise gate as strict as the gates it skipped
(scale_ladder/direct_entries.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bus.messages import Decision, RunSpec, Verdict
from scale_ladder.direct_entries import DIRECT_ENTRY, MIN_DECIDED, entry_rule, entry_tier
from scale_ladder.ladder import Ladder
from scale_ladder.rules import Evidence, decide
from scale_ladder.tiers import LadderConfigError, load_tiers
from scale_ladder.whatif import compare, decide_again, recorded
from tests.ladder_sim import RECIPE, SIM_LADDER, Sim
from tests.test_spot_checks import honest_runner, misleading_runner

FAR = [0.5, 0.4, 0.3, 0.2, 0.6, 0.7]  # tier 0 (misleading) prefers these; the top does not
NEAR = [2.0, 2.5, 3.0, 3.2, 2.8, 2.2, 3.4, 2.6, 1.8, 2.9, 3.1, 2.4]  # the top prefers these


def ladder_with(tmp_path: Path, top: str) -> Ladder:
    """The two-tier sim ladder, `top` added to its top tier; nothing stacks unapproved."""
    path = tmp_path / "ladder.toml"
    path.write_text(SIM_LADDER.format(extra="") + top)
    return Ladder(load_tiers(path), "recipe.py", RECIPE, require_approval=True)


def swarm(tmp_path: Path, runner: object, top: str = "direct_entries = 1.0\n") -> Sim:
    sim = Sim(ladder_with(tmp_path, top), runner)  # type: ignore[arg-type]
    sim.step()
    sim.run_all()
    for i, lr in enumerate(FAR + NEAR):
        sim.propose(f"idea-{i}", f"LR = 1.0->LR = {lr}")
        sim.run_all()
    return sim


def first_tiers(sim: Sim) -> dict[str, int]:
    """idea -> the tier of its first RunSpec."""
    first: dict[str, int] = {}
    for m in sim.log:
        if isinstance(m, RunSpec) and m.idea_id:
            first.setdefault(m.idea_id, m.tier)
    return first


def final_decisions(sim: Sim, tier: int) -> dict[str, Decision]:
    """idea -> the rules' verdict on it at `tier` (PROMOTE or REJECT)."""
    verdicts = (Verdict.PROMOTE, Verdict.REJECT)
    return {
        m.idea_id: m
        for m in sim.log
        if isinstance(m, Decision) and m.tier == tier and m.verdict in verdicts
    }


def test_ideas_start_above_a_proxy_that_misleads_and_are_judged_there(tmp_path: Path) -> None:
    sim = swarm(tmp_path, misleading_runner)
    first, at_top, below = first_tiers(sim), final_decisions(sim, 1), final_decisions(sim, 0)
    measured = [f"idea-{i}" for i in range(MIN_DECIDED)]
    for idea_id in measured:  # before the proxy is measured, every idea starts at tier 0
        assert first[idea_id] == 0 and below[idea_id].verdict is Verdict.PROMOTE
        assert at_top[idea_id].verdict is Verdict.REJECT  # what tier 0 promoted fails the top
    direct = [i for i, tier in first.items() if tier == 1]
    assert 3 <= len(direct) < len(first) - MIN_DECIDED  # a share, drawn per idea
    for idea_id in direct:
        assert at_top[idea_id].rule.startswith(f"{DIRECT_ENTRY} at tier 1 (skipped tiers 0;")
        assert "noise gate 3.28" in at_top[idea_id].rule  # two 2σ gates in one (see below)
        if int(idea_id.split("-")[1]) >= len(FAR):  # the top prefers it: promoted, held
            assert at_top[idea_id].verdict is Verdict.PROMOTE
    near = [f"idea-{i}" for i in range(len(FAR), len(FAR) + len(NEAR))]
    assert any(at_top[i].verdict is Verdict.PROMOTE for i in near if i in direct)
    assert all(below[i].verdict is Verdict.REJECT for i in near if i not in direct)
    # A replay (a restart) puts every idea where the live ladder did and acts no further.
    replayed = ladder_with(tmp_path, "direct_entries = 1.0\n")
    for message in sim.log:
        replayed.observe(message)
    assert replayed.act() == []
    live = {i: (s.phase, s.tier) for i, s in sim.ladder.ideas.items()}
    assert {i: (s.phase, s.tier) for i, s in replayed.ideas.items()} == live


def test_a_proxy_that_predicts_the_top_sends_nothing_past_it(tmp_path: Path) -> None:
    sim = swarm(tmp_path, honest_runner)
    assert set(first_tiers(sim).values()) == {0}


def test_without_direct_entries_the_misleading_proxy_stops_every_good_idea(
    tmp_path: Path,
) -> None:
    sim = swarm(tmp_path, misleading_runner, top="")
    assert set(first_tiers(sim).values()) == {0}
    assert not any(d.verdict is Verdict.PROMOTE for d in final_decisions(sim, 1).values())


def test_a_direct_entry_meets_the_gates_it_skipped(tmp_path: Path) -> None:
    """Two 2σ gates skipped into one: a gain a plain 2σ gate passes on four seeds, at 2.5σ,
    does not pass the entry gate (3.3σ), nor does a win on one seed go unconfirmed."""
    tiers = ladder_with(tmp_path, "").tiers
    sigma = 0.01
    gains = [0.0125 + d for d in (0.001, -0.001, 0.0005, -0.0005)]  # mean 2.5 σ/√4
    baseline = {s: 3.0 + 0.05 * s for s in range(4)}  # seed noise, which pairing removes
    evidence = Evidence({s: baseline[s] - g for s, g in enumerate(gains)}, baseline, sigma)
    assert decide(tiers[1].rule, evidence).verdict is Verdict.PROMOTE
    strict = entry_rule(tiers, 1)
    assert strict.sigmas == pytest.approx(3.28, abs=0.01) and strict.confirm_wins
    assert decide(strict, evidence).verdict is not Verdict.PROMOTE


@pytest.mark.parametrize(
    ("where", "value", "says"),
    [("small", "1.0", 'tier[0] ("small").direct_entries must be 0'), ("large", "1.5", "in [0, 1]")],
)
def test_a_bad_setting_is_refused_with_its_reason(
    tmp_path: Path, where: str, value: str, says: str
) -> None:
    text = SIM_LADDER.format(extra=f"direct_entries = {value}" if where == "small" else "")
    path = tmp_path / "ladder.toml"
    path.write_text(text + (f"direct_entries = {value}\n" if where == "large" else ""))
    with pytest.raises(LadderConfigError, match=r"direct_entries") as error:
        load_tiers(path)
    assert says in str(error.value)


def test_a_what_if_enters_ideas_where_the_record_did_while_its_tier_takes_them(
    tmp_path: Path,
) -> None:
    """`swarm whatif` decides a record again: under the recorded settings it enters each idea
    where the live ladder did (its draws followed verdicts whose timing a replay cannot
    reproduce), so it asks for the runs that were made; with direct entries off, at tier 0."""
    unmeasured = ladder_with(tmp_path, "direct_entries = 1.0\n")  # no proxy measured yet
    unmeasured.recorded_entries = {"idea-x": 1}
    assert entry_tier(unmeasured, "idea-x", 1) == 1 and entry_tier(unmeasured, "idea-y", 1) == 0
    (tmp_path / "made").mkdir()
    sim = swarm(tmp_path / "made", misleading_runner)
    record = recorded(sim.log)
    for top, entered in (("direct_entries = 1.0\n", True), ("", False)):
        (tmp_path / "again").mkdir(exist_ok=True)
        again = decide_again(sim.log, ladder_with(tmp_path / "again", top))
        report = compare(record, again, sim.ladder.tiers)
        if entered:
            assert all(t.same == t.decided and t.unmeasured == 0 for t in report.tiers)
        else:  # every idea starts at tier 0, where the direct entries were never run
            assert report.tiers[0].unmeasured > 0
