"""The meta-agent: improves the researchers by rewriting their strategy files.

The task agents (researchers) propose ideas; the meta-agent works one level up. Periodically it
reads each LLM researcher's outcomes under its current strategy — every idea it proposed with
that strategy, how far each climbed, the hit rate (passed / proposed) per tier — and once
`min_outcomes` of them are decided, asks the model for a better strategy. The new file is
written to the workspace, where the researcher reads it before its next proposal, and recorded
as a StrategyVersion with the hit rates it was written from ("before"); the ledger's
strategy_hit_rates view gives each version's own ("after").
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from agents.brain import Finding
from agents.llm_brain import LlmSettings
from agents.llm_client import Completion, LlmError, Prompt
from agents.llm_prompt import meta_prefix, meta_request
from agents.llm_records import call_record, prefix_record
from agents.researcher import Researcher
from agents.strategy_book import text_sha
from bus.messages import LlmCall, Message, StrategyVersion

PASSED = frozenset({"PROMOTE", "HELD"})
STRATEGY = re.compile(r"<strategy>\s*(.*?)\s*</strategy>", re.DOTALL | re.IGNORECASE)
REASON = re.compile(r"^\W*reason\W*:\s*(.+)$", re.IGNORECASE | re.MULTILINE)
MAX_STRATEGY_CHARS = 4000


def passed(finding: Finding, tier: int) -> bool:
    if any(g.tier == tier and g.spot_check for g in finding.gains):
        return False  # rejected there, sent on by a spot check (stacked or not)
    if finding.stacked:
        return True
    if finding.tier > tier:
        return True
    return finding.tier == tier and finding.verdict in PASSED


def hit_rates(ideas: list[Finding], top_tier: int) -> dict[str, object]:
    """Per tier, the share of decided ideas that passed it."""
    decided = [f for f in ideas if f.verdict]
    promoted = {str(t): sum(passed(f, t) for f in decided) for t in range(top_tier + 1)}
    rate = {t: round(k / len(decided), 4) if decided else None for t, k in promoted.items()}
    return {"proposed": len(decided), "promoted": promoted, "hit_rate": rate}


@dataclass(frozen=True, slots=True)
class Review:
    records: tuple[Message, ...]
    rewritten: StrategyVersion | None = None
    why_not: str = ""


class MetaAgent:
    def __init__(self, name: str, settings: LlmSettings, min_outcomes: int) -> None:
        self.name = name
        self.settings = settings
        self.min_outcomes = min_outcomes

    async def review(self, researcher: Researcher) -> Review:
        """Rewrite `researcher`'s strategy if enough of its ideas under it are decided."""
        s = self.settings
        book = s.strategies
        current = book.latest.get(researcher.name)
        if current is None:
            return Review((), why_not="it has not proposed yet")
        ideas = [
            f for f in researcher.mine if researcher.idea_strategy.get(f.idea_id) == current.version
        ]
        decided = [f for f in ideas if f.verdict]
        if len(decided) < self.min_outcomes:
            return Review((), why_not=f"{len(decided)} of {self.min_outcomes} outcomes decided")
        refusal = s.budget.refusal(self.name)
        if refusal is not None:
            return Review((), why_not=refusal)
        rates = hit_rates(ideas, researcher.top_tier)
        prompt = Prompt(
            meta_prefix(s.program.read_text()),
            (("user", meta_request(researcher.name, current.text, json.dumps(rates), ideas)),),
            s.max_tokens,
        )
        version = book.next_version(researcher.name)
        strategy_id = f"strategy-{researcher.name}-v{version}"
        try:
            completion = await s.client.complete(prompt)
        except LlmError as exc:
            call = self._call(prompt, strategy_id, None, "error", exc.reason)
            return Review(self._records(prompt, call), why_not=exc.reason)
        text, reason = _parse(completion.text)
        if not text:
            why = "no <strategy>…</strategy> block in the answer"
            call = self._call(prompt, strategy_id, completion, "refused", why)
            return Review(self._records(prompt, call), why_not=why)
        call = self._call(prompt, strategy_id, completion, "ok")
        record = StrategyVersion(
            strategy_id,
            researcher.name,
            version,
            text,
            text_sha(text),
            author=self.name,
            reason=reason,
            hit_rates_before=rates,
            call_id=call.call_id,
        )
        book.rewrite(record)
        return Review((*self._records(prompt, call), record), record)

    def _call(
        self,
        prompt: Prompt,
        strategy_id: str,
        completion: Completion | None,
        status: str,
        error: str = "",
    ) -> LlmCall:
        s = self.settings
        call = call_record(
            self.name, "meta", prompt, s.client, s.price, completion, status, error, strategy_id
        )
        s.budget.observe(call, own=True)
        return call

    def _records(self, prompt: Prompt, call: LlmCall) -> tuple[Message, ...]:
        return (prefix_record(prompt), call)


def _parse(answer: str) -> tuple[str, str]:
    """The new strategy text ("" if missing) and the stated reason."""
    found = STRATEGY.search(answer)
    body = found.group(1).strip()[:MAX_STRATEGY_CHARS] if found else ""
    text = body + "\n" if body else ""
    reason = REASON.search(answer)
    return text, reason.group(1).strip() if reason else ""
