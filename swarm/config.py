"""`swarm.toml` loaded into frozen dataclasses, validated at load.

A wrong key or value stops start-up with a ConfigError naming the key (`bus.max_payload_bytes`),
before anything runs. The CLI overrides a few keys with `dataclasses.replace`. Which file is
read, and what its paths are relative to, is swarm/config_files.py's business.
"""

from __future__ import annotations

import dataclasses
import json
import math
import tomllib
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.brain_groups import BrainSpecError, parse_brain_groups
from swarm.corpus_choice import AUTO_DATA


class ConfigError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class WorkspaceConfig:
    path: str = ""  # in a config file: relative to the file; "": ./swarm-workspace


@dataclass(frozen=True, slots=True)
class BusConfig:
    url: str = ""  # empty: run an embedded nats-server on loopback
    token: str = ""
    user: str = ""
    password: str = ""
    creds_file: str = ""
    tls_ca: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    max_payload_bytes: int = 8 * 1024 * 1024  # embedded server only; NATS' default is 1 MiB
    connect_timeout_s: float = 5.0
    # The embedded server only: where it listens ("0.0.0.0:4222" lets other hosts join; empty:
    # loopback, a free port) and its own TLS certificate, key and (mutual TLS) client CA.
    listen: str = ""
    server_tls_cert: str = ""
    server_tls_key: str = ""
    server_tls_client_ca: str = ""


@dataclass(frozen=True, slots=True)
class LedgerConfig:
    batch_size: int = 2000
    commit_interval_s: float = 0.05
    snapshot_interval_s: float = 5.0
    sql_row_cap: int = 10_000
    sql_timeout_s: float = 10.0
    restart_delay_s: float = 1.0
    # The event stream's retention (ledger/retention.py): the ledger purges events older than
    # this many days, or the oldest beyond this size, once it holds them. 0: keep everything.
    events_keep_days: float = 0.0
    events_keep_gb: float = 0.0


@dataclass(frozen=True, slots=True)
class TargetConfig:
    kind: str = "bytelm"  # bytelm (built in) | command (your own project) | synthetic (dry run)
    # bytelm: "auto", "secret", "stdlib" (or ""), or your own text file or folder
    # (swarm/corpus_choice.py)
    data: str = AUTO_DATA
    project: str = ""  # command: the project folder (copied per experiment); "": this folder
    edit: str = ""  # command: the one editable file, relative to the project
    run: str = ""  # command: how to run one experiment, e.g. "python train.py --seed={seed}"
    metric: str = ""  # command: the metric's name
    metric_from: str = "line"  # line (`name: value`) | regex (metric_regex) | json
    metric_regex: str = ""  # one group: the number; the last match wins
    # constants the researchers leave alone: names or globs, comma-separated ("out_dir, wandb_*");
    # a constant the run command sets (`--name=...`) is left alone too
    fixed: str = ""
    direction: str = "minimize"  # minimize | maximize
    swarm_python: bool = True  # the swarm's interpreter first on the command's PATH
    # command, two stages: the evaluation command (from the unpatched project; it reads the
    # training's checkpoint in {train_dir} and prints the metric), and files only it may read
    # (globs relative to the project, comma-separated: "data/*/test.bin")
    eval: str = ""
    held_out: str = ""


@dataclass(frozen=True, slots=True)
class TrainersConfig:
    count: int = -1  # trainer processes `swarm start` runs; -1: one per CPU core; 0: none
    device: str = "auto"  # auto (cuda when available) | cpu | cuda
    tiers: str = ""  # tiers served, e.g. "0,1"; empty: all
    # Run experiments even where Landlock or seccomp cannot be applied (`--unsafe-no-sandbox`):
    # without it, such a trainer refuses to start and such a run is REFUSED.
    unsafe_no_sandbox: bool = False
    # Each experiment's address-space limit (RLIMIT_AS), in GiB; -1: 4 on CPU and none on CUDA
    # (CUDA reserves far more virtual memory than any such limit allows); 0: none.
    address_space_gb: float = -1


@dataclass(frozen=True, slots=True)
class LadderConfig:
    path: str = ""  # empty: the built-in ladder for the target (swarm/config_files.py)
    # how often the ladder writes its state (a restart reads only the events after it)
    snapshot_interval_s: float = 60.0


@dataclass(frozen=True, slots=True)
class AgentsConfig:
    count: int = 4  # researcher agents `swarm start` hosts (`--agents N`); 0: none
    # tpe | gp | heuristic | portfolio (offline) | anthropic | openai, or groups such as
    # "anthropic:6,tpe:2" (one group may go without a count: it takes the rest)
    brain: str = "tpe"
    personas: str = "explorer,exploiter,combiner,ablator"  # assigned to agents in turn
    # ideas one agent may have undecided below the top tier (and as many again on it)
    max_in_flight: int = 2
    # heuristic and LLM researchers draw this many candidates per idea and send the one a
    # Gaussian process fitted to the findings rates best (agents/screening.py); 1: off
    screen: int = 1
    seed: int = 0  # the offline brains' random seed (heuristic agent i uses seed + i)
    program: str = ""  # the research direction, re-read before each proposal; "": built in
    strategies: str = ""  # each persona's first strategy file (<persona>.md); "": built in
    # how often a host writes its folded state (a restart reads only the events after it)
    snapshot_interval_s: float = 60.0


