"""Both LLM clients, through their real SDKs, against a local HTTP stub of each API.

One contract class runs every behaviour for both clients; a few tests cover what only one has
(Anthropic's cache_control block, the optional openai extra), the shared retry loop and the price
table.
"""

from __future__ import annotations

import asyncio
import json
import logging
import pickle
import socket
import subprocess
import sys
import traceback
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agents.anthropic_client import AnthropicClient
from agents.llm_client import (
    ApiFailure,
    Completion,
    LlmClient,
    LlmError,
    Price,
    PriceTableError,
    Prompt,
    RetryPolicy,
    Usage,
    backoff_s,
    cost_usd,
    load_prices,
    redact,
    with_retries,
)
from agents.openai_client import OpenAICompatClient
from tests.llm_stub_server import Reply, ScriptedReplies, StubLlmServer

KEY = "sk-test-SECRET-123"
FAST = RetryPolicy(max_retries=2, base_delay_s=0.01, max_delay_s=0.05, timeout_s=10.0)
STATIC = "You are a careful researcher. " * 40  # 1200 characters: 300 simulated tokens
PROMPT = Prompt(static=STATIC, turns=(("user", "Propose one change."),), max_tokens=256)
SONNET = Price(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)
PROVIDERS = ("anthropic", "openai")

MakeClient = Callable[..., LlmClient]


@pytest.fixture
def stub() -> Iterator[StubLlmServer]:
    with StubLlmServer() as server:
        yield server


def new_client(provider: str, url: str, **kwargs: Any) -> LlmClient:
    options: dict[str, Any] = {"api_key": KEY, "policy": FAST, **kwargs}
    if provider == "anthropic":
        return AnthropicClient("claude-test", base_url=url, **options)
    return OpenAICompatClient("local-test", base_url=f"{url}/v1", **options)


@pytest.fixture
async def clients() -> AsyncIterator[list[LlmClient]]:
    made: list[LlmClient] = []
    yield made
    for client in made:
        await client.close()


