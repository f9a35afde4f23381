"""The LLM interface the research brains talk to: a prompt in, a completion out, errors as data.

`Prompt` splits into a static prefix (the research direction, rules, strategy and recipe, sent as
the cached system prompt) and the varying turns. `Completion` carries the text with what it cost:
tokens by kind (uncached input, output, cache reads, cache writes), latency, and how many
retryable failures came first. Both clients (`anthropic_client.py`, `openai_client.py`) share
`with_retries`: the SDKs' own retries are off, so every retry is counted here.

A call that cannot succeed raises `LlmError` with fields (reason, status, retries, retryable); its
reason never holds an API key (`redact`). Nothing here imports an SDK.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import tomllib
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Protocol, TypeVar

T = TypeVar("T")
log = logging.getLogger(__name__)

ROLES = frozenset({"user", "assistant"})
REDACTED = "[REDACTED]"
TOKENS_PER_PRICE_UNIT = 1_000_000  # prices are USD per million tokens


@dataclass(frozen=True, slots=True)
class Prompt:
    static: str  # the cached prefix (system): research direction, rules, strategy, recipe
    turns: tuple[tuple[str, str], ...]  # (role, text): "user"/"assistant", first and last "user"
    max_tokens: int = 2048

    def __post_init__(self) -> None:
        if not self.turns or self.turns[0][0] != "user" or self.turns[-1][0] != "user":
            raise ValueError("Prompt.turns must start and end with a user turn")
        bad = [role for role, _ in self.turns if role not in ROLES]
        if bad:
            raise ValueError(f"Prompt.turns: unknown role {bad[0]!r}; roles are user, assistant")
        if self.max_tokens < 1:
            raise ValueError(f"Prompt.max_tokens must be positive, not {self.max_tokens}")


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int = 0  # uncached input tokens
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Completion:
    text: str
    usage: Usage
    model: str  # the model the API says answered
    latency_s: float  # wall time of the whole call, retries and back-off included
    retries: int  # how many retryable failures preceded the answer
    stop_reason: str


class LlmError(Exception):
    """A call that gave no completion. `retryable`: the failure was transient (rate limits,
    overload, 5xx, network) and the retries ran out; a later call may succeed."""

    def __init__(self, reason: str, *, status: int | None, retries: int, retryable: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.retries = retries
        self.retryable = retryable

    def __repr__(self) -> str:
        return (
            f"LlmError(reason={self.reason!r}, status={self.status}, "
            f"retries={self.retries}, retryable={self.retryable})"
        )

    def __reduce__(self) -> tuple[Any, ...]:  # keyword-only fields: pickle them explicitly
        return (_rebuild_llm_error, (self.reason, self.status, self.retries, self.retryable))


def _rebuild_llm_error(reason: str, status: int | None, retries: int, retryable: bool) -> LlmError:
    return LlmError(reason, status=status, retries=retries, retryable=retryable)


class ApiFailure(Exception):
    """One failed attempt, translated by a client from its SDK's exception; `with_retries`
    decides what follows. `reason` is short and the same for the same kind of failure
    ("rate limited (429)"); `detail` is what the server said. Both must be redacted already."""

    def __init__(
        self,
        reason: str,
        *,
        status: int | None,
        retryable: bool,
        detail: str = "",
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.retryable = retryable
        self.detail = detail
        self.retry_after_s = retry_after_s


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_retries: int = 4
    base_delay_s: float = 1.0  # exponential back-off with full jitter, capped:
    max_delay_s: float = 30.0  # a server's retry-after header (seconds) is honoured, capped here
    timeout_s: float = 120.0  # per request


@dataclass(frozen=True, slots=True)
class Price:  # USD per million tokens
    input: float
    output: float
    cache_read: float = 0.0
    cache_write: float = 0.0


class PriceTableError(ValueError):
    pass


class PriceTableNotFound(PriceTableError, FileNotFoundError):
    """Also a FileNotFoundError: a caller may treat a missing table as "no prices"."""


class LlmClient(Protocol):
    provider: str  # "anthropic" | "openai"
    model: str

    async def complete(self, prompt: Prompt) -> Completion: ...

    async def close(self) -> None: ...


def cost_usd(usage: Usage, price: Price) -> float:
    return (
        usage.input_tokens * price.input
        + usage.output_tokens * price.output
        + usage.cache_read_tokens * price.cache_read
        + usage.cache_write_tokens * price.cache_write
    ) / TOKENS_PER_PRICE_UNIT


# What the two SDKs raise maps to the same failures (both SDKs are generated alike).
RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504, 529})
STATUS_REASON = {429: "rate limited", 529: "overloaded"}


def status_failure(
    status: int, said: str, retry_after: str | None, secrets: Iterable[str]
) -> ApiFailure:
    """An HTTP error answer: retryable when rate limited, overloaded or a server error."""
    kind = STATUS_REASON.get(status, "server error" if status >= 500 else "HTTP error")
    return ApiFailure(
        f"{kind} ({status})",
        status=status,
        retryable=status in RETRYABLE_STATUS,
        detail=redact(said, secrets),
        retry_after_s=retry_after_s(retry_after),
    )


def transport_failure(timed_out: bool, cause: str, secrets: Iterable[str]) -> ApiFailure:
    """No answer at all: a timeout or a failed connection, both worth retrying."""
    if timed_out:
        return ApiFailure("request timed out", status=None, retryable=True)
    return ApiFailure(
        "connection failed", status=None, retryable=True, detail=redact(cause, secrets)
    )


def unusable_failure(name: str, message: str, secrets: Iterable[str]) -> ApiFailure:
    """An answer that does not parse as the API's response: retrying will not help."""
    said = redact(f"{name}: {message}", secrets)
    return ApiFailure("unusable response", status=None, retryable=False, detail=said)


