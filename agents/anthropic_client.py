"""The Anthropic Messages API as an LlmClient.

The static prompt goes as one system block marked `cache_control: ephemeral`, so every call after
the first reads it from the prompt cache. The SDK's retries are off (`max_retries=0`):
`with_retries` counts them. In SDK 2.x `temperature` is not a `messages.create` argument; it
travels in `extra_body`. The SDK sends the key as `Authorization: Bearer`; it is redacted from
every error.
"""

from __future__ import annotations

import time

import anthropic
from anthropic.types import Message, MessageParam, TextBlock, TextBlockParam

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


class AnthropicClient:
    provider = "anthropic"

    def __init__(
        self,
        model: str,
        api_key: str,
        base_url: str | None,
        policy: RetryPolicy,
        temperature: float | None = None,
    ) -> None:
        if not api_key:
            # The SDK would quietly fall back to ANTHROPIC_API_KEY or a credentials profile.
            raise LlmError(
                "the anthropic brain needs an API key", status=None, retries=0, retryable=False
            )
        self.model = model
        self.policy = policy
        self.temperature = temperature
        self._secrets = (api_key,)
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key, base_url=base_url, max_retries=0, timeout=policy.timeout_s
        )
        self._closed = False

    async def complete(self, prompt: Prompt) -> Completion:
        started = time.monotonic()
        message, retries = await with_retries(lambda: self._attempt(prompt), self.policy)
        return Completion(
            text="".join(b.text for b in message.content if isinstance(b, TextBlock)),
            usage=_usage(message),
            model=message.model,
            latency_s=time.monotonic() - started,
            retries=retries,
            stop_reason=message.stop_reason or "",
        )

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self._client.close()

    async def _attempt(self, prompt: Prompt) -> Message:
        system: list[TextBlockParam] = [
            {"type": "text", "text": prompt.static, "cache_control": {"type": "ephemeral"}}
        ]
        messages: list[MessageParam] = []
        for role, text in prompt.turns:
            if role == "user":
                messages.append({"role": "user", "content": text})
            else:
                messages.append({"role": "assistant", "content": text})
        extra = None if self.temperature is None else {"temperature": self.temperature}
        try:
            return await self._client.messages.create(
                model=self.model,
                system=system,
                messages=messages,
                max_tokens=prompt.max_tokens,
                extra_body=extra,
            )
        except anthropic.APIError as exc:
            raise self._failure(exc) from None

    def _failure(self, exc: anthropic.APIError) -> ApiFailure:
        if isinstance(exc, anthropic.APIConnectionError):  # a timeout is one, too
            timed_out = isinstance(exc, anthropic.APITimeoutError)
            return transport_failure(timed_out, str(exc.__cause__ or exc), self._secrets)
        if isinstance(exc, anthropic.APIStatusError):
            said = " ".join(str(p) for p in (exc.type, exc.api_message) if p) or exc.message
            retry_after = exc.response.headers.get("retry-after")
            return status_failure(exc.status_code, said, retry_after, self._secrets)
        # e.g. a response that does not parse
        return unusable_failure(type(exc).__name__, exc.message, self._secrets)


def _usage(message: Message) -> Usage:
    usage = message.usage
    return Usage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_input_tokens or 0,
        cache_write_tokens=usage.cache_creation_input_tokens or 0,
    )