class TestContract:
    """What every LlmClient does, run against each API's stub."""

    @pytest.fixture(params=PROVIDERS)
    def provider(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)

    @pytest.fixture
    def make(self, provider: str, stub: StubLlmServer, clients: list[LlmClient]) -> MakeClient:
        def make(**kwargs: Any) -> LlmClient:
            client = new_client(provider, stub.url, **kwargs)
            clients.append(client)
            return client

        return make

    async def test_text_usage_and_model(self, provider: str, stub: StubLlmServer, make: MakeClient):
        if provider == "anthropic":
            usage: dict[str, Any] = {
                "input_tokens": 17,
                "output_tokens": 9,
                "cache_creation_input_tokens": 5,
                "cache_read_input_tokens": 3,
            }
            expected = Usage(
                input_tokens=17, output_tokens=9, cache_read_tokens=3, cache_write_tokens=5
            )
        else:  # prompt_tokens includes the cached ones
            usage = {
                "prompt_tokens": 20,
                "completion_tokens": 9,
                "total_tokens": 29,
                "prompt_tokens_details": {"cached_tokens": 3},
            }
            expected = Usage(input_tokens=17, output_tokens=9, cache_read_tokens=3)
        stub.respond = ScriptedReplies(Reply("Try a 2x learning rate.", usage=usage, model="m-7"))
        client = make()
        done = await client.complete(PROMPT)
        assert done.text == "Try a 2x learning rate."
        assert done.usage == expected
        assert done.model == "m-7"
        assert done.retries == 0
        assert done.stop_reason in ("end_turn", "stop")
        assert done.latency_s > 0
        assert client.provider == provider
        [request] = stub.requests
        assert request.api == provider
        assert request.headers["authorization"] == f"Bearer {KEY}"

    async def test_turns_in_order(self, provider: str, stub: StubLlmServer, make: MakeClient):
        turns = (("user", "one"), ("assistant", "two"), ("user", "three"))
        await make().complete(Prompt(static="rules", turns=turns, max_tokens=99))
        sent = stub.requests[0].json
        messages = [(m["role"], m["content"]) for m in sent["messages"]]
        if provider == "openai":
            assert messages[0] == ("system", "rules")
            messages = messages[1:]
        assert messages == list(turns)
        assert sent["max_tokens"] == 99

    async def test_second_call_reads_the_cache(self, provider: str, make: MakeClient):
        client = make()
        first = await client.complete(PROMPT)
        second = await client.complete(PROMPT)
        static_tokens = len(STATIC) // 4
        assert first.usage.cache_read_tokens == 0
        assert second.usage.cache_read_tokens == static_tokens
        assert second.usage.cache_write_tokens == 0
        if provider == "anthropic":
            assert first.usage.cache_write_tokens == static_tokens
            assert first.usage.input_tokens == second.usage.input_tokens  # uncached part only
        else:
            assert first.usage.input_tokens == second.usage.input_tokens + static_tokens
        u = second.usage
        expected = (u.input_tokens * 3.0 + u.output_tokens * 15.0 + static_tokens * 0.3) / 1e6
        assert cost_usd(u, SONNET) == pytest.approx(expected)

    async def test_rate_limit_then_success(self, stub: StubLlmServer, make: MakeClient):
        stub.respond = ScriptedReplies(Reply("slow down", status=429, headers={"retry-after": "0"}))
        done = await make().complete(PROMPT)
        assert done.retries == 1
        assert done.text == "ok"
        assert len(stub.requests) == 2

    @pytest.mark.parametrize("status", [500, 502, 503, 504, 529])
    async def test_server_errors_are_retried(
        self, stub: StubLlmServer, make: MakeClient, status: int
    ):
        stub.respond = ScriptedReplies(Reply("busy", status=status), Reply("busy", status=status))
        done = await make().complete(PROMPT)
        assert done.retries == 2

    async def test_retries_exhausted(self, stub: StubLlmServer, make: MakeClient):
        stub.respond = ScriptedReplies(fallback=Reply("slow down", status=429))
        with pytest.raises(LlmError) as caught:
            await make().complete(PROMPT)
        error = caught.value
        assert error.retryable
        assert error.retries == 2
        assert error.status == 429
        assert error.reason.startswith("rate limited (429) 3 times; gave up after 2 retries")
        assert len(stub.requests) == 3

    async def test_unauthorized_fails_at_once(self, stub: StubLlmServer, make: MakeClient):
        stub.respond = ScriptedReplies(Reply("invalid key", status=401))
        with pytest.raises(LlmError) as caught:
            await make().complete(PROMPT)
        assert not caught.value.retryable
        assert caught.value.retries == 0
        assert caught.value.status == 401
        assert "(401)" in caught.value.reason
        assert len(stub.requests) == 1

    @pytest.mark.parametrize("status", [401, 429])
    async def test_key_never_leaks(
        self, stub: StubLlmServer, make: MakeClient, caplog: pytest.LogCaptureFixture, status: int
    ):
        """Even when the server echoes the key back in its error message."""
        caplog.set_level(logging.DEBUG)
        stub.respond = ScriptedReplies(fallback=Reply(f"bad key {KEY} given", status=status))
        with pytest.raises(LlmError) as caught:
            await make().complete(PROMPT)
        error = caught.value
        logging.getLogger("test").exception("the call failed: %s", error)
        shown = [str(error), repr(error), error.reason, "".join(traceback.format_exception(error))]
        assert "[REDACTED]" in error.reason
        for text in [*shown, caplog.text]:
            assert KEY not in text

    async def test_temperature_reaches_the_server(self, stub: StubLlmServer, make: MakeClient):
        await make(temperature=0.25).complete(PROMPT)
        await make().complete(PROMPT)
        with_t, without = (r.json for r in stub.requests)
        assert with_t["temperature"] == 0.25
        assert "temperature" not in without

    async def test_timeout_is_retried(self, stub: StubLlmServer, make: MakeClient):
        stub.respond = ScriptedReplies(Reply("late", delay_s=2.0))
        policy = RetryPolicy(max_retries=2, base_delay_s=0.01, timeout_s=0.3)
        done = await make(policy=policy).complete(PROMPT)
        assert done.retries == 1
        assert done.text == "ok"

    async def test_connection_refused_is_retryable(self, provider: str, clients: list[LlmClient]):
        with socket.socket() as probe:  # a port nobody listens on
            probe.bind(("127.0.0.1", 0))
            url = f"http://127.0.0.1:{probe.getsockname()[1]}"
        client = new_client(provider, url, policy=RetryPolicy(max_retries=1, base_delay_s=0.01))
        clients.append(client)
        with pytest.raises(LlmError) as caught:
            await client.complete(PROMPT)
        assert caught.value.retryable
        assert caught.value.status is None
        assert caught.value.reason.startswith("connection failed 2 times; gave up after 1 retries")

    async def test_close_is_idempotent(self, make: MakeClient):
        client = make()
        await client.close()
        await client.close()


