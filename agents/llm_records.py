"""What the ledger keeps of an LLM call: an LlmCall (the varying part of the prompt, the whole
answer, tokens, cost) and, once per distinct prefix, a PromptPrefix with the cached text."""

from __future__ import annotations

import hashlib
import json

from agents.llm_client import Completion, LlmClient, Price, Prompt, cost_usd
from bus.messages import LlmCall, PromptPrefix, new_id


def prefix_record(prompt: Prompt) -> PromptPrefix:
    return PromptPrefix(hashlib.sha256(prompt.static.encode()).hexdigest(), prompt.static)


def call_record(
    agent: str,
    purpose: str,
    prompt: Prompt,
    client: LlmClient,
    price: Price,
    completion: Completion | None,
    status: str,
    error: str = "",
    trace_id: str = "",
    strategy_version: int = 0,
) -> LlmCall:
    prefix_sha = hashlib.sha256(prompt.static.encode()).hexdigest()
    dynamic = json.dumps([list(turn) for turn in prompt.turns], ensure_ascii=False)
    whole = hashlib.sha256(f"{prefix_sha}\n{dynamic}".encode()).hexdigest()
    if completion is None:  # the API failed: nothing answered, nothing billed
        return LlmCall(
            new_id("llm"), agent, purpose, client.provider, client.model, status, whole,
            prefix_sha, dynamic, "", error=error, trace_id=trace_id,
            strategy_version=strategy_version,
        )  # fmt: skip
    usage = completion.usage
    return LlmCall(
        new_id("llm"),
        agent,
        purpose,
        client.provider,
        completion.model or client.model,
        status,
        whole,
        prefix_sha,
        dynamic,
        completion.text,
        error=error,
        tokens_in=usage.input_tokens,
        tokens_out=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        cost_usd=cost_usd(usage, price),
        latency_s=completion.latency_s,
        retries=completion.retries,
        trace_id=trace_id,
        strategy_version=strategy_version,
    )
