"""The researchers of a host share one History: each event is folded once and told only to the
researchers it concerns (the author of a decided or failed idea, the agent of an LLM call, all of
them for a champion change), leaving each researcher as a fold of its own would."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable

import pytest

from agents.brain import Attempt, Desk, Persona, Proposal
from agents.heuristic_brain import HeuristicBrain
from agents.history import History, SharedHistory
from agents.researcher import Researcher
from bus.messages import (
    ChampionChange,
    ChangeKind,
    Decision,
    Idea,
    LlmCall,
    Message,
    RunResult,
    RunStatus,
    Verdict,
    new_id,
)
from recipes.identity import fingerprint
from recipes.patch import make_patch
from training.target_info import RECIPE

BASE = RECIPE.read_text()
CHAMPION = ChampionChange(1, 0, ChangeKind.INITIAL, "sha", reason="initial", source=BASE)


class Scripted:
    """A brain that always proposes the same recipe (None: has nothing), whatever it reads:
    both setups below get the same ideas."""

    def __init__(self, proposal: Proposal | None) -> None:
        self.proposal = proposal
        self.persona = Persona.EXPLORER
        self.label = "scripted"

    async def propose(self, desk: Desk, idea_id: str, trace_id: str) -> Attempt:
        return Attempt(self.proposal, why_not="" if self.proposal else "nothing untried")


def proposals(count: int) -> list[Proposal]:
    """`count` different recipes, each one constant moved from the champion's."""
    brain, made, tried = HeuristicBrain(Persona.EXPLORER, 0), [], set[str]()
    for _ in range(count):
        proposal = brain.propose(BASE, 1, [], tried)
        assert proposal is not None
        tried.add(fingerprint(proposal.source))
        made.append(proposal)
    return made


def team_of(
    count: int,
    history: History | None,
    max_in_flight: int = 1,
    idle: int = 0,
    ids: Callable[[str], str] = new_id,
) -> list[Researcher]:
    """`count` researchers with an idea each, then `idle` with none; their clock stands at 100."""
    scripts: list[Proposal | None] = [*proposals(count), *[None] * idle]
    return [
        Researcher(
            f"r{i}",
            Scripted(p),
            "recipe.py",
            "bytelm",
            max_in_flight,
            1,
            history=history,
            ids=ids,
            clock=lambda: 100.0,
        )
        for i, p in enumerate(scripts)
    ]


async def proposed(researcher: Researcher) -> Idea:
    step = await researcher.propose()
    assert step is not None and step.idea is not None
    return step.idea


async def test_a_decision_is_folded_once_and_told_only_to_its_author() -> None:
    history = History("recipe.py", "bytelm")
    team = team_of(3, history)
    shared = SharedHistory(history, team)
    assert shared.fold(CHAMPION) == []
    ideas = [await proposed(r) for r in team]
    assert all(r.busy for r in team)
    for idea in ideas:  # the bus brings them back: known already
        assert shared.fold(idea) == []
    notes = [list(r.notes) for r in team]
    rejected = ideas[1].idea_id
    decision = Decision("d1", rejected, 0, Verdict.REJECT, 1, "no gain", -0.01, 0.01, 2)
    assert shared.fold(decision) == [1]  # only its author is freed
    assert [r.busy for r in team] == [True, False, True]
    assert [list(r.notes) for r in team][0::2] == notes[0::2]  # the others were not told
    assert team[1].notes[-1].startswith(f"{rejected} at tier 0: REJECT")
    finding = history.findings[rejected]
    assert finding.verdict == "REJECT" and len(history.findings) == 3
    assert all(r.findings[rejected] is finding for r in team)  # held once, read by all


async def test_a_decision_before_its_idea_is_applied_and_told_when_the_idea_arrives() -> None:
    history = History("recipe.py", "bytelm")
    team = team_of(2, history)
    shared = SharedHistory(history, team)
    shared.fold(CHAMPION)
    # An idea of r1's from before a restart: its decision reached the stream first.
    patch = make_patch(BASE, proposals(3)[2].source, "recipe.py")
    idea = Idea("idea-old", "r1", "older", patch, 1)
    decision = Decision("d1", idea.idea_id, 0, Verdict.HELD, 1, "held", 0.02, 0.01, 2)
    assert shared.fold(decision) == []
    assert idea.idea_id not in history.findings and not team[1].notes
    shared.fold(idea)
    assert history.findings[idea.idea_id].verdict == "HELD"
    assert not team[0].notes and team[1].notes[-1].startswith("idea-old at tier 0: HELD")