async def test_anthropic_marks_the_system_block_for_caching(stub: StubLlmServer, clients):
    clients.append(client := new_client("anthropic", stub.url))
    await client.complete(PROMPT)
    [request] = stub.requests
    assert request.path == "/v1/messages"
    assert request.json["system"] == [
        {"type": "text", "text": STATIC, "cache_control": {"type": "ephemeral"}}
    ]


async def test_anthropic_null_cache_fields_count_as_zero(stub: StubLlmServer, clients):
    usage = {"input_tokens": 4, "output_tokens": 2, "cache_creation_input_tokens": None}
    stub.respond = ScriptedReplies(Reply(usage=usage))
    clients.append(client := new_client("anthropic", stub.url))
    done = await client.complete(PROMPT)
    assert done.usage == Usage(input_tokens=4, output_tokens=2)


async def test_anthropic_needs_a_key():
    with pytest.raises(LlmError, match="needs an API key"):
        AnthropicClient("claude-test", api_key="", base_url=None, policy=FAST)


async def test_openai_without_usage_or_details(stub: StubLlmServer, clients):
    bare = {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}
    stub.respond = ScriptedReplies(Reply(send_usage=False), Reply(usage=bare))
    clients.append(client := new_client("openai", stub.url))
    assert (await client.complete(PROMPT)).usage == Usage()
    assert (await client.complete(PROMPT)).usage == Usage(input_tokens=12, output_tokens=3)
    assert {r.path for r in stub.requests} == {"/v1/chat/completions"}


async def test_openai_keyless_local_server(stub: StubLlmServer, clients):
    clients.append(client := new_client("openai", stub.url, api_key=""))
    await client.complete(PROMPT)
    assert stub.requests[0].headers["authorization"] == "Bearer not-needed"


def test_openai_extra_missing(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "openai", None)  # import openai now raises ImportError
    with pytest.raises(LlmError, match=r"pip install 'research-swarm\[openai\]'") as caught:
        OpenAICompatClient("m", api_key="", base_url="http://127.0.0.1:1/v1", policy=FAST)
    assert not caught.value.retryable


# The shared retry loop and helpers.


async def test_with_retries_honours_retry_after_capped():
    slept: list[float] = []
    script = [ApiFailure("overloaded (529)", status=529, retryable=True, retry_after_s=99.0)]

    async def call() -> str:
        if script:
            raise script.pop()
        return "done"

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    policy = RetryPolicy(max_delay_s=7.0)
    assert await with_retries(call, policy, sleep=sleep) == ("done", 1)
    assert slept == [7.0]


def test_backoff_is_full_jitter_within_a_growing_capped_window():
    policy = RetryPolicy(base_delay_s=1.0, max_delay_s=5.0)
    for retry, window in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 5.0), (9, 5.0)]:
        delays = [backoff_s(retry, policy) for _ in range(200)]
        assert all(0.0 <= d <= window for d in delays)
        assert max(delays) > window / 2
    assert backoff_s(3, policy, retry_after=0.0) == 0.0


async def test_with_retries_bounds_each_attempt():
    async def hang() -> None:
        await asyncio.sleep(60)

    policy = RetryPolicy(max_retries=1, base_delay_s=0.0, timeout_s=0.05)
    with pytest.raises(LlmError, match=r"timed out after 0.05s 2 times; gave up after 1 retries"):
        await with_retries(hang, policy)


async def test_with_retries_lets_bugs_raise():
    async def broken() -> None:
        raise KeyError("ours")

    with pytest.raises(KeyError):
        await with_retries(broken, FAST)


def test_mixed_failures_are_summarised():
    async def run() -> None:
        failures = [
            ApiFailure("rate limited (429)", status=429, retryable=True),
            ApiFailure("server error (503)", status=503, retryable=True, detail="down"),
        ]

        async def call() -> None:
            raise failures.pop(0)

        await with_retries(call, RetryPolicy(max_retries=1, base_delay_s=0.0))

    with pytest.raises(LlmError) as caught:
        asyncio.run(run())
    assert caught.value.reason == (
        "2 retryable failures, last server error (503); gave up after 1 retries: down"
    )
    assert caught.value.status == 503


def test_redact():
    assert redact(f"key {KEY}, again {KEY}", [KEY, ""]) == "key [REDACTED], again [REDACTED]"
    assert redact("nothing here", []) == "nothing here"


