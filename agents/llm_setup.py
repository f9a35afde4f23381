"""Making the LLM clients a host needs, from settings that never hold a key.

The key is read from the environment variable the config names, at the moment a client is made;
it is held only by the SDK client, and error messages are redacted (agents/llm_client.py).
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path

from agents.llm_client import LlmClient, Price, PriceTableError, RetryPolicy, load_prices

PROVIDERS = ("anthropic", "openai")
FREE = Price(0.0, 0.0)


class LlmSetupError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class ProviderSettings:
    model: str
    base_url: str  # empty: the provider's own API
    api_key_env: str  # the variable that holds the key


@dataclass(frozen=True, slots=True)
class LlmSetup:
    providers: dict[str, ProviderSettings]
    prices_path: Path
    program: Path
    strategies_seed: Path  # configs/strategies: each persona's first strategy
    strategies: Path  # the workspace's strategy files
    max_tokens: int = 2048
    temperature: float | None = None
    max_usd: float = 0.0
    max_usd_per_agent: float = 0.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)

    def check(self, provider: str) -> None:
        """Everything a `provider` brain needs before the swarm starts; LlmSetupError if not."""
        settings = self.providers[provider]
        if provider == "anthropic" and not os.environ.get(settings.api_key_env):
            raise LlmSetupError(
                f"brain 'anthropic' needs an API key in ${settings.api_key_env} "
                "(llm.anthropic_api_key_env names the variable)"
            )
        if provider == "openai" and importlib.util.find_spec("openai") is None:
            raise LlmSetupError(
                "brain 'openai' needs the optional extra: pip install 'research-swarm[openai]'"
            )
        if not self.program.is_file():
            raise LlmSetupError(f"agents.program: research direction not found: {self.program}")
        self.price(provider)

    def price(self, provider: str) -> Price:
        model = self.providers[provider].model
        try:
            prices = load_prices(self.prices_path)
        except FileNotFoundError:
            if provider == "anthropic":
                why = f"llm.prices: price table not found: {self.prices_path}"
                raise LlmSetupError(why) from None
            prices = {}
        except PriceTableError as exc:
            raise LlmSetupError(f"llm.prices: {exc}") from None
        if model in prices:
            return prices[model]
        if provider == "anthropic":
            raise LlmSetupError(
                f"no price for model {model!r} in {self.prices_path}; add one so the LLM "
                "budget can be counted"
            )
        return FREE  # a local model costs nothing per token

    def client(self, provider: str) -> LlmClient:
        settings = self.providers[provider]
        key = os.environ.get(settings.api_key_env, "")
        base_url = settings.base_url or None
        # Imported here: an SDK costs a second or more to import, which `swarm sql` should not pay.
        if provider == "anthropic":
            from agents.anthropic_client import AnthropicClient

            return AnthropicClient(settings.model, key, base_url, self.retry, self.temperature)
        from agents.openai_client import OpenAICompatClient  # the optional extra

        return OpenAICompatClient(settings.model, key, base_url, self.retry, self.temperature)
