"""An OpenAI-compatible chat completions API as an LlmClient: OpenAI itself, or a local model
behind vLLM, Ollama or LM Studio (`base_url` such as "http://127.0.0.1:8000/v1").

The `openai` package is an optional extra, imported when a client is made. The static prompt is
the system message; these servers cache a repeated prefix on their own and report it as
`prompt_tokens_details.cached_tokens`, which `prompt_tokens` includes. Local servers may need no
key (one is sent anyway: the SDK insists) and may report no usage (zeros then).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from agents.llm_client import (
    ApiFailure,
    Completion,
    LlmError,
    Prompt,
    RetryPolicy,
    Usage,
    status_failure,
    transport_failure,
    unusable_failure,
    with_retries,
)

if TYPE_CHECKING:
    import openai
    from openai.types.chat import ChatCompletion, ChatCompletionMessageParam

NO_KEY = "not-needed"  # what a keyless local server gets


class OpenAICompatClient:
    provider = "openai"

    def __init__(
        self,
        model: str,
        api_key: str,
        base_url: str | None,
        policy: RetryPolicy,
        temperature: float | None = None,
    ) -> None:
        try:
            import openai
        except ImportError:
            raise LlmError(
                "the openai brain needs the optional extra: pip install 'research-swarm[openai]'",
                status=None,
                retries=0,
                retryable=False,
            ) from None
        self.model = model
        self.policy = policy
        self.temperature = temperature
        self._secrets = (api_key,)
        self._client = openai.AsyncOpenAI(
            api_key=api_key or NO_KEY, base_url=base_url, max_retries=0, timeout=policy.timeout_s
        )
        self._closed = False

    async def complete(self, prompt: Prompt) -> Completion:
        started = time.monotonic()
        response, retries = await with_retries(lambda: self._attempt(prompt), self.policy)
        choice = response.choices[0] if response.choices else None
        return Completion(
            text=(choice.message.content or "") if choice else "",
            usage=_usage(response),
            model=response.model,
            latency_s=time.monotonic() - started,
            retries=retries,
            stop_reason=(choice.finish_reason or "") if choice else "",
        )

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self._client.close()

    async def _attempt(self, prompt: Prompt) -> ChatCompletion:
        import openai

        messages: list[ChatCompletionMessageParam] = [{"role": "system", "content": prompt.static}]
        for role, text in prompt.turns:
            if role == "user":
                messages.append({"role": "user", "content": text})
            else:
                messages.append({"role": "assistant", "content": text})
        try:
            return await self._client.chat.completions.create(
                model=self.model,
                messages=messages,
                max_tokens=prompt.max_tokens,
                temperature=openai.omit if self.temperature is None else self.temperature,
            )
        except openai.APIError as exc:
            raise self._failure(exc) from None

    def _failure(self, exc: openai.APIError) -> ApiFailure:
        import openai

        if isinstance(exc, openai.APIConnectionError):  # a timeout is one, too
            timed_out = isinstance(exc, openai.APITimeoutError)
            return transport_failure(timed_out, str(exc.__cause__ or exc), self._secrets)
        if isinstance(exc, openai.APIStatusError):
            body = exc.body if isinstance(exc.body, dict) else {}
            said = " ".join(str(p) for p in (exc.code, body.get("message")) if p) or exc.message
            retry_after = exc.response.headers.get("retry-after")
            return status_failure(exc.status_code, said, retry_after, self._secrets)
        # e.g. a response that does not parse
        return unusable_failure(type(exc).__name__, exc.message, self._secrets)


def _usage(response: ChatCompletion) -> Usage:
    usage = response.usage
    if usage is None:
        return Usage()
    details = usage.prompt_tokens_details
    cached = (details.cached_tokens or 0) if details else 0
    return Usage(
        input_tokens=max(usage.prompt_tokens - cached, 0),
        output_tokens=usage.completion_tokens,
        cache_read_tokens=cached,
    )
