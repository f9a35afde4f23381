"""The model-based brain: proposals from Optuna's samplers over the recipe's declared space,
warm-started from every finding the swarm made."""

from __future__ import annotations

import asyncio
import json
import math
import random
import statistics
from pathlib import Path

import pytest
from optuna.trial import TrialState

from agents import model_brain
from agents.brain import Desk, Finding, Gain
from agents.history import History
from agents.model_brain import ModelBrain, ModelSearch, Sampler
from agents.search_space import space_of
from bus.messages import ChampionChange, ChangeKind, Decision, Idea, Verdict
from recipes.constants import Change, changes_between, constants, format_value
from recipes.identity import fingerprint
from recipes.patch import make_patch

BYTELM = (Path(__file__).resolve().parents[1] / "training/recipes/bytelm.py").read_text()
RECIPE = (
    "LR = 1e-3  # learning rate; search: 1e-4..1e-1\n"
    "WD = 0.1  # weight decay; search: 1e-3..1.0\n"
    'ACT = "gelu"  # activation; search: gelu | relu | silu\n'
    "LAYERS = 4  # depth; search: 1..8\n"
    "\ndef train():\n    return LR * WD\n"
)
TARGET_LR = 2e-2  # where the findings below say the best LR is
BASELINE = 3.0  # the champion's metric on each tier's first seed


def desk(
    source: str, findings: tuple[Finding, ...] = (), tried: frozenset[str] = frozenset()
) -> Desk:
    return Desk(
        "agent-0",
        1,
        source,
        "recipe.py",
        top_tier=2,
        findings=findings,
        failures=(),
        notes=(),
        tried=tried | {fingerprint(source)},
        sources={1: source},
    )


def propose(
    search: ModelSearch, d: Desk, idea_id: str = "idea-x"
) -> tuple[str, tuple[Change, ...]]:
    attempt = asyncio.run(ModelBrain(search).propose(d, idea_id, "trace-x"))
    assert attempt.proposal is not None, attempt.why_not
    return attempt.proposal.source, attempt.proposal.changes


def lr_findings(n: int = 40) -> tuple[Finding, ...]:
    """Ideas that each moved LR, judged at the top tier: the closer to TARGET_LR, the better."""
    findings = []
    for i in range(n):
        lr = 1e-4 * (1e-1 / 1e-4) ** (i / (n - 1))
        gain = 0.3 - 0.1 * math.log10(lr / TARGET_LR) ** 2
        findings.append(
            Finding(
                f"idea-{i}",
                "agent-9",
                1,
                (Change("LR", "1e-3", format_value(float(f"{lr:.3g}"))),),
                "h",
                2,
                "PROMOTE" if gain > 0 else "REJECT",
                gain,
                gains=tuple(Gain(1, tier, gain, BASELINE) for tier in (0, 1, 2)),
            )
        )
    return tuple(findings)


def test_a_proposal_moves_several_constants_inside_the_declared_space() -> None:
    search = ModelSearch(Sampler.TPE, seed=0)
    space = space_of(BYTELM).by_name()
    moved = []
    for i in range(12):
        source, changes = propose(search, desk(BYTELM), f"idea-{i}")
        assert changes == changes_between(BYTELM, source)
        moved.append(len(changes))
        for name, constant in constants(source).items():
            value = constant.value
            values = value if isinstance(value, tuple) else (value,)
            for index, x in enumerate(values):
                d = space.get(name if not isinstance(value, tuple) else f"{name}[{index}]")
                assert d is None or d.contains(x), (name, x)
        # Only the values changed: every comment and every other line survives.
        old, new = BYTELM.splitlines(), source.splitlines()
        assert len(old) == len(new)
        for a, b in zip(old, new, strict=True):
            assert a == b or (a.split("#", 1)[1:] == b.split("#", 1)[1:] and "=" in a)
    assert max(moved) >= 3  # not one constant at a time


def test_categoricals_are_sampled_among_their_choices() -> None:
    search = ModelSearch(Sampler.TPE, seed=1)
    seen = set()
    for i in range(15):
        source, _ = propose(search, desk(RECIPE), f"idea-{i}")
        seen.add(constants(source)["ACT"].value)
    assert seen <= {"gelu", "relu", "silu"} and len(seen) == 3


