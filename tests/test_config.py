"""Config loads into frozen dataclasses; every mistake names its key."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from agents.brain_groups import BrainSpecError, parse_brain_groups
from swarm.config import ConfigError, SwarmConfig, load_config, parse_config, with_overrides
from swarm.corpus_choice import corpus_of

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


@pytest.mark.parametrize(
    ("count", "spec", "groups"),
    [
        (4, "heuristic", [("heuristic", 4)]),
        (8, "anthropic:6,heuristic:2", [("anthropic", 6), ("heuristic", 2)]),
        (8, "anthropic:6,heuristic", [("anthropic", 6), ("heuristic", 2)]),
        (3, " openai , heuristic:1", [("openai", 2), ("heuristic", 1)]),
        (0, "heuristic", []),
    ],
)
def test_brain_groups_split_the_agents(count: int, spec: str, groups: list[object]) -> None:
    parsed = parse_brain_groups(spec, count)
    assert [(g.brain, g.count) for g in parsed] == groups


@pytest.mark.parametrize(
    ("count", "spec", "message"),
    [
        (4, "claude", "unknown brain 'claude'"),
        (4, "anthropic:6,heuristic:2", "names 8 researchers but the swarm has 4"),
        (4, "anthropic,openai", "only one brain may go without a count"),
        (4, "anthropic:x", "must be a whole number"),
        (4, "anthropic:1,anthropic:3", "named twice"),
        (4, "portfolio:0,tpe", "count of 'portfolio' in 'portfolio:0,tpe' must be 1 or more"),
        (4, "anthropic:5,heuristic", "names 5 researchers, more than 4"),
        (4, "", "empty brain"),
    ],
)
def test_bad_brain_groups_say_what_is_wrong(count: int, spec: str, message: str) -> None:
    with pytest.raises(BrainSpecError, match=message):
        parse_brain_groups(spec, count)
    with pytest.raises(ConfigError, match=r"agents\.brain"):
        parse_config({"agents": {"count": count, "brain": spec}})


def test_llm_settings_are_checked_at_load() -> None:
    with pytest.raises(ConfigError, match=r"llm\.max_usd must be 0 or more"):
        parse_config({"llm": {"max_usd": -1}})
    with pytest.raises(ConfigError, match=r"meta\.brain must be one of"):
        parse_config({"meta": {"brain": "gpt"}})
    config = parse_config({"agents": {"count": 8, "brain": "anthropic:6,heuristic"}})
    assert config.agents.brain == "anthropic:6,heuristic"


@pytest.mark.parametrize(
    ("bus", "message"),
    [
        ({"listen": "4222"}, "bus.listen: expected HOST:PORT such as 0.0.0.0:4222, got '4222'"),
        ({"listen": "0.0.0.0:99999"}, "bus.listen: expected HOST:PORT"),
        ({"server_tls_cert": "c.pem"}, "bus.server_tls_cert needs bus.server_tls_key too"),
        ({"server_tls_key": "k.pem"}, "bus.server_tls_key needs bus.server_tls_cert too"),
        ({"server_tls_client_ca": "ca.pem"}, "bus.server_tls_client_ca needs bus.server_tls_cert"),
        (
            {"server_tls_cert": "c", "server_tls_key": "k", "server_tls_client_ca": "ca"},
            r"bus.server_tls_client_ca \(mutual TLS\) needs bus.tls_cert",
        ),
        (
            {"server_tls_cert": "/no/c.pem", "server_tls_key": "k"},
            "bus.server_tls_cert: no such file",
        ),
    ],
)
def test_listener_and_tls_mistakes_name_the_key(bus: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config({"bus": bus})


def test_listen_defaults_to_loopback_and_a_free_port(tmp_path: Path) -> None:
    from swarm.config import listen_address

    assert listen_address("") == ("127.0.0.1", -1)
    assert listen_address("0.0.0.0:4222") == ("0.0.0.0", 4222)
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.write_text("x")
    key.write_text("x")
    bus = {"listen": "0.0.0.0:4222", "server_tls_cert": str(cert), "server_tls_key": str(key)}
    assert parse_config({"bus": bus}).bus.listen == "0.0.0.0:4222"


def test_a_web_view_beyond_loopback_on_an_external_bus_needs_credentials_to_ask_for() -> None:
    from swarm.preflight import check_web

    config = with_overrides(SwarmConfig(), "bus", url="nats://h:4222", token="t")
    check_web(config)  # loopback: nothing to ask visitors for
    wide = with_overrides(config, "web", host="0.0.0.0")
    with pytest.raises(ConfigError, match=r"web.host '0.0.0.0' is not loopback.*bus.user"):
        check_web(wide)
    check_web(with_overrides(wide, "bus", user="u", password="p"))
    check_web(with_overrides(SwarmConfig(), "web", host="0.0.0.0"))  # the embedded bus's own


def test_auto_data_is_the_secret_language_where_a_researcher_writes_code() -> None:
    """A constant reads no file, so researchers that only move constants train on the stdlib;
    one LLM researcher among them (it writes code) makes it the secret language; a data
    the user names is kept whatever the brains."""
    default = SwarmConfig()
    assert default.target.data == "auto" and corpus_of(default) == "stdlib"
    mixed = with_overrides(default, "agents", brain="anthropic:1,tpe:3")
    assert corpus_of(mixed) == "secret"
    assert corpus_of(with_overrides(mixed, "target", data="stdlib")) == "stdlib"
    assert corpus_of(with_overrides(default, "target", data="secret")) == "secret"
    assert corpus_of(with_overrides(default, "target", data="/data/mine")) == "/data/mine"
