"""The offline brain against the real recipe: constants found and rewritten byte-exactly, and
every persona's proposals compile, stay valid, never repeat, and follow the ledger's findings."""

from __future__ import annotations

import difflib
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.brain import Finding, Persona, Proposal
from agents.heuristic_brain import HeuristicBrain, OfflineBrain, _tested_tail
from agents.researcher import Researcher
from agents.search_space import Dimension, Kind, space_of, step
from bus.messages import ChampionChange, ChangeKind
from recipes.constants import (
    Change,
    Value,
    changes_between,
    constants,
    format_value,
    parse_value,
    with_values,
)
from recipes.identity import fingerprint

RECIPE = (Path(__file__).resolve().parents[1] / "training/recipes/bytelm.py").read_text()
VERSION = 3


def _finding(
    idea_id: str,
    name: str,
    old: str,
    new: str,
    delta: float,
    verdict: str = "REJECT",
    version: int = VERSION,
    stacked: bool = False,
) -> Finding:
    changes = (Change(name, old, new),)
    stacked_into = version + 1 if stacked else 0
    return Finding(idea_id, "agent-x", version, changes, "h", 1, verdict, delta, stacked_into)


def _value(proposal: Proposal, name: str) -> object:
    return constants(proposal.source)[name].value


def _assert_valid(proposal: Proposal) -> None:
    compile(proposal.source, "recipe.py", "exec")
    assert proposal.changes
    assert changes_between(RECIPE, proposal.source) == proposal.changes
    assert set(constants(proposal.source)) == set(constants(RECIPE))
    assert 0 < len(proposal.hypothesis) <= 300 and proposal.why
    values = {name: c.value for name, c in constants(proposal.source).items()}
    for name in ("MIN_LR_FRACTION", "WARMUP_FRACTION"):
        fraction = values[name]
        assert isinstance(fraction, float) and 0 < fraction < 1
    betas = values["BETAS"]
    assert isinstance(betas, tuple) and len(betas) == 2 and all(0 < b < 1 for b in betas)
    assert values["HEAD_DIM"] in {16, 32, 64}
    assert type(values["BATCH_SIZE"]) is int and 4 <= values["BATCH_SIZE"] <= 64
    assert type(values["MLP_RATIO"]) is int and values["MLP_RATIO"] >= 1
    assert isinstance(values["TIE_EMBEDDINGS"], bool)


# --- recipe constants -------------------------------------------------------------------------


def test_constants_reads_the_recipe_header() -> None:
    found = constants(RECIPE)
    assert list(found)[:3] == ["BATCH_SIZE", "LEARNING_RATE", "MIN_LR_FRACTION"]
    assert found["LEARNING_RATE"].value == 3e-3
    assert found["BATCH_SIZE"].value == 16
    assert found["TIE_EMBEDDINGS"].value is True
    assert found["BETAS"].value == (0.9, 0.95)
    assert found["HEAD_DIM"].value == 32
    assert found["LEARNING_RATE"].comment.startswith("peak AdamW learning rate")
    line = RECIPE.splitlines()[found["GRAD_CLIP"].line - 1]
    assert line.startswith("GRAD_CLIP = 1.0")


def test_numbers_past_what_a_search_can_hold_are_not_constants() -> None:
    found = constants("INF = 1e999\nHUGE = " + "9" * 400 + "\nBIG = (1.0, 1e301)\nOK = 1e300\n")
    assert list(found) == ["OK"]


def test_constants_ignores_what_is_not_a_literal_constant() -> None:
    source = (
        'NAME = "text"\nA = B = 4\nEXPR = 2 * 3\n# FAKE = 1\ndef f():\n    INNER = 2\n'
        "lower = 3\nMIXED = (1, True)\nREAL: float = 0.5  # annotated\nNEG = -2.5\n"
    )  # `lower` comes after the opening block (tests/test_lowercase_constants.py)
    found = constants(source)
    assert list(found) == ["NAME", "REAL", "NEG"]  # a string is a constant (a categorical)
    assert found["REAL"].comment == "annotated" and found["NEG"].value == -2.5


