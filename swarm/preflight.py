"""Pre-flight: a swarm whose researchers could never propose anything stops before it starts.

Offline brains (tpe, gp, heuristic) only move the editable file's constants. Pointed at a file
with none they may move (a script whose config is below its code, or every dial fixed), they
would sit idle while trainers wait: `swarm start` and `swarm agents` refuse that up front,
naming the file and how to give the brains something to move. Likewise an LLM brain without
its key, price or research direction, experiments this machine cannot confine, a web view
beyond loopback with no credentials to ask for, and a workspace already at its experiment limit.

Light on purpose: `swarm start` runs these checks, and importing the researchers themselves
(autogen-core, Optuna, scikit-learn: ~2 s) is the agents process's cost, not the start's.
"""

from __future__ import annotations

from agents.brain_groups import LLM_BRAINS, parse_brain_groups
from agents.llm_client import RetryPolicy
from agents.llm_setup import LlmSetup, ProviderSettings
from agents.search_space import SpaceError, space_of
from recipes.constants import constants
from recipes.fixed import fixed_names, nothing_to_move
from swarm.config import ConfigError, SwarmConfig
from swarm.config_files import built_in
from swarm.errors import SwarmError
from swarm.ladder_process import target_info
from swarm.workspace import Workspace
from training.sandbox import UNSAFE_FLAG, missing_confinement


def project_fixed(config: SwarmConfig) -> frozenset[str]:
    """What the project holds fixed: `target.fixed` and the options its run command sets."""
    return fixed_names(config.target.fixed, config.target.run)


def check_editable(config: SwarmConfig, count: int) -> None:
    """When every researcher's brain is offline, the target's editable file must give them a
    constant to move; ConfigError names the file and how to fix it. An LLM researcher may edit
    any code, so with one in the swarm there is nothing to check."""
    groups = parse_brain_groups(config.agents.brain, count)
    if not groups or any(g.brain in LLM_BRAINS for g in groups):
        return
    info = target_info(config)
    path = info.initial_path
    source = info.initial_source()
    fixed = project_fixed(config)
    try:
        found = constants(source)
        space = space_of(source, fixed)
    except (SyntaxError, ValueError) as exc:  # SpaceError is a ValueError, and says what is wrong
        what = "its `search:` declarations" if isinstance(exc, SpaceError) else "it as Python"
        raise ConfigError(
            f"{path}: the offline researchers ({config.agents.brain}) cannot read {what}: {exc}"
        ) from None
    if not space.dimensions:
        raise ConfigError(
            f"{path}: the offline researchers ({config.agents.brain}) could propose nothing: "
            f"{nothing_to_move(found, info.editable, fixed)}; or give some researchers an LLM "
            "brain (agents.brain), which may edit any code"
        )


def llm_setup(config: SwarmConfig, workspace: Workspace) -> LlmSetup:
    llm = config.llm
    return LlmSetup(
        providers={
            "anthropic": ProviderSettings(
                llm.anthropic_model, llm.anthropic_base_url, llm.anthropic_api_key_env
            ),
            "openai": ProviderSettings(
                llm.openai_model, llm.openai_base_url, llm.openai_api_key_env
            ),
        },
        prices_path=built_in(config, "llm", "prices"),
        program=built_in(config, "agents", "program"),
        strategies_seed=built_in(config, "agents", "strategies"),
        strategies=workspace.root / "strategies",
        max_tokens=llm.max_tokens,
        temperature=llm.temperature if llm.temperature >= 0 else None,
        max_usd=llm.max_usd,
        max_usd_per_agent=llm.max_usd_per_agent,
        retry=RetryPolicy(max_retries=llm.max_retries, timeout_s=llm.timeout_s),
    )


def check_llm(config: SwarmConfig, workspace: Workspace, count: int) -> None:
    """Everything the LLM brains need (a key, a price, the research direction), before a
    process starts; LlmSetupError names what is missing. And, here so that `swarm start` and
    `swarm agents` both check it, that offline brains have something to move (ConfigError)."""
    check_editable(config, count)
    setup = llm_setup(config, workspace)
    providers = {g.brain for g in parse_brain_groups(config.agents.brain, count)}
    providers &= set(LLM_BRAINS)
    if providers and config.meta.enabled and config.meta.brain:
        providers.add(config.meta.brain)
    for provider in sorted(providers):
        setup.check(provider)


def check_confinement(config: SwarmConfig) -> str:
    """Refuse to run experiments this machine cannot confine, unless the user said so: then a
    warning to print. Untrusted code without Landlock or seccomp reaches all the trainer can
    (the workspace's credentials, the bus, other runs)."""
    if config.target.kind == "synthetic":
        return ""  # no code runs: an experiment is arithmetic in the trainer
    missing = missing_confinement()
    if not missing:
        return ""
    lacking = " and ".join(missing)
    if not config.trainers.unsafe_no_sandbox:
        raise ConfigError(
            f"this machine cannot confine experiments: it lacks {lacking}. Experiments would "
            f"run with the trainer's reach; pass {UNSAFE_FLAG} (or trainers.unsafe_no_sandbox = "
            "true) to run them anyway"
        )
    return f"swarm: {UNSAFE_FLAG}: experiments run unconfined (no {lacking})"


def check_web(config: SwarmConfig) -> None:
    """A web view beyond loopback needs credentials to ask for: the embedded server's cli
    role has its own; on an external bus, the user and password this command was given."""
    from swarm.web_command import is_loopback

    web, bus = config.web, config.bus
    if web.enabled and not is_loopback(web.host) and bus.url and not (bus.user and bus.password):
        raise ConfigError(
            f"web.host {web.host!r} is not loopback: on an external bus the web view needs "
            "bus.user and a password (SWARM_NATS_PASSWORD) to ask visitors for; or web.enabled "
            "= false, or --no-web"
        )


def check_limit_left(config: SwarmConfig, workspace: Workspace) -> None:
    """Refuse at once to resume a workspace whose ledger already holds the experiment limit:
    started anyway, the swarm would come up and stop at its first status line, saying nothing
    of why (a newcomer waited 26 s for that)."""
    import duckdb  # here: trainers import this module too, and need no ledger client

    from ledger.sql_protocol import SqlError
    from swarm.sql_client import LedgerUnavailable, read_file

    limit = config.limits.max_experiments
    if not limit or workspace.is_running() or not workspace.ledger_path.exists():
        return  # a running swarm is refused by its lock, below, with its own message
    try:
        done = read_file(workspace, config, "SELECT count(*) AS n FROM runs").table["n"][0].as_py()
    except (LedgerUnavailable, SqlError, duckdb.Error):
        return  # the ledger process will say what is wrong with it
    if done >= limit:
        raise SwarmError(
            f"{workspace.root} already holds {done} experiments, and the limit is {limit} "
            "(--max-experiments, or limits.max_experiments in the config): raise the limit to "
            "go on with this swarm, or pass another --workspace to start a new one"
        )