def redact(text: str, secrets: Iterable[str]) -> str:
    """`text` with every non-empty secret replaced by [REDACTED], longest first."""
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text


def retry_after_s(value: str | None) -> float | None:
    """A `retry-after` header in seconds; None when absent or not a number of seconds."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None  # an HTTP date: rare from these APIs; fall back to our own back-off
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def backoff_s(retry: int, policy: RetryPolicy, retry_after: float | None = None) -> float:
    """Delay before retry number `retry` (1-based): the server's word if it gave one, else full
    jitter over an exponentially growing window; both capped at max_delay_s."""
    if retry_after is not None:
        return min(retry_after, policy.max_delay_s)
    window = min(policy.max_delay_s, policy.base_delay_s * 2 ** (retry - 1))
    return random.uniform(0.0, window)


async def with_retries(
    call: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
) -> tuple[T, int]:
    """Run `call` until it succeeds; return its result and how many retries it took.

    `call` raises ApiFailure for a failed attempt. Each attempt is bounded by policy.timeout_s
    (the SDKs' own timeouts are per phase; this bounds the whole request). A non-retryable
    failure raises LlmError at once; after max_retries retries, LlmError(retryable=True).
    """
    failures: list[ApiFailure] = []
    while True:
        try:
            async with asyncio.timeout(policy.timeout_s) as deadline:
                return await call(), len(failures)
        except ApiFailure as failure:
            if not failure.retryable:
                raise _final_error(failure, failure.reason, len(failures)) from None
            failures.append(failure)
        except TimeoutError:
            if not deadline.expired():
                raise
            failures.append(
                ApiFailure(f"timed out after {policy.timeout_s:g}s", status=None, retryable=True)
            )
        if len(failures) > policy.max_retries:
            raise _final_error(failures[-1], _gave_up(failures), policy.max_retries) from None
        delay = backoff_s(len(failures), policy, failures[-1].retry_after_s)
        log.info(
            "%s; retry %d of %d in %.2fs",
            failures[-1].reason,
            len(failures),
            policy.max_retries,
            delay,
        )
        await sleep(delay)


def _gave_up(failures: list[ApiFailure]) -> str:
    reasons = {f.reason for f in failures}
    what = (
        f"{failures[0].reason} {len(failures)} times"
        if len(reasons) == 1
        else f"{len(failures)} retryable failures, last {failures[-1].reason}"
    )
    return f"{what}; gave up after {len(failures) - 1} retries"


def _final_error(failure: ApiFailure, reason: str, retries: int) -> LlmError:
    if failure.detail:
        reason = f"{reason}: {failure.detail}"
    return LlmError(reason, status=failure.status, retries=retries, retryable=failure.retryable)


def load_prices(path: Path) -> dict[str, Price]:
    """A price table: `[models."claude-sonnet-4-5"]` with input, output and optionally
    cache_read, cache_write (USD per million tokens). Errors name the file and the key."""
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise PriceTableNotFound(f"price table not found: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise PriceTableError(f"{path}: not valid TOML: {exc}") from None
    for key in data:
        if key != "models":
            raise PriceTableError(f"{path}: unknown key {key}; expected a [models] table")
    models = data.get("models", {})
    if not isinstance(models, dict):
        raise PriceTableError(f"{path}: models must be a table of tables")
    return {name: _price(path, name, entry) for name, entry in models.items()}


def _price(path: Path, name: str, entry: object) -> Price:
    prefix = f'models."{name}"'
    if not isinstance(entry, dict):
        raise PriceTableError(f"{path}: {prefix} must be a table")
    known = [f.name for f in fields(Price)]
    for key, value in entry.items():
        if key not in known:
            raise PriceTableError(
                f"{path}: unknown key {prefix}.{key}; known keys: {', '.join(known)}"
            )
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise PriceTableError(f"{path}: {prefix}.{key} must be a number, not {value!r}")
        if not math.isfinite(value) or value < 0:
            raise PriceTableError(f"{path}: {prefix}.{key} must be >= 0, not {value!r}")
    for key in ("input", "output"):
        if key not in entry:
            raise PriceTableError(f"{path}: missing key {prefix}.{key}")
    return Price(**{key: float(value) for key, value in entry.items()})