def test_findings_warm_start_the_model() -> None:
    """A brain that joins a swarm whose findings say LR ≈ 2e-2 is best proposes near it from its
    first proposal; a cold one samples the whole range."""

    def distance(search: ModelSearch, findings: tuple[Finding, ...]) -> float:
        gaps = []
        for i in range(10):
            source, _ = propose(search, desk(RECIPE, findings), f"new-{i}")
            lr = constants(source)["LR"].value
            assert isinstance(lr, float)
            gaps.append(abs(math.log10(lr / TARGET_LR)))
        return statistics.median(gaps)

    warm = ModelSearch(Sampler.TPE, seed=3)
    warm_gap = distance(warm, lr_findings())
    cold_gap = distance(ModelSearch(Sampler.TPE, seed=3), ())
    assert warm_gap < 0.5 < cold_gap
    finished = warm._study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    assert len(finished) == 40  # every finding out of play is a trial


def test_what_each_finding_becomes_in_the_study() -> None:
    top = lr_findings(3)[2]  # decided at the top tier: complete
    pruned = Finding(
        "idea-p", "a", 1, (Change("WD", "0.1", "0.2"),), "h", 0, "REJECT", -0.01,
        gains=(Gain(1, 0, -0.01, BASELINE),),
    )  # fmt: skip
    crashed = Finding(
        "idea-c", "a", 1, (Change("WD", "0.1", "0.9"),), "h", 0, "REJECT", None, failed=True
    )
    refused = Finding("idea-r", "a", 1, (Change("WD", "0.1", "0.3"),), "h", 0, "REFUSED", None)
    in_play = Finding("idea-i", "a", 1, (Change("WD", "0.1", "0.4"),), "h", 0, "PROMOTE", 0.02)
    code = Finding("idea-k", "a", 1, (), "h", 2, "REJECT", -0.1,
                   gains=(Gain(1, 2, -0.1, BASELINE),), code_changed=True)  # fmt: skip
    search = ModelSearch(Sampler.TPE, seed=0)
    propose(search, desk(RECIPE, (top, pruned, crashed, refused, in_play, code)))
    trials = {t.state: [] for t in search._study.get_trials(deepcopy=False)}
    for t in search._study.get_trials(deepcopy=False):
        trials[t.state].append(t)
    (complete,) = trials[TrialState.COMPLETE]
    assert complete.value == pytest.approx(BASELINE - top.delta)  # type: ignore[operator]
    assert sorted(complete.intermediate_values) == [0, 1]  # the lower tiers' values
    pruned_trials = trials[TrialState.PRUNED]
    assert len(pruned_trials) == 2  # the tier-0 reject, and the crash at the worst value seen
    crash = next(t for t in pruned_trials if t.params["WD"] == pytest.approx(0.9))
    assert crash.intermediate_values[0] == max(
        v for t in [*pruned_trials, complete] for v in [*t.intermediate_values.values()]
    )
    # The idea in play and the one just proposed are running trials (the constant liar's);
    # the refused one and the code edit teach nothing.
    assert len(trials[TrialState.RUNNING]) == 2
    assert not any(t.params.get("WD") == pytest.approx(0.3) for t in search._study.trials)


def test_a_verdicts_numbers_give_every_finding_one_reference() -> None:
    """A finding's gain keeps the champion's metric on the tier's first paired seed (every idea
    runs it), read from the verdict's numbers; a person's verdict has none and teaches no
    level. A stacked idea knows the version it became."""
    history = History("recipe.py", "bytelm")
    history.observe(ChampionChange(1, 0, ChangeKind.INITIAL, "a", source=RECIPE))
    history.observe(Idea("idea-1", "a", "h", _patch(RECIPE, "LR = 1e-3", "LR = 2e-3"), 1))
    for tier in (0, 1):
        seeds = [880_000_001 + tier, 17 + tier]  # in the order run: the tier's first is first
        numbers = json.dumps({"seeds": seeds, "idea": [2.7, 2.8], "baseline": [2.95, 2.9]})
        history.observe(
            Decision(f"d{tier}", "idea-1", tier, Verdict.PROMOTE, 1, "r", delta=0.2, n=2,
                     details=numbers)
        )  # fmt: skip
    history.observe(
        Decision("d-person", "idea-1", 1, Verdict.PROMOTE, 1, "approved", decided_by="alice")
    )
    stacked = RECIPE.replace("LR = 1e-3", "LR = 2e-3")
    history.observe(ChampionChange(2, 1, ChangeKind.STACK, "b", idea_id="idea-1", source=stacked))
    finding = history.findings["idea-1"]
    assert finding.stacked_into == 2
    assert [(g.tier, g.delta, g.baseline) for g in finding.gains] == [
        (0, 0.2, 2.95),
        (1, 0.2, 2.95),
    ]