def test_with_values_changes_only_the_edited_line() -> None:
    edited = with_values(RECIPE, {"LEARNING_RATE": 0.0045})
    diff = [
        line
        for line in difflib.unified_diff(RECIPE.splitlines(), edited.splitlines(), lineterm="", n=0)
        if line.startswith(("+", "-")) and not line.startswith(("+++", "---"))
    ]
    comment = "  # peak AdamW learning rate (small models on few steps like it high)"
    assert diff == [f"-LEARNING_RATE = 3e-3{comment}", f"+LEARNING_RATE = 0.0045{comment}"]
    assert edited.endswith(RECIPE[RECIPE.index("\nMIN_LR_FRACTION") :])


def test_with_values_edits_several_and_round_trips() -> None:
    values: dict[str, Value] = {
        "BETAS": (0.9, 0.98),
        "TIE_EMBEDDINGS": False,
        "BATCH_SIZE": 32,
        "INIT_STD": 1e-5,
    }
    edited = with_values(RECIPE, values)
    assert {n: c.value for n, c in constants(edited).items() if n in values} == values
    assert "INIT_STD = 1e-5  # std of the normal init" in edited
    assert len(edited.splitlines()) == len(RECIPE.splitlines())


def test_with_values_handles_shared_and_spanning_lines() -> None:
    source = 'NOTE = "é"; RATE = 0.5  # r\nPAIR = (\n    0.9,\n    0.99,\n)  # betas\nEND = 1\n'
    edited = with_values(source, {"RATE": 0.25, "PAIR": (0.8, 0.9)})
    assert edited == 'NOTE = "é"; RATE = 0.25  # r\nPAIR = (0.8, 0.9)  # betas\nEND = 1\n'
    assert constants(source)["PAIR"].comment == "betas"
    assert changes_between(source, edited)[1] == Change(
        "PAIR", "(\n    0.9,\n    0.99,\n)", "(0.8, 0.9)"
    )


def test_with_values_names_an_unknown_constant() -> None:
    with pytest.raises(KeyError, match="DROPOUT"):
        with_values(RECIPE, {"DROPOUT": 0.1})


@given(st.floats(min_value=-1e300, max_value=1e300))
def test_floats_are_written_exactly(x: float) -> None:
    assert parse_value(format_value(x)) == x
    assert constants(with_values(RECIPE, {"LEARNING_RATE": x}))["LEARNING_RATE"].value == x


def test_changes_between_compares_values_not_text() -> None:
    same = RECIPE.replace("LEARNING_RATE = 3e-3", "LEARNING_RATE = 0.003")
    assert changes_between(RECIPE, same) == ()
    edited = with_values(RECIPE, {"LEARNING_RATE": 0.0045, "HEAD_DIM": 64})
    assert changes_between(RECIPE, edited) == (
        Change("LEARNING_RATE", "3e-3", "0.0045"),
        Change("HEAD_DIM", "32", "64"),
    )
    assert changes_between(RECIPE, "LEARNING_RATE = 1.0\nNEW = 2\n") == (
        Change("LEARNING_RATE", "3e-3", "1.0"),
    )


def test_step_respects_the_declared_choices_ranges_and_fractions() -> None:
    space = space_of(RECIPE).by_name()  # bytelm declares HEAD_DIM's choices, BATCH_SIZE's range
    assert step(space["HEAD_DIM"], 64, math.log(2)) is None
    assert step(space["HEAD_DIM"], 32, -0.1) == 16
    assert step(space["HEAD_DIM"], 16, 2 * math.log(2)) == 64  # two options along
    assert step(space["BATCH_SIZE"], 64, math.log(2)) is None
    assert step(space["BATCH_SIZE"], 16, -math.log(2)) == 8
    assert step(Dimension("X", None, Kind.POW2, 1, 8), 1, -math.log(2)) is None
    high = step(space["BETAS[1]"], 0.95, 50.0)
    assert isinstance(high, float) and 0.95 < high < 1
    assert step(Dimension("X", None, Kind.INT, 1, 12), 3, 0.01) == 4  # too small to round: moves


def test_fingerprint_ignores_trailing_space_and_blank_lines() -> None:
    noisy = RECIPE.replace("\n", "   \n\n")
    assert fingerprint(noisy) == fingerprint(RECIPE)
    assert fingerprint(with_values(RECIPE, {"GRAD_CLIP": 0.5})) != fingerprint(RECIPE)


# --- the brain --------------------------------------------------------------------------------


