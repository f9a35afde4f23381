"""LLM researchers and the meta-agent against local HTTP stubs of both APIs: the real SDKs, the
real prompts and answer protocol, the real budget and strategy files. Records are checked as
they would reach the ledger (encoded by the real codec)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agents.brain import Persona
from agents.brain_groups import BrainGroup
from agents.host import HostOptions, Team, make_team
from agents.llm_client import RetryPolicy
from agents.llm_setup import LlmSetup, LlmSetupError, ProviderSettings
from agents.researcher import Researcher, Step
from bus.codec import encode
from bus.messages import (
    ChampionChange,
    ChangeKind,
    Decision,
    LlmCall,
    PromptPrefix,
    RunResult,
    RunStatus,
    StrategyVersion,
    Verdict,
    new_id,
)
from recipes.identity import recipe_sha
from tests.llm_stub_server import Reply, ScriptedReplies, StubLlmServer
from training.target_info import BYTELM

REPO = Path(__file__).resolve().parent.parent
KEY = "sk-ant-test-SECRET-4242"
SOURCE = BYTELM.initial_source()
LR_LINE = next(line for line in SOURCE.splitlines() if line.startswith("LEARNING_RATE ="))

GOOD = f"""I would raise the learning rate.

HYPOTHESIS: a higher peak learning rate trains these small models further within the budget.

