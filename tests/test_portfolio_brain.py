"""The portfolio: each idea from TPE or the heuristic personas, drawn by what each one's ideas
earned at the ladder."""

from __future__ import annotations

import asyncio
from collections import Counter

from agents.brain import Attempt, Brain, Desk, Finding, Gain, Persona
from agents.heuristic_brain import HeuristicBrain, OfflineBrain
from agents.model_brain import ModelBrain, ModelSearch, Sampler
from agents.portfolio_brain import PortfolioBrain
from tests.test_model_brain import RECIPE
from tests.test_model_brain import desk as model_desk


def desk(findings: tuple[Finding, ...]) -> Desk:
    return model_desk(RECIPE, findings)


def portfolio(seed: int = 0) -> PortfolioBrain:
    arms: dict[str, Brain] = {
        "tpe": ModelBrain(ModelSearch(Sampler("tpe"), seed)),
        "heuristic": OfflineBrain(HeuristicBrain(Persona.EXPLORER, seed)),
    }
    return PortfolioBrain(arms, seed)


def judge(idea_id: str, stacked: bool) -> Finding:
    """The ladder's last word on an idea: stacked after gaining at every tier, or rejected at 0."""
    if stacked:
        gains = (Gain(1, 0, 0.05, 3.0), Gain(1, 1, 0.04, 2.5), Gain(1, 2, 0.03, 2.0))
        return Finding(idea_id, "agent-0", 1, (), "h", 2, "PROMOTE", 0.03, 2, gains=gains)
    return Finding(
        idea_id, "agent-0", 1, (), "h", 0, "REJECT", -0.05, gains=(Gain(1, 0, -0.05, 3.0),)
    )


def run(brain: PortfolioBrain, d: Desk, idea_id: str) -> Attempt:
    return asyncio.run(brain.propose(d, idea_id, "trace"))


def test_the_brain_whose_ideas_stack_is_asked_more_often() -> None:
    brain = portfolio()
    findings: list[Finding] = []
    asked: Counter[str] = Counter()
    for i in range(60):
        idea = f"idea-{i}"
        attempt = run(brain, desk(tuple(findings)), idea)
        assert attempt.proposal is not None, attempt.why_not
        arm = brain.proposed_by[idea]
        assert attempt.proposal.why.startswith(f"portfolio: {arm} drawn")
        asked[arm] += 1 if i >= 20 else 0
        findings.append(judge(idea, stacked=arm == "heuristic"))  # only the heuristic's stack
    earnings = brain.earnings(tuple(findings))
    assert set(earnings["tpe"]) == {0.0} and set(earnings["heuristic"]) == {0.03}
    assert asked["heuristic"] >= 3 * asked["tpe"], asked  # after 20 ideas of learning


def test_ideas_in_play_and_ideas_of_no_portfolio_earn_for_no_arm() -> None:
    brain = portfolio()
    run(brain, desk(()), "idea-mine")
    in_play = Finding("idea-mine", "agent-0", 1, (), "h", 0, "PROMOTE", 0.05)
    theirs = judge("idea-theirs", stacked=True)
    assert brain.earnings((in_play, theirs)) == {"tpe": [], "heuristic": []}
    crashed = Finding("idea-mine", "agent-0", 1, (), "h", 0, "", None, failed=True)
    arm = brain.proposed_by["idea-mine"]
    assert brain.earnings((crashed,))[arm] == [0.0]


def test_portfolios_sharing_a_memory_learn_from_each_others_ideas() -> None:
    memory: dict[str, str] = {}
    first, second = (
        PortfolioBrain({"tpe": ModelBrain(ModelSearch(Sampler("tpe"), 0))}, seed, memory)
        for seed in (1, 2)
    )
    run(first, desk(()), "idea-first")
    assert second.earnings((judge("idea-first", stacked=True),)) == {"tpe": [0.03]}


class Dry:
    """An arm that has run out of ideas, as a heuristic does once every move was tried."""

    label = "dry"
    persona = None

    async def propose(self, desk: Desk, idea_id: str, trace_id: str) -> Attempt:
        return Attempt(None, why_not="no untried change left")


def test_a_brain_with_nothing_to_propose_passes_the_turn() -> None:
    tpe = ModelBrain(ModelSearch(Sampler("tpe"), 0))
    brain = PortfolioBrain({"dry": Dry(), "tpe": tpe}, 0)
    for i in range(8):
        attempt = run(brain, desk(()), f"idea-{i}")
        assert attempt.proposal is not None and brain.proposed_by[f"idea-{i}"] == "tpe"
    dry = PortfolioBrain({"dry": Dry(), "also dry": Dry()}, 0)
    attempt = run(dry, desk(()), "idea-none")
    assert attempt.proposal is None and attempt.why_not == "no untried change left"


def test_a_host_s_portfolio_researchers_share_one_memory_and_the_tpe_study() -> None:
    from agents.brain_groups import BrainGroup
    from agents.host import HostOptions, make_team

    options = HostOptions(
        count=3, name_prefix="h", personas=(Persona.EXPLORER, Persona.EXPLOITER),
        max_in_flight=2, seed=0, editable="recipe.py", target="bytelm", top_tier=2,
        groups=(BrainGroup("portfolio", 2), BrainGroup("tpe", 1)), screen=4,
    )  # fmt: skip
    first, second, tpe = make_team(options).researchers
    assert [first.name, second.name] == ["h-0-portfolio-explorer", "h-1-portfolio-exploiter"]
    assert isinstance(first.brain, PortfolioBrain) and isinstance(second.brain, PortfolioBrain)
    assert first.brain.proposed_by is second.brain.proposed_by
    searches = {id(b.arms["tpe"].search) for b in (first.brain, second.brain)}  # type: ignore[attr-defined]
    assert isinstance(tpe.brain, ModelBrain) and searches == {id(tpe.brain.search)}
    assert first.screen is None  # TPE, one of its arms, is its own screen