@pytest.mark.parametrize("persona", list(Persona))
def test_every_persona_proposes_a_valid_recipe(persona: Persona) -> None:
    proposal = HeuristicBrain(persona, seed=7).propose(RECIPE, VERSION, [], set())
    assert proposal is not None and proposal.persona is persona
    _assert_valid(proposal)
    (change,) = proposal.changes
    assert change.name in proposal.hypothesis
    comment = constants(RECIPE)[change.name].comment
    assert comment[:40] in proposal.hypothesis


@settings(max_examples=25, deadline=None)
@given(persona=st.sampled_from(list(Persona)), seed=st.integers(0, 2**32))
def test_random_brains_stay_valid(persona: Persona, seed: int) -> None:
    findings = [
        _finding("idea-lr", "LEARNING_RATE", "3e-3", "0.0045", 0.01),
        _finding("idea-wu", "WARMUP_FRACTION", "0.05", "0.1", 0.002, verdict="RETEST"),
        _finding("idea-b2", "BETAS", "(0.9, 0.9)", "(0.9, 0.95)", 0.01, "PROMOTE", 2, True),
        _finding("idea-hd", "HEAD_DIM", "16", "32", 0.02, "PROMOTE", 1, True),
    ]
    brain, tried = HeuristicBrain(persona, seed), set[str]()
    for _ in range(6):
        proposal = brain.propose(RECIPE, VERSION, findings, tried)
        assert proposal is not None
        _assert_valid(proposal)
        tried.add(fingerprint(proposal.source))


def test_equal_seeds_give_equal_proposals() -> None:
    findings = [_finding("idea-lr", "LEARNING_RATE", "3e-3", "0.0045", 0.01)]
    runs = []
    for _ in range(2):
        brain, tried, seen = HeuristicBrain(Persona.EXPLOITER, seed=11), set[str](), []
        for _ in range(8):
            proposal = brain.propose(RECIPE, VERSION, findings, tried)
            assert proposal is not None
            tried.add(fingerprint(proposal.source))
            seen.append(proposal)
        runs.append(seen)
    assert runs[0] == runs[1]


@pytest.mark.parametrize("persona", list(Persona))
def test_tried_sources_are_never_proposed_again(persona: Persona) -> None:
    brain, tried = HeuristicBrain(persona, seed=3), {fingerprint(RECIPE)}
    findings = [_finding("idea-lr", "LEARNING_RATE", "3e-3", "0.0045", 0.01)]
    for round_ in range(200):
        proposal = brain.propose(RECIPE, VERSION, findings, tried)
        if proposal is None:
            assert round_ >= 30  # the single-step neighbourhood is far bigger than that
            break
        assert fingerprint(proposal.source) not in tried
        tried.add(fingerprint(proposal.source))
    else:
        pytest.fail("the neighbourhood of a champion is finite; the brain should run dry")
    assert brain.propose(RECIPE, VERSION, findings, tried) is None


@pytest.mark.parametrize(("new", "higher"), [("0.0045", True), ("0.002", False)])
def test_exploiter_follows_a_positive_finding(new: str, higher: bool) -> None:
    findings = [
        _finding("idea-lr", "LEARNING_RATE", "3e-3", new, 0.012),
        _finding("idea-bad", "GRAD_CLIP", "1.0", "2.0", -0.02),
    ]
    brain, tried = HeuristicBrain(Persona.EXPLOITER, seed=5, focus=1.0), set[str]()
    for _ in range(2):  # a further step, then a smaller or in-between one: same direction
        proposal = brain.propose(RECIPE, VERSION, findings, tried)
        assert proposal is not None and proposal.parents == ("idea-lr",)
        value = _value(proposal, "LEARNING_RATE")
        assert isinstance(value, float) and (value > 3e-3) is higher
        assert value != float(new)  # the finding itself was already run
        assert "idea-lr" in proposal.hypothesis
        tried.add(fingerprint(proposal.source))


def test_exploiter_pushes_a_stacked_change_beyond_the_champion() -> None:
    champion = with_values(RECIPE, {"LEARNING_RATE": 0.0045})
    findings = [_finding("idea-lr", "LEARNING_RATE", "3e-3", "0.0045", 0.01, "PROMOTE", 2, True)]
    proposal = HeuristicBrain(Persona.EXPLOITER, seed=1, focus=1.0).propose(
        champion, VERSION, findings, set()
    )
    assert proposal is not None
    value = constants(proposal.source)["LEARNING_RATE"].value
    assert isinstance(value, float) and value > 0.0045