async def test_the_desk_shares_one_snapshot_until_the_history_changes() -> None:
    history = History("recipe.py", "bytelm")
    team = team_of(2, history, max_in_flight=2)
    SharedHistory(history, team).fold(CHAMPION)
    idea = await proposed(team[0])
    first, second = team[0].desk(), team[1].desk()
    assert first.findings is second.findings and first.tried is second.tried
    history.observe(Decision("d1", idea.idea_id, 0, Verdict.REJECT, 1, "no gain", -0.01, 0.01, 2))
    later = team[1].desk()
    assert later.findings[0].verdict == "REJECT" and first.findings[0].verdict == ""
    await proposed(team[1])
    assert len(team[0].desk().tried) == len(first.tried) + 1 and len(first.tried) == 2


def stream(ideas: list[Idea]) -> list[Message]:
    """The bus's view: echoes, retests, a decision before its idea, failures, an LLM call, a
    promotion to the top tier, the stack, a late verdict."""
    a, b, c = (i.idea_id for i in ideas)
    late = Idea("idea-late", "r2", "late", make_patch(BASE, proposals(4)[3].source, "recipe.py"), 1)
    crash = RunResult(
        "run-1", 0, 0, 1, RunStatus.CRASH, idea_id=b, reason="exit 1", log_tail="x\ny"
    )
    call = LlmCall(
        "c1", "r2", "propose", "p", "m", "ok", "s", "s", "", "", idea_id=c, strategy_version=3
    )
    stacked = ChampionChange(
        2, 1, ChangeKind.STACK, "sha2", idea_id=a, source=BASE.replace("\n", "\n\n", 1)
    )
    return [
        *ideas,
        CHAMPION,  # again: not a new champion, the idle one goes on resting
        Decision("d1", a, 0, Verdict.RETEST, 1, "more seeds", 0.01, 0.02, 2),
        Decision("d2", a, 0, Verdict.PROMOTE, 1, "gain", 0.01, 0.004, 4),
        Decision("d3", late.idea_id, 0, Verdict.REJECT, 1, "no gain", -0.02, 0.01, 2),
        late,
        crash,
        crash,  # the same failure again: learnt once
        RunResult("run-2", 0, 0, 1, RunStatus.OK, idea_id=c, metric=1.0),
        Decision("d4", b, 0, Verdict.REJECT, 1, "crashed", None, None, 0),
        call,
        Decision("d5", a, 1, Verdict.PROMOTE, 1, "gain at the top", 0.01, 0.003, 4),
        stacked,
        Decision("d6", c, 0, Verdict.STALE, 1, "champion moved", None, None, 0),
    ]


def view(r: Researcher) -> tuple[object, ...]:
    tried = {v: set(fps) for v, fps in r.tried.items()}
    return (
        dict(r.findings),
        tried,
        list(r.failures),
        list(r.notes),
        set(r.in_flight),
        r.idea_strategy,
        r.champion,
        r.busy,
        (r.empty_in_a_row, r.resting_until),
    )