recipe.py
<<<<<<< SEARCH
{LR_LINE}
=======
{LR_LINE.replace("3e-3", "4e-3")}
>>>>>>> REPLACE
"""
OUTSIDE = GOOD.replace("recipe.py\n", "training/harness.py\n")


def answer_with(*texts: str) -> ScriptedReplies:
    return ScriptedReplies(*(Reply(text=t) for t in texts), fallback=Reply(text=texts[-1]))


@pytest.fixture
def program(tmp_path: Path) -> Path:
    path = tmp_path / "program.md"
    path.write_text("# Direction\nLower val_bpb; keep it simple.\n")
    return path


def team_for(
    tmp_path: Path,
    stub: StubLlmServer,
    program: Path,
    monkeypatch: pytest.MonkeyPatch,
    brain: str = "anthropic",
    max_usd: float = 0.0,
) -> Team:
    monkeypatch.setenv("TEST_ANTHROPIC_KEY", KEY)
    monkeypatch.setenv("TEST_OPENAI_KEY", KEY)
    setup = LlmSetup(
        providers={
            "anthropic": ProviderSettings("claude-sonnet-4-6", stub.url, "TEST_ANTHROPIC_KEY"),
            "openai": ProviderSettings("local-coder", stub.openai_url, "TEST_OPENAI_KEY"),
        },
        prices_path=REPO / "configs" / "llm_prices.toml",
        program=program,
        strategies_seed=REPO / "configs" / "strategies",
        strategies=tmp_path / "strategies",
        max_usd=max_usd,
        retry=RetryPolicy(max_retries=3, base_delay_s=0.01, max_delay_s=0.05, timeout_s=10),
    )
    options = HostOptions(
        count=1,
        name_prefix="t",
        personas=(Persona.EXPLORER,),
        max_in_flight=4,
        seed=0,
        editable=BYTELM.editable,
        target=BYTELM.name,
        top_tier=1,
        groups=(BrainGroup(brain, 1),),
        llm=setup,
        cooldown_s=0.0,
        meta_interval_s=1.0,
        meta_min_outcomes=2,
    )
    team = make_team(options)
    team.researchers[0].observe(
        ChampionChange(1, 0, ChangeKind.INITIAL, recipe_sha(SOURCE), source=SOURCE)
    )
    return team


def records(step: Step, kind: type[Any]) -> list[Any]:
    return [r for r in step.records if isinstance(r, kind)]


async def test_a_claude_researcher_proposes_a_valid_idea_with_its_whole_call_recorded(
    tmp_path: Path, program: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with StubLlmServer(answer_with(GOOD)) as stub:
        team = team_for(tmp_path, stub, program, monkeypatch)
        researcher = team.researchers[0]
        step = await researcher.propose()
        await team.close()
    assert step is not None and step.idea is not None
    assert "4e-3" in step.idea.patch and "higher peak learning rate" in step.idea.hypothesis
    assert researcher.name == "t-0-anthropic-explorer"
    (call,) = records(step, LlmCall)
    assert call.status == "ok" and call.idea_id == step.idea.idea_id
    assert call.trace_id == step.trace.trace_id == step.idea.trace_id
    assert call.provider == "anthropic" and call.model == "claude-sonnet-4-6"
    assert call.response.startswith("I would raise") and call.tokens_out > 0
    assert call.cache_write_tokens > 0 and call.cost_usd > 0
    assert "Propose one new idea for champion version 1" in call.dynamic
    (prefix,) = records(step, PromptPrefix)
    assert prefix.prefix_sha == call.prefix_sha
    assert "keep it simple" in prefix.text and LR_LINE in prefix.text  # direction + recipe
    (strategy,) = records(step, StrategyVersion)
    assert strategy.version == 1 and strategy.author == "initial" and call.strategy_version == 1
    assert "explorer" in strategy.text.lower()
    request = stub.requests[0].json
    assert request["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert step.trace.data["brain"] == "anthropic claude-sonnet-4-6"


async def test_the_second_proposal_reads_the_cached_prefix_and_costs_what_the_table_says(
    tmp_path: Path, program: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    second = GOOD.replace("4e-3", "5e-3")
    with StubLlmServer(answer_with(GOOD, second)) as stub:
        team = team_for(tmp_path, stub, program, monkeypatch)
        first = await team.researchers[0].propose()
        step = await team.researchers[0].propose()
        await team.close()
    assert first is not None and step is not None and step.idea is not None
    (call,) = records(step, LlmCall)
    assert call.cache_read_tokens > 0 and call.cache_write_tokens == 0
    # claude-sonnet-4-6 in configs/llm_prices.toml: $3 in, $15 out, $0.30 cache read per Mtok
    expected = (3.0 * call.tokens_in + 15.0 * call.tokens_out + 0.3 * call.cache_read_tokens) / 1e6
    assert call.cost_usd == pytest.approx(expected)
    assert team.budget.spent_usd == pytest.approx(
        call.cost_usd + records(first, LlmCall)[0].cost_usd
    )
    assert first.idea is not None and first.idea.idea_id in call.dynamic  # it sees its own idea


async def test_a_malformed_answer_is_repaired_in_one_round(
    tmp_path: Path, program: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with StubLlmServer(answer_with("Sure! I think we should tune things.", GOOD)) as stub:
        team = team_for(tmp_path, stub, program, monkeypatch)
        step = await team.researchers[0].propose()
        await team.close()
    assert step is not None and step.idea is not None
    refused, ok = records(step, LlmCall)
    assert (refused.purpose, refused.status, ok.purpose, ok.status) == (
        "propose",
        "refused",
        "repair",
        "ok",
    )
    assert "HYPOTHESIS" in refused.error or "hypothesis" in refused.error
    assert refused.idea_id == ok.idea_id == step.idea.idea_id
    repair_turns = stub.requests[1].json["messages"]
    assert [m["role"] for m in repair_turns] == ["user", "assistant", "user"]
    assert "could not be applied" in repair_turns[2]["content"]


async def test_an_answer_unusable_twice_is_refused_with_the_raw_answer_kept(
    tmp_path: Path, program: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with StubLlmServer(answer_with(OUTSIDE)) as stub:
        team = team_for(tmp_path, stub, program, monkeypatch)
        researcher = team.researchers[0]
        step = await researcher.propose()
        await team.close()
    assert step is not None and step.idea is None
    assert step.trace.action == "refused" and "outside the editable file" in step.trace.why
    calls = records(step, LlmCall)
    assert [c.status for c in calls] == ["refused", "refused"]
    assert all(c.response == OUTSIDE and "training/harness.py" in c.error for c in calls)
    assert researcher.failed_in_a_row == 1 and not researcher.in_flight
    assert "refused" in researcher.notes[-1]  # it is told, next time, why


async def test_rate_limited_answers_back_off_and_are_counted(
    tmp_path: Path, program: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    limited = Reply(status=429, text="slow down", headers={"retry-after": "0"})
    overloaded = Reply(status=529, text="overloaded")
    with StubLlmServer(ScriptedReplies(limited, overloaded, fallback=Reply(text=GOOD))) as stub:
        team = team_for(tmp_path, stub, program, monkeypatch)
        step = await team.researchers[0].propose()
        await team.close()
    assert step is not None and step.idea is not None
    (call,) = records(step, LlmCall)
    assert call.retries == 2 and len(stub.requests) == 3


async def test_an_api_that_keeps_failing_is_recorded_and_the_researcher_rests(
    tmp_path: Path, program: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with StubLlmServer(ScriptedReplies(fallback=Reply(status=529, text="overloaded"))) as stub:
        team = team_for(tmp_path, stub, program, monkeypatch)
        researcher = team.researchers[0]
        researcher.cooldown_s = 60.0
        step = await researcher.propose()
        again = await researcher.propose()
        await team.close()
    assert step is not None and step.idea is None and step.trace.action == "refused"
    (call,) = records(step, LlmCall)
    assert call.status == "error" and call.retries == 0 and "529" in call.error
    assert again is None  # resting: no second request
    assert len(stub.requests) == 4  # the first try and 3 retries


async def test_a_spent_budget_stops_proposals_without_another_request(
    tmp_path: Path, program: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with StubLlmServer(answer_with(GOOD, GOOD.replace("4e-3", "5e-3"))) as stub:
        team = team_for(tmp_path, stub, program, monkeypatch, max_usd=0.000001)
        researcher = team.researchers[0]
        first = await researcher.propose()
        stopped = await researcher.propose()
        after = await researcher.propose()
        await team.close()
    assert first is not None and first.idea is not None
    assert stopped is not None and stopped.idea is None and stopped.trace.action == "stopped"
    assert "LLM budget is spent" in researcher.stopped and after is None
    assert len(stub.requests) == 1


async def test_the_key_never_reaches_records_or_logs(
    tmp_path: Path, program: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    replies = ScriptedReplies(Reply(status=401, text=f"bad key {KEY}"), fallback=Reply(text=GOOD))
    with StubLlmServer(replies) as stub:
        team = team_for(tmp_path, stub, program, monkeypatch)
        researcher = team.researchers[0]
        refused = await researcher.propose()
        researcher.resting_until = 0.0
        proposed = await researcher.propose()
        await team.close()
    assert stub.requests[0].headers["authorization"] == f"Bearer {KEY}"  # it was sent to the API
    assert refused is not None and proposed is not None and proposed.idea is not None
    everything = [*refused.records, refused.trace, *proposed.records, proposed.trace]
    encoded = b"".join(encode(m) for m in [*everything, proposed.idea])
    assert KEY.encode() not in encoded
    assert KEY not in caplog.text
    (error,) = records(refused, LlmCall)
    assert error.status == "error" and "401" in error.error


async def test_an_openai_compatible_local_model_proposes_through_the_same_path(
    tmp_path: Path, program: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with StubLlmServer(answer_with(GOOD)) as stub:
        team = team_for(tmp_path, stub, program, monkeypatch, brain="openai")
        step = await team.researchers[0].propose()
        await team.close()
    assert step is not None and step.idea is not None
    (call,) = records(step, LlmCall)
    assert call.provider == "openai" and call.cost_usd == 0.0  # no price: a local model is free
    assert stub.requests[0].path == "/v1/chat/completions"
    assert stub.requests[0].json["messages"][0]["role"] == "system"


async def test_edits_to_program_and_strategy_files_count_from_the_next_proposal(
    tmp_path: Path, program: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with StubLlmServer(answer_with(GOOD, GOOD.replace("4e-3", "5e-3"))) as stub:
        team = team_for(tmp_path, stub, program, monkeypatch)
        researcher = team.researchers[0]
        await researcher.propose()
        program.write_text("# Direction\nOnly touch the optimiser.\n")
        assert team.book is not None
        team.book.path(researcher.name).write_text("# Strategy\nTry warmup changes.\n")
        step = await researcher.propose()
        await team.close()
    assert step is not None
    system = stub.requests[1].json["system"][0]["text"]
    assert "Only touch the optimiser." in system and "Try warmup changes." in system
    (edited,) = records(step, StrategyVersion)
    assert (edited.version, edited.author) == (2, "person")
    assert records(step, LlmCall)[0].strategy_version == 2


def decide(researcher: Researcher, idea_id: str, verdict: Verdict, tier: int, delta: float) -> None:
    researcher.observe(
        Decision(new_id("dec"), idea_id, tier, verdict, 1, f"rule {verdict}", delta, 0.01, 2)
    )


META_ANSWER = """REASON: both ideas raised the learning rate; one passed tier 0, none tier 1.
<strategy>
# Strategy
Stop raising the learning rate (idea A passed t0 only). Try the warmup fraction next.
</strategy>"""


async def test_the_meta_agent_rewrites_a_strategy_from_hit_rates_and_records_it(
    tmp_path: Path, program: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    second = GOOD.replace("4e-3", "5e-3")

    def respond(api: str, request: dict[str, Any], headers: dict[str, str]) -> Reply:
        text = json.dumps(request)
        if "You coach one researcher" in text:
            return Reply(text=META_ANSWER)
        return Reply(text=second if "Propose one new idea" in text and len(seen) else GOOD)

    seen: list[int] = []
    with StubLlmServer(respond) as stub:
        team = team_for(tmp_path, stub, program, monkeypatch)
        researcher, meta = team.researchers[0], team.meta
        assert meta is not None and team.book is not None
        first = await researcher.propose()
        seen.append(1)
        too_early = await meta.review(researcher)
        second_step = await researcher.propose()
        assert first and first.idea and second_step and second_step.idea
        decide(researcher, first.idea.idea_id, Verdict.PROMOTE, 0, 0.02)
        decide(researcher, first.idea.idea_id, Verdict.REJECT, 1, 0.001)
        decide(researcher, second_step.idea.idea_id, Verdict.REJECT, 0, -0.01)
        review = await meta.review(researcher)
        third = await researcher.propose()
        await team.close()
    assert too_early.rewritten is None and "0 of 2" in too_early.why_not
    new = review.rewritten
    assert new is not None and new.version == 2 and new.author == "t-meta"
    assert new.hit_rates_before == {
        "proposed": 2,
        "promoted": {"0": 1, "1": 0},
        "hit_rate": {"0": 0.5, "1": 0.0},
    }
    assert "warmup fraction" in new.text and "learning rate" in new.reason
    assert team.book.path(researcher.name).read_text() == new.text
    (call,) = [r for r in review.records if isinstance(r, LlmCall)]
    assert call.purpose == "meta" and call.status == "ok" and new.call_id == call.call_id
    assert "hit rates" in call.dynamic and first.idea.idea_id in call.dynamic
    assert third is not None and records(third, StrategyVersion) == []  # v2 is known already
    assert records(third, LlmCall)[0].strategy_version == 2
    assert "warmup fraction" in stub.requests[-1].json["system"][0]["text"]


def test_missing_key_or_price_stops_before_anything_runs(
    tmp_path: Path, program: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    make: Callable[..., LlmSetup] = lambda **kw: LlmSetup(  # noqa: E731
        providers={
            "anthropic": ProviderSettings(kw.get("model", "claude-sonnet-4-6"), "", kw["env"])
        },
        prices_path=REPO / "configs" / "llm_prices.toml",
        program=program,
        strategies_seed=REPO / "configs" / "strategies",
        strategies=tmp_path / "s",
    )
    with pytest.raises(LlmSetupError, match=r"needs an API key in \$NO_SUCH_KEY_VAR"):
        make(env="NO_SUCH_KEY_VAR").check("anthropic")
    monkeypatch.setenv("SOME_KEY", KEY)
    with pytest.raises(LlmSetupError, match="no price for model 'claude-unknown'"):
        make(env="SOME_KEY", model="claude-unknown").check("anthropic")


async def test_the_author_is_told_why_its_idea_failed_with_the_log_tail_and_numbers(
    tmp_path: Path, program: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with StubLlmServer(answer_with(GOOD, GOOD.replace("4e-3", "5e-3"))) as stub:
        team = team_for(tmp_path, stub, program, monkeypatch)
        researcher = team.researchers[0]
        first = await researcher.propose()
        assert first is not None and first.idea is not None
        idea_id = first.idea.idea_id
        crash = RunResult(
            f"run-{idea_id}-s0",
            0,
            0,
            1,
            RunStatus.CRASH,
            idea_id=idea_id,
            reason="exit code 1",
            log_tail="Traceback (most recent call last):\nRuntimeError: shape mismatch in qkv",
        )
        researcher.observe(crash)
        decide(researcher, idea_id, Verdict.REJECT, 0, -0.012)
        await researcher.propose()
        await team.close()
    prompt = stub.requests[1].json["messages"][0]["content"]
    assert prompt.count("shape mismatch in qkv") == 2  # in the failures and in its own notes
    assert f"{idea_id} at tier 0: REJECT Δ -0.0120 (σ 0.0100, n 2); rule REJECT" in prompt