def test_llm_error_pickles():
    error = LlmError("gave up", status=429, retries=4, retryable=True)
    again = pickle.loads(pickle.dumps(error))
    assert repr(again) == repr(error)


def test_prompt_turns_must_start_and_end_with_user():
    for turns in [(), (("assistant", "a"), ("user", "b")), (("user", "a"), ("assistant", "b"))]:
        with pytest.raises(ValueError, match="start and end with a user turn"):
            Prompt(static="s", turns=turns)
    with pytest.raises(ValueError, match="unknown role 'system'"):
        Prompt(static="s", turns=(("user", "a"), ("system", "b"), ("user", "c")))


def test_completion_is_frozen():
    done = Completion("t", Usage(), "m", 0.1, 0, "end_turn")
    with pytest.raises(AttributeError):
        done.text = "x"  # type: ignore[misc]


# The price table.


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "prices.toml"
    path.write_text(text)
    return path


def test_the_shipped_price_table_loads():
    prices = load_prices(Path(__file__).parents[1] / "configs" / "llm_prices.toml")
    assert prices and all(p.input > 0 and p.output > 0 for p in prices.values())


def test_load_prices(tmp_path: Path):
    path = write(
        tmp_path,
        '[models."claude-sonnet-4-5"]\ninput = 3.0\noutput = 15\ncache_read = 0.3\n'
        "cache_write = 3.75\n[models.local]\ninput = 0\noutput = 0\n",
    )
    prices = load_prices(path)
    assert prices["claude-sonnet-4-5"] == SONNET
    assert prices["local"] == Price(input=0.0, output=0.0)
    assert cost_usd(Usage(input_tokens=1_000_000, output_tokens=2_000_000), SONNET) == 33.0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[models."m"]\ninput = 1.0\n', r'missing key models\."m"\.output'),
        ('[models."m"]\ninput = 1\noutput = 2\ncached = 3\n', r'unknown key models\."m"\.cached'),
        ('[models."m"]\ninput = "3"\noutput = 2\n', r'models\."m"\.input must be a number'),
        ('[models."m"]\ninput = -1\noutput = 2\n', r'models\."m"\.input must be >= 0'),
        ("[models]\nm = 3\n", r'models\."m" must be a table'),
        ("[prices]\n", "unknown key prices"),
        ("models = [", "not valid TOML"),
    ],
)
def test_price_table_errors_name_the_key_and_file(tmp_path: Path, text: str, message: str):
    path = write(tmp_path, text)
    with pytest.raises(PriceTableError, match=message) as caught:
        load_prices(path)
    assert str(path) in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_price_table_missing_file(tmp_path: Path):
    with pytest.raises(PriceTableError, match="price table not found") as caught:
        load_prices(tmp_path / "absent.toml")
    assert isinstance(caught.value, FileNotFoundError)  # callers may read it as "no prices"


# The stub itself, as another process sees it.


def test_stub_serves_another_process(stub: StubLlmServer):
    stub.respond = ScriptedReplies(Reply("from afar"))
    code = (
        "import json, sys, urllib.request\n"
        "body = json.dumps({'model': 'm', 'max_tokens': 5, 'system': 's',"
        " 'messages': [{'role': 'user', 'content': 'hi'}]}).encode()\n"
        "request = urllib.request.Request(sys.argv[1] + '/v1/messages', data=body,"
        " headers={'content-type': 'application/json'})\n"
        "print(urllib.request.urlopen(request, timeout=10).read().decode())\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, stub.url], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stderr
    message = json.loads(result.stdout)
    assert message["type"] == "message"
    assert message["content"] == [{"type": "text", "text": "from afar"}]
    assert message["usage"]["input_tokens"] > 0
    assert stub.requests[0].api == "anthropic"


def test_stub_unknown_path_and_error_shapes(stub: StubLlmServer):
    import urllib.error
    import urllib.request

    def post(path: str) -> tuple[int, Any]:
        request = urllib.request.Request(
            stub.url + path, data=b"{}", headers={"content-type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.load(response)
        except urllib.error.HTTPError as error:
            with error:
                return error.code, json.load(error)

    assert post("/v1/nowhere")[0] == 404
    stub.respond = ScriptedReplies(fallback=Reply("busy", status=529))
    assert post("/v1/messages") == (
        529,
        {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}},
    )
    status, body = post("/v1/chat/completions")
    assert status == 529
    assert body["error"]["message"] == "busy"