def test_a_patch_that_edits_code_is_marked() -> None:
    history = History("recipe.py", "bytelm")
    history.observe(ChampionChange(1, 0, ChangeKind.INITIAL, "a", source=RECIPE))
    history.observe(Idea("idea-c", "a", "h", _patch(RECIPE, "LR * WD", "LR * WD * 2"), 1))
    history.observe(Idea("idea-v", "a", "h", _patch(RECIPE, "LR = 1e-3", "LR = 5e-3"), 1))
    assert history.findings["idea-c"].code_changed
    assert not history.findings["idea-v"].code_changed


def test_a_bad_declaration_is_a_failed_attempt_that_names_it() -> None:
    bad = "LR = 1e-3  # search: 1..2\n"
    attempt = asyncio.run(ModelBrain(ModelSearch(Sampler.TPE, 0)).propose(desk(bad), "i", "t"))
    assert attempt.proposal is None and attempt.failed
    assert "LR: its value 0.001 is outside `search: 1..2`" in attempt.why_not


def test_the_gp_sampler_proposes_too() -> None:
    search = ModelSearch(Sampler.GP, seed=0)
    source, changes = propose(search, desk(RECIPE, lr_findings(12)))
    assert changes and constants(source)["ACT"].value in {"gelu", "relu", "silu"}


def _patch(base: str, old: str, new: str) -> str:
    return make_patch(base, base.replace(old, new, 1), "recipe.py")


def test_a_crash_before_anything_was_measured_teaches_nothing_yet() -> None:
    """A crash is worth the worst value seen; with none seen it has no value to take (0.0
    would rank it above every real val_bpb)."""
    crashed = Finding(
        "idea-c", "a", 1, (Change("WD", "0.1", "0.9"),), "h", 0, "REJECT", None, failed=True
    )
    search = ModelSearch(Sampler.TPE, seed=0)
    propose(search, desk(RECIPE, (crashed,)))
    states = [t.state for t in search._study.get_trials(deepcopy=False)]
    # only the proposal just made (a sample it was moved from is a failed trial: TPE skips it)
    assert [s for s in states if s is not TrialState.FAIL] == [TrialState.RUNNING]


def test_a_changed_declaration_takes_effect_at_once() -> None:
    """A new champion that narrows a declared range is searched in the new range, though its
    value also lay in the old one."""
    search = ModelSearch(Sampler.TPE, seed=0)
    propose(search, desk(RECIPE))
    narrowed = RECIPE.replace("search: 1e-4..1e-1", "search: 8e-4..1.2e-3")
    for i in range(6):
        source, _ = propose(search, desk(narrowed), f"idea-{i}")
        lr = constants(source)["LR"].value
        assert isinstance(lr, float) and 8e-4 <= lr <= 1.2e-3


def test_a_value_the_search_cannot_hold_is_a_refused_attempt_not_a_crash() -> None:
    """Recipes are written by agents: a derived range past a float's reach is no range, and
    an error from the values is an attempt refused with the reason, and no trial is left
    running for the liar."""
    huge = "LR = 1e299\nWD = 0.1  # search: 1e-3..1.0\n"
    search = ModelSearch(Sampler.TPE, seed=0)
    _, changes = propose(search, desk(huge))
    assert [c.name for c in changes] == ["WD"]  # LR has no range to move in
    attempt = asyncio.run(
        ModelBrain(search).propose(desk("X = 1  # search: 1 | 2 | 2\n"), "i", "t")
    )
    assert attempt.failed and "listed twice" in attempt.why_not
    running = [t for t in search._study.get_trials(deepcopy=False) if t.state is TrialState.RUNNING]
    assert len(running) <= 1  # the one proposal made, nothing left behind by the refusal


