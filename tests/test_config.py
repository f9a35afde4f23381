"""Config loads into frozen dataclasses; every mistake names its key."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from swarm.config import ConfigError, SwarmConfig, load_config, parse_config, with_overrides

REPO = Path(__file__).resolve().parents[1]


def test_shipped_config_matches_the_defaults() -> None:
    assert load_config(REPO / "configs" / "swarm.toml") == SwarmConfig()


def test_values_are_typed_and_frozen() -> None:
    config = parse_config({"ledger": {"sql_timeout_s": 3}, "bus": {"url": "nats://h:4222"}})
    assert config.ledger.sql_timeout_s == 3.0 and isinstance(config.ledger.sql_timeout_s, float)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.bus.url = "x"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"ledgr": {}}, "unknown key ledgr"),
        ({"ledger": {"batch_sise": 1}}, "unknown key ledger.batch_sise"),
        ({"ledger": {"batch_size": "10"}}, "ledger.batch_size must be int, got str '10'"),
        ({"ledger": {"batch_size": True}}, "ledger.batch_size must be int"),
        ({"ledger": {"batch_size": 0}}, "ledger.batch_size must be positive"),
        ({"ledger": {"sql_timeout_s": -1.5}}, "ledger.sql_timeout_s must be positive"),
        ({"bus": {"url": 4222}}, "bus.url must be str"),
        ({"bus": "nats://x"}, r"\[bus\] must be a table"),
    ],
)
def test_mistakes_name_the_key(data: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(data, "swarm.toml")


def test_file_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "missing.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text("[ledger\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(broken)


def test_overrides_skip_flags_not_given() -> None:
    config = with_overrides(SwarmConfig(), "bus", url="nats://h:4222", token=None)
    assert config.bus.url == "nats://h:4222" and config.bus.token == ""
    assert with_overrides(config, "bus", url=None) is config