def test_the_shared_fold_leaves_each_researcher_as_a_fold_of_its_own_would() -> None:
    # The same researchers, the same ideas (same ids), the same stream: folded once and told
    # to whom it concerns, or folded by every researcher into a history of its own.
    def run(shared: bool) -> tuple[list[tuple[object, ...]], list[list[int]]]:
        counter = itertools.count()
        history = History("recipe.py", "bytelm") if shared else None
        team = team_of(3, history, idle=1, ids=lambda prefix: f"{prefix}-{next(counter)}")
        host = SharedHistory(history, team) if history is not None else None

        def fold(message: Message) -> list[int]:
            if host is not None:
                return host.fold(message)
            freed = []
            for index, r in enumerate(team):  # what every researcher did before
                was_busy = r.busy
                r.observe(message)
                if was_busy and not r.busy:
                    freed.append(index)
            return freed

        fold(CHAMPION)
        ideas = [asyncio.run(proposed(r)) for r in team[:3]]
        assert asyncio.run(team[3].propose()) is None and team[3].resting_until == 101.0
        freed, resting = [], []
        for message in stream(ideas):
            freed.append(fold(message))
            resting.append(team[3].empty_in_a_row)
        assert resting == [1] * 14 + [0, 0]  # looks again on the new champion, not the replay
        a, b, c = (team[0].findings[i.idea_id] for i in ideas)
        assert (a.tier, a.verdict, a.stacked) == (1, "PROMOTE", True)
        assert (b.verdict, c.verdict) == ("REJECT", "STALE")
        assert team[0].findings["idea-late"].verdict == "REJECT" and len(team[0].failures) == 1
        assert [n.split(":")[0] for n in team[1].notes][1:] == [
            f"{b.idea_id} CRASH at tier 0",
            f"{b.idea_id} at tier 0",
        ]
        assert team[0].notes[-1].startswith(f"{a.idea_id} at tier 1: PROMOTE")
        assert team[2].idea_strategy == {c.idea_id: 3}
        # r2 is told of an idea of its own from before a restart, once the idea arrives.
        assert [n.split(":")[0] for n in team[2].notes][1:] == [
            "idea-late at tier 0",
            f"{c.idea_id} at tier 0",
        ]
        return [view(r) for r in team], freed

    shared, alone = run(shared=True), run(shared=False)
    assert shared == alone
    # Freed: r0 once its idea reached the top tier (room below it), r1 by its REJECT, r2 by
    # its STALE.
    assert shared[1][-5:] == [[1], [], [], [], [2]]
    assert [i for freed in shared[1] for i in freed] == [0, 1, 2]
    assert shared[0][3][-1] == (0, 0.0)  # the idle one looks again on the new champion only


def test_a_researcher_reading_another_history_is_refused() -> None:
    # It would never learn anything: the host folds only its own history.
    history = History("recipe.py", "bytelm")
    stranger = Researcher("stranger", Scripted(None), "recipe.py", "bytelm", 1, 1)
    with pytest.raises(ValueError, match="stranger"):
        SharedHistory(history, [*team_of(1, history), stranger])
    with pytest.raises(ValueError, match="synthetic"):
        Researcher("r", Scripted(None), "recipe.py", "synthetic", 1, 1, history=history)


class Listed:
    """A brain that proposes the given recipes in turn."""

    def __init__(self, made: list[Proposal]) -> None:
        self.made = iter(made)
        self.persona = Persona.EXPLORER
        self.label = "listed"

    async def propose(self, desk: Desk, idea_id: str, trace_id: str) -> Attempt:
        return Attempt(next(self.made))


async def test_ideas_waiting_on_the_top_tier_leave_room_for_new_ones_below_it() -> None:
    """max_in_flight bounds a researcher's ideas below the top tier (twice it, all of them), so
    a slow top tier does not leave the lower tiers without work."""
    history = History("recipe.py", "bytelm")
    (researcher,) = team = [
        Researcher("r0", Listed(proposals(3)), "recipe.py", "bytelm", 1, 1, history=history)
    ]
    shared = SharedHistory(history, team)
    shared.fold(CHAMPION)
    first = await proposed(researcher)
    assert researcher.busy
    up = Decision("d1", first.idea_id, 0, Verdict.PROMOTE, 1, "gain", 0.05, 0.01, 2)
    assert shared.fold(up) == [0]  # on the top tier now: room for one more below it
    second = await proposed(researcher)
    assert researcher.busy and researcher.in_flight == {first.idea_id, second.idea_id}
    up = Decision("d2", second.idea_id, 0, Verdict.PROMOTE, 1, "gain", 0.05, 0.01, 2)
    assert shared.fold(up) == []  # two on the top tier: twice max_in_flight in all
    done = Decision("d3", first.idea_id, 1, Verdict.REJECT, 1, "no gain", -0.01, 0.01, 2)
    assert shared.fold(done) == [0]
    assert researcher.in_flight == {second.idea_id}
