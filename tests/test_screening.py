"""Surrogate screening: a researcher draws several candidates and sends the one a Gaussian
process fitted to the findings rates best; with an LLM brain, through the real SDK and stub."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest

from agents.brain import Desk, Finding, Gain, Persona, Proposal
from agents.heuristic_brain import HeuristicBrain, OfflineBrain
from agents.researcher import Researcher
from agents.screening import Screen
from bus.messages import ChampionChange, ChangeKind, LlmCall
from recipes.constants import Change, format_value, with_values
from recipes.identity import recipe_sha
from tests.llm_stub_server import StubLlmServer
from tests.test_llm_researcher import GOOD, answer_with, records, team_for

RECIPE = "LR = 1e-3  # learning rate; search: 1e-4..1e-1\nWD = 0.1  # search: 1e-3..1.0\n"
BEST_LR = 1e-2


def finding(i: int, lr: float, tier: int = 2) -> Finding:
    gain = 0.2 - 0.1 * math.log10(lr / BEST_LR) ** 2
    change = Change("LR", "1e-3", format_value(lr))
    verdict = "PROMOTE" if tier == 2 else ""
    gains = (Gain(1, tier, gain, 3.0),) if verdict else ()
    return Finding(f"idea-{i}", "a", 1, (change,), "h", tier, verdict, gain, gains=gains)


def desk(findings: tuple[Finding, ...]) -> Desk:
    return Desk(
        "agent-0", 1, RECIPE, "recipe.py", 2, findings, (), (), frozenset(), sources={1: RECIPE}
    )


def candidate(lr: float) -> Proposal:
    return Proposal(f"LR {lr}", with_values(RECIPE, {"LR": lr}), (), Persona.EXPLORER, "why")


MEASURED = tuple(finding(i, lr) for i, lr in enumerate((1e-4, 3e-4, 1e-3, 3e-3, 3e-2, 1e-1)))


def test_the_candidate_with_the_highest_expected_improvement_is_sent() -> None:
    choice = Screen(3).pick(desk(MEASURED), [candidate(1e-4), candidate(9e-3), candidate(0.08)])
    assert choice.index == 1
    assert all(r is not None for r in choice.ratings)
    assert choice.ratings[1] == max(choice.ratings)  # type: ignore[type-var]
    assert "screened 3 candidates" in choice.note and "sent #2" in choice.note


def test_a_candidate_next_to_an_idea_in_play_is_passed_over() -> None:
    in_play = finding(99, 9e-3, tier=0)  # undecided, at the best candidate's point
    choice = Screen(2).pick(desk((*MEASURED, in_play)), [candidate(9e-3), candidate(5e-3)])
    assert choice.index == 1 and "passed over, close to ideas in play" in choice.note


def test_too_few_findings_keep_the_brains_order() -> None:
    choice = Screen(2).pick(desk(MEASURED[:3]), [candidate(1e-4), candidate(9e-3)])
    assert choice.index == 0 and choice.ratings == (None, None)
    assert "too few measured ideas" in choice.note


def test_a_screened_heuristic_researcher_draws_distinct_candidates_and_sends_one() -> None:
    researcher = Researcher(
        "r-0-explorer",
        OfflineBrain(HeuristicBrain(Persona.EXPLORER, 0)),
        "recipe.py",
        "bytelm",
        max_in_flight=2,
        top_tier=2,
        screen=Screen(4),
    )
    researcher.observe(ChampionChange(1, 0, ChangeKind.INITIAL, recipe_sha(RECIPE), source=RECIPE))
    step = asyncio.run(researcher.propose())
    assert step is not None and step.idea is not None
    assert "Screening: too few measured ideas" in step.trace.why  # nothing measured yet
    assert researcher.in_flight == {step.idea.idea_id}


async def test_an_llm_researcher_screens_several_answers_and_keeps_every_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    program = tmp_path / "program.md"
    program.write_text("# Direction\nLower val_bpb.\n")
    answers = [GOOD, GOOD.replace("4e-3", "5e-3"), GOOD.replace("4e-3", "6e-3")]
    with StubLlmServer(answer_with(*answers)) as stub:
        team = team_for(tmp_path, stub, program, monkeypatch)
        researcher = team.researchers[0]
        researcher.screen = Screen(3)
        step = await researcher.propose()
        await team.close()
    assert step is not None and step.idea is not None
    calls = records(step, LlmCall)
    assert len(calls) == 3 and len(stub.requests) == 3  # three candidates, three paid calls
    assert {c.status for c in calls} == {"ok"}
    sent = [c for c in calls if c.idea_id == step.idea.idea_id]
    assert len(sent) == 1  # the sent candidate's call names the idea; the others their own ids
    assert "Screening:" in step.trace.why
    # Each later draw was told the earlier candidates were tried, so all three differ.
    requests = [r.json["messages"][-1]["content"] for r in stub.requests]
    assert len(requests) == 3