@dataclass(frozen=True, slots=True)
class LlmConfig:
    anthropic_model: str = "claude-sonnet-4-6"
    anthropic_base_url: str = ""  # empty: Anthropic's API
    anthropic_api_key_env: str = "ANTHROPIC_API_KEY"  # the variable holding the key, never the key
    openai_model: str = "qwen2.5-coder:7b"
    openai_base_url: str = "http://127.0.0.1:11434/v1"  # Ollama; vLLM: http://HOST:8000/v1
    openai_api_key_env: str = "OPENAI_API_KEY"  # local servers usually need none
    prices: str = ""  # USD per million tokens, per model; "": built in
    max_tokens: int = 2048  # of one answer
    temperature: float = -1.0  # negative: the model's default
    max_usd: float = 0.0  # the swarm's LLM budget (`--max-llm-usd`); 0: no limit
    max_usd_per_agent: float = 0.0  # 0: no per-agent limit
    max_retries: int = 4  # rate-limited (429) or overloaded (529) answers retried per call
    timeout_s: float = 120.0  # one request
    cooldown_s: float = 30.0  # after a failed call, wait (doubling, up to 10x) before the next


@dataclass(frozen=True, slots=True)
class MetaConfig:
    enabled: bool = True  # a meta-agent rewrites LLM researchers' strategy files
    interval_s: float = 600.0  # how often it looks at each researcher
    min_outcomes: int = 4  # decided ideas under the current strategy before it is rewritten
    brain: str = ""  # anthropic | openai; empty: the researchers' own


@dataclass(frozen=True, slots=True)
class LimitsConfig:
    max_experiments: int = 0  # stop the swarm after this many RunResults; 0 = no limit


@dataclass(frozen=True, slots=True)
class StatusConfig:
    interval_s: float = 5.0


@dataclass(frozen=True, slots=True)
class WebConfig:
    # `swarm start` serves the read-only web view (swarm/web/) on this address: loopback by
    # default; any other host needs credentials (HTTP Basic as the bus's cli role: README).
    enabled: bool = True
    host: str = "127.0.0.1"
    port: int = 8765  # taken: another free port, printed; 0: any free port
    refresh_s: float = 2.0  # how often an open page asks for news


@dataclass(frozen=True, slots=True)
class SwarmConfig:
    workspace: WorkspaceConfig = field(default_factory=WorkspaceConfig)
    bus: BusConfig = field(default_factory=BusConfig)
    ledger: LedgerConfig = field(default_factory=LedgerConfig)
    status: StatusConfig = field(default_factory=StatusConfig)
    target: TargetConfig = field(default_factory=TargetConfig)
    trainers: TrainersConfig = field(default_factory=TrainersConfig)
    ladder: LadderConfig = field(default_factory=LadderConfig)
    agents: AgentsConfig = field(default_factory=AgentsConfig)
    llm: LlmConfig = field(default_factory=LlmConfig)
    meta: MetaConfig = field(default_factory=MetaConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    web: WebConfig = field(default_factory=WebConfig)


# Values that must be positive, by dotted key.
POSITIVE = {
    "bus.max_payload_bytes",
    "bus.connect_timeout_s",
    "ledger.batch_size",
    "ledger.snapshot_interval_s",
    "ladder.snapshot_interval_s",
    "agents.snapshot_interval_s",
    "ledger.sql_row_cap",
    "ledger.sql_timeout_s",
    "status.interval_s",
    "agents.max_in_flight",
    "agents.screen",
    "llm.max_tokens",
    "llm.timeout_s",
    "meta.interval_s",
    "meta.min_outcomes",
    "web.refresh_s",
}


# Values that must be 0 or more, by dotted key.
NONNEGATIVE = {
    "agents.count",
    "limits.max_experiments",
    "llm.max_usd",
    "llm.max_usd_per_agent",
    "llm.max_retries",
    "ledger.commit_interval_s",
    "ledger.events_keep_days",
    "ledger.events_keep_gb",
    "llm.cooldown_s",
    "web.port",
}


# Values that must be one of a few words, by dotted key.
CHOICES = {
    "target.kind": ("bytelm", "command", "synthetic"),
    "target.direction": ("minimize", "maximize"),
    "target.metric_from": ("line", "regex", "json"),
    "trainers.device": ("auto", "cpu", "cuda"),
    "meta.brain": ("", "anthropic", "openai"),
}


def load_config(path: Path) -> SwarmConfig:
    """The config in `path`, checked; its paths as written (see config_files.load)."""
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path}: cannot be read: {exc}") from None
    return parse_config(data, str(path))


def parse_config(data: dict[str, Any], source: str = "config") -> SwarmConfig:
    config = _build(SwarmConfig, data, "", source)
    assert isinstance(config, SwarmConfig)
    check_brains(config, source)
    check_bus(config.bus, source)
    return config


