"""A researcher's brain that is a language model (Claude, or a local model).

One attempt: check the budget; read the research direction and the strategy file (so a person's
edit counts from the next proposal); ask the model with the cached prefix and the varying part
(agents/llm_prompt.py); parse the hypothesis and SEARCH/REPLACE edits (agents/answer_protocol.py)
and apply them to the champion. An unusable answer gets one repair round, the reason sent back
with it; a second unusable answer is refused. Every call, refused or not, becomes an LlmCall
record with its raw answer, tokens and cost, and the prefix it used a PromptPrefix record.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from agents.answer_protocol import Answer, ProtocolError, apply_edits, parse_answer, repair_request
from agents.brain import Attempt, Desk, Persona, Proposal
from agents.llm_budget import LlmBudget
from agents.llm_client import Completion, LlmClient, LlmError, Price, Prompt
from agents.llm_prompt import researcher_prefix, researcher_request
from agents.llm_records import call_record, prefix_record
from agents.strategy_book import StrategyBook
from bus.messages import LlmCall, Message
from recipes.constants import Change, changes_between
from recipes.identity import fingerprint


@dataclass(frozen=True, slots=True)
class LlmSettings:
    client: LlmClient
    price: Price
    budget: LlmBudget
    strategies: StrategyBook
    program: Path
    max_tokens: int = 2048


@dataclass(slots=True)
class _Calls:
    """The records one attempt gathers; LlmCalls are finished once the idea id is known."""

    agent: str
    trace_id: str
    strategy_version: int
    settings: LlmSettings
    records: list[Message] = field(default_factory=list)
    calls: list[LlmCall] = field(default_factory=list)

    def add(
        self,
        prompt: Prompt,
        purpose: str,
        completion: Completion | None,
        status: str,
        error: str = "",
    ) -> None:
        s = self.settings
        call = call_record(
            self.agent, purpose, prompt, s.client, s.price, completion, status, error,
            self.trace_id, self.strategy_version,
        )  # fmt: skip
        s.budget.observe(call, own=True)  # counted now, not when the bus brings it back
        self.records.append(prefix_record(prompt))
        self.calls.append(call)

    def done(self, idea_id: str = "") -> tuple[Message, ...]:
        calls = [replace(c, idea_id=idea_id) if idea_id else c for c in self.calls]
        return (*_unique(self.records), *calls)


class LlmBrain:
    def __init__(self, persona: Persona, settings: LlmSettings) -> None:
        self.persona = persona
        self.settings = settings
        self.label = f"{settings.client.provider} {settings.client.model}"

    async def propose(self, desk: Desk, idea_id: str, trace_id: str) -> Attempt:
        s = self.settings
        refusal = s.budget.refusal(desk.agent)
        if refusal is not None:
            return Attempt(None, why_not=f"stopped proposing: {refusal}", stopped=True)
        program = s.program.read_text()
        strategy = s.strategies.read(desk.agent, self.persona.value)
        version, new_strategy = s.strategies.version_of(desk.agent, strategy)
        calls = _Calls(desk.agent, trace_id, version, s)
        if new_strategy is not None:
            calls.records.append(new_strategy)
        prompt = Prompt(
            researcher_prefix(desk, program, strategy),
            (("user", researcher_request(desk)),),
            s.max_tokens,
        )
        for purpose in ("propose", "repair"):
            try:
                completion = await s.client.complete(prompt)
            except LlmError as exc:
                calls.add(prompt, purpose, None, "error", exc.reason)
                return Attempt(None, calls.done(), f"the LLM call failed: {exc.reason}", True)
            try:
                answer = parse_answer(completion.text)
                source = _usable(answer, desk)
            except ProtocolError as exc:
                calls.add(prompt, purpose, completion, "refused", exc.reason)
                turns = (
                    *prompt.turns,
                    ("assistant", completion.text),
                    ("user", repair_request(exc.reason)),
                )
                prompt = Prompt(prompt.static, turns, s.max_tokens)
                continue
            calls.add(prompt, purpose, completion, "ok")
            proposal = Proposal(
                answer.hypothesis,
                source,
                _changes(desk.source, source),
                self.persona,
                why=f"{self.label}, strategy v{version}, after {purpose}",
            )
            return Attempt(proposal, calls.done(idea_id))
        reason = calls.calls[-1].error
        return Attempt(None, calls.done(), f"answer refused after one repair: {reason}", True)


def _usable(answer: Answer, desk: Desk) -> str:
    """The patched recipe, or ProtocolError saying why the answer cannot be run."""
    source = apply_edits(desk.source, answer, desk.editable)
    try:
        compile(source, desk.editable, "exec")
    except SyntaxError as exc:
        raise ProtocolError(
            f"the edited {desk.editable} does not compile: {exc.msg} (line {exc.lineno})"
        ) from None
    if fingerprint(source) in desk.tried:
        raise ProtocolError(
            "this exact change was already tried on this champion; propose a different idea"
        )
    return source


def _changes(old: str, new: str) -> tuple[Change, ...]:
    try:
        return changes_between(old, new)
    except (SyntaxError, ValueError):
        return ()  # the constants could not be read; the diff still says what changed


def _unique(records: list[Message]) -> list[Message]:
    seen: set[str] = set()
    kept = []
    for record in records:
        if record.event_id not in seen:
            seen.add(record.event_id)
            kept.append(record)
    return kept