def test_combiner_merges_findings_on_different_constants() -> None:
    findings = [
        _finding("idea-lr", "LEARNING_RATE", "3e-3", "0.0045", 0.012),
        _finding("idea-lr2", "LEARNING_RATE", "3e-3", "0.006", 0.011),
        _finding("idea-wu", "WARMUP_FRACTION", "0.05", "0.1", 0.004, verdict="RETEST"),
        _finding("idea-old", "GRAD_CLIP", "1.0", "0.5", 0.05, version=VERSION - 1),
        _finding("idea-moved", "BETAS", "(0.9, 0.9)", "(0.9, 0.99)", 0.05),  # not from this value
        _finding("idea-worse", "INIT_STD", "0.02", "0.03", -0.01),
    ]
    brain = HeuristicBrain(Persona.COMBINER, seed=2, focus=1.0)
    proposal = brain.propose(RECIPE, VERSION, findings, set())
    assert proposal is not None
    _assert_valid(proposal)
    assert {c.name for c in proposal.changes} == {"LEARNING_RATE", "WARMUP_FRACTION"}
    assert _value(proposal, "WARMUP_FRACTION") == 0.1
    assert proposal.parents[1] == "idea-wu" and proposal.parents[0] in {"idea-lr", "idea-lr2"}
    assert proposal.hypothesis.startswith("Combine ")


def test_ablator_reverts_a_stacked_change() -> None:
    champion = with_values(RECIPE, {"WEIGHT_DECAY": 0.2})
    findings = [_finding("idea-wd", "WEIGHT_DECAY", "0.1", "0.2", 0.006, "PROMOTE", 2, True)]
    brain = HeuristicBrain(Persona.ABLATOR, seed=4, focus=1.0)
    proposal = brain.propose(champion, VERSION, findings, set())
    assert proposal is not None and proposal.parents == ("idea-wd",)
    assert proposal.changes == (Change("WEIGHT_DECAY", "0.2", "0.1"),)
    assert "idea-wd" in proposal.hypothesis
    # Once the revert was tried, the ablator has nothing left and falls back to another move.
    again = brain.propose(champion, VERSION, findings, {fingerprint(proposal.source)})
    assert again is not None and again.source != proposal.source


async def test_a_researcher_with_nothing_untried_rests_longer_until_a_new_champion() -> None:
    # A recipe with no constants: the heuristic has no move at all.
    clock = [100.0]
    brain = OfflineBrain(HeuristicBrain(Persona.EXPLORER, 0))
    researcher = Researcher("r", brain, "recipe.py", "bytelm", 1, 2, clock=lambda: clock[0])
    researcher.observe(ChampionChange(1, 0, ChangeKind.INITIAL, "a", source="print('hi')\n"))
    rests = []
    for i in range(7):
        said = await researcher.propose()  # why it has nothing, once per champion
        assert (said is not None and said.trace.action == "idle") if i == 0 else said is None
        rests.append(researcher.resting_until - clock[0])
        assert await researcher.propose() is None  # resting: not even a look
        clock[0] = researcher.resting_until
    assert rests == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    researcher.observe(ChampionChange(2, 1, ChangeKind.STACK, "b", source="LR = 1.0\n"))
    assert researcher.resting_until == 0.0
    assert await researcher.propose() is not None  # LR has moves


def test_a_hypothesis_tells_what_moving_the_constant_did_so_far() -> None:
    """Undecided findings have no gain: they are not reported as a best gain of 0."""

    def finding(delta: float | None) -> Finding:
        change = Change("lr", "1e-3", "2e-3")
        return Finding("i", "a", 3, (change,), "h", 0, "" if delta is None else "REJECT", delta)

    assert _tested_tail([], 3) == "Untested on champion v3."
    assert _tested_tail([finding(None)], 3) == "1 idea moved it on v3, none measured yet."
    tail = _tested_tail([finding(None), finding(-0.02), finding(0.0123)], 3)
    assert tail == "3 ideas moved it on v3 (best gain +0.0123)."