def listen_address(listen: str) -> tuple[str, int]:
    """`bus.listen` as (host, port); "" is loopback with a port the server picks (-1)."""
    if not listen:
        return "127.0.0.1", -1
    host, sep, port = listen.rpartition(":")
    if not (sep and host and port.isdigit() and 0 < int(port) < 65536):
        raise ValueError(f"expected HOST:PORT such as 0.0.0.0:4222, got {listen!r}")
    return host, int(port)


def check_bus(bus: BusConfig, source: str = "config") -> None:
    """The embedded server's listener and TLS files, and the client TLS pair, fit together."""
    try:
        listen_address(bus.listen)
    except ValueError as exc:
        raise ConfigError(f"{source}: bus.listen: {exc}") from None
    for have, need in (
        ("server_tls_cert", "server_tls_key"),
        ("server_tls_key", "server_tls_cert"),
    ):
        if getattr(bus, have) and not getattr(bus, need):
            raise ConfigError(f"{source}: bus.{have} needs bus.{need} too")
    if bus.server_tls_client_ca and not bus.server_tls_cert:
        raise ConfigError(
            f"{source}: bus.server_tls_client_ca needs bus.server_tls_cert and server_tls_key"
        )
    if bus.server_tls_client_ca and not bus.tls_cert and not bus.url:
        raise ConfigError(
            f"{source}: bus.server_tls_client_ca (mutual TLS) needs bus.tls_cert (and tls_key): "
            "the swarm's own processes connect with that client certificate"
        )
    for key in ("server_tls_cert", "server_tls_key", "server_tls_client_ca"):
        path = getattr(bus, key)
        if path and not Path(path).is_file():
            raise ConfigError(f"{source}: bus.{key}: no such file {path!r}")


def check_brains(config: SwarmConfig, source: str = "config") -> None:
    """agents.brain must fit agents.count (both may come from the command line)."""
    try:
        parse_brain_groups(config.agents.brain, config.agents.count)
    except BrainSpecError as exc:
        raise ConfigError(f"{source}: agents.brain: {exc}") from None


def _build(cls: type[Any], data: Any, prefix: str, source: str) -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: [{prefix.rstrip('.')}] must be a table")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for key in data:
        if key not in names:
            raise ConfigError(
                f"{source}: unknown key {prefix}{key!s}; known keys: {', '.join(sorted(names))}"
            )
    values: dict[str, Any] = {}
    for name, value in data.items():
        key, hint = f"{prefix}{name}", hints[name]
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            values[name] = _build(hint, value, f"{key}.", source)
            continue
        values[name] = _check(key, hint, value, source)
    return cls(**values)


def _check(key: str, hint: Any, value: Any, source: str) -> Any:
    ok = (
        (hint is str and isinstance(value, str))
        or (hint is int and isinstance(value, int) and not isinstance(value, bool))
        or (hint is float and isinstance(value, int | float) and not isinstance(value, bool))
        or (hint is bool and isinstance(value, bool))
    )
    if not ok:
        raise ConfigError(
            f"{source}: {key} must be {hint.__name__}, got {type(value).__name__} {value!r}"
        )
    if hint is float and not math.isfinite(value):  # nan passes every comparison below
        raise ConfigError(f"{source}: {key} must be a finite number, got {value!r}")
    if key in POSITIVE and value <= 0:
        raise ConfigError(f"{source}: {key} must be positive, got {value!r}")
    if key in CHOICES and value not in CHOICES[key]:
        raise ConfigError(
            f"{source}: {key} must be one of {', '.join(CHOICES[key])}, got {value!r}"
        )
    if key in NONNEGATIVE and value < 0:
        raise ConfigError(f"{source}: {key} must be 0 or more, got {value}")
    if key == "agents.personas":
        known = ("explorer", "exploiter", "combiner", "ablator")
        bad = [p for p in value.split(",") if p.strip() not in known]
        if bad or not value.strip():
            raise ConfigError(
                f"{source}: {key}: unknown persona {bad[0] if bad else ''!r}; "
                f"choose from {', '.join(known)}"
            )
    if key == "trainers.count" and value < -1:
        raise ConfigError(f"{source}: {key} must be -1 (one per core), 0 or more, got {value}")
    return float(value) if hint is float else value


def with_overrides(config: SwarmConfig, section: str, **values: Any) -> SwarmConfig:
    """Replace keys of one section, skipping None (CLI flags that were not given)."""
    given = {k: v for k, v in values.items() if v is not None}
    if not given:
        return config
    updated = dataclasses.replace(getattr(config, section), **given)
    return dataclasses.replace(config, **{section: updated})


def dump_config(config: SwarmConfig) -> str:
    """TOML for `config`, so child processes run with exactly the supervisor's settings
    (command-line overrides included)."""
    lines = []
    for section in dataclasses.fields(config):
        lines.append(f"[{section.name}]")
        values = getattr(config, section.name)
        for f in dataclasses.fields(values):
            value = getattr(values, f.name)
            # JSON scalars are TOML scalars, given the characters as they are: JSON's \ud83d
            # surrogate pairs are not valid TOML escapes.
            lines.append(f"{f.name} = {json.dumps(value, ensure_ascii=False)}")
        lines.append("")
    return "\n".join(lines)