def test_a_second_look_rejected_where_it_entered_is_no_better_than_a_tier_0_reject() -> None:
    """A second look enters at tier 1 with no tier-0 value. Pruned at step 1, Optuna's TPE
    would rank it above every tier-0 reject (pruned trials rank by the step they reached), so
    a recipe rejected twice would count among the best points; it is a pruned trial with no
    values (ranked last). One promoted at its entry tier and decided at the top is complete."""
    tier0_reject = Finding(
        "idea-0", "a", 1, (Change("WD", "0.1", "0.2"),), "h", 0, "REJECT", -0.01,
        gains=(Gain(1, 0, -0.01, BASELINE),),
    )  # fmt: skip
    failed_look = Finding(
        "idea-l", "a", 1, (Change("WD", "0.1", "0.5"),), "h", 1, "REJECT", -0.02,
        gains=(Gain(1, 1, -0.02, BASELINE),),
    )  # fmt: skip
    climbed = Finding(
        "idea-u", "a", 1, (Change("WD", "0.1", "0.7"),), "h", 2, "REJECT", -0.03,
        gains=(Gain(1, 1, 0.02, BASELINE), Gain(1, 2, -0.03, BASELINE)),
    )  # fmt: skip
    search = ModelSearch(Sampler.TPE, seed=0)
    propose(search, desk(RECIPE, (tier0_reject, failed_look, climbed)))
    by_wd = {round(t.params["WD"], 3): t for t in search._study.get_trials(deepcopy=False)}
    assert by_wd[0.2].state is TrialState.PRUNED and list(by_wd[0.2].intermediate_values) == [0]
    assert by_wd[0.5].state is TrialState.PRUNED and not by_wd[0.5].intermediate_values
    assert by_wd[0.7].state is TrialState.COMPLETE
    assert by_wd[0.7].value == pytest.approx(BASELINE + 0.03)


def test_a_half_step_goes_half_the_way_from_the_champion_on_each_scale(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same sample taken whole and as a half step: LR and WD (log ranges) land at the
    geometric middle between the champion and the whole step, LAYERS (linear) at the middle,
    rounded to a whole layer."""
    whole, half = {}, {}
    whys = []
    for steps, out in (((1.0,), whole), ((0.5,), half)):
        monkeypatch.setattr(model_brain, "STEPS", steps)
        brain = ModelBrain(ModelSearch(Sampler.TPE, seed=5))
        proposal = asyncio.run(brain.propose(desk(RECIPE), "idea-x", "trace-x")).proposal
        assert proposal is not None
        out.update({k: c.value for k, c in constants(proposal.source).items()})
        whys.append(proposal.why)
    assert "half step" not in whys[0] and "half step" in whys[1]  # the trace says which it was
    champion = {k: c.value for k, c in constants(RECIPE).items()}
    for name in ("LR", "WD"):
        a, b, h = float(champion[name]), float(whole[name]), float(half[name])
        assert math.isclose(h, math.sqrt(a * b), rel_tol=0.01), (name, a, b, h)
    layers = (int(champion["LAYERS"]) + int(whole["LAYERS"])) / 2
    assert abs(int(half["LAYERS"]) - layers) <= 0.5
    assert half["ACT"] in (champion["ACT"], whole["ACT"])


def test_the_liar_holds_the_point_that_was_proposed() -> None:
    """Whether a proposal was a whole or a half step, the study's running trial for it is the
    recipe the researcher sends, so parallel proposals are steered away from where the swarm
    really is."""
    search = ModelSearch(Sampler.TPE, seed=2)
    space = space_of(RECIPE)
    for i in range(12):
        source, _ = propose(search, desk(RECIPE), f"idea-{i}")
        placeholder = search._tracked[f"idea-{i}"].placeholder
        assert placeholder is not None
        trial = search._study.trials[placeholder]
        assert trial.state is TrialState.RUNNING
        sent = space.values_of(constants(source))
        held = {
            d.name: model_brain._to_value(d, trial.params[model_brain._param(d)])
            for d in space.dimensions
        }
        assert held == sent


def test_a_half_step_from_a_champion_at_the_edge_of_its_range_stays_inside() -> None:
    """A champion at the ends of its log ranges (LR at 0.1, WD at 1e-3) and a sample that
    keeps those values: a half step lands exactly on them, not a rounding error past the end
    (exp(log(0.1)) is 0.10000000000000002), which the study would refuse as a trial."""
    edge = RECIPE.replace("LR = 1e-3", "LR = 0.1").replace("WD = 0.1", "WD = 0.001")
    space = space_of(edge)
    here = model_brain._as_params(space, space.values_of(constants(edge)))
    assert here is not None
    there = dict(here, LAYERS=8)  # the sample moves LAYERS only
    half = model_brain._toward(space, here, there, 0.5, random.Random(0))
    assert half["LR"] == 0.1 and half["WD"] == 0.001 and half["LAYERS"] == 6
    search = ModelSearch(Sampler.TPE, seed=0)
    search._space_for(desk(edge))
    search._add(half, TrialState.RUNNING)  # the study takes it
