"""Pre-flight: a swarm whose researchers could never propose anything stops before it starts.

Offline brains (tpe, gp, heuristic) only move the editable file's constants. Pointed at a file
with none they may move (a script whose config is below its code, or every dial fixed), they
would sit idle while trainers wait: `swarm start` and `swarm agents` refuse that up front,
naming the file and how to give the brains something to move.
"""

from __future__ import annotations

from agents.brain_groups import LLM_BRAINS, parse_brain_groups
from agents.search_space import SpaceError, space_of
from swarm.config import ConfigError, SwarmConfig
from swarm.ladder_process import target_info
from training.fixed_constants import fixed_names, nothing_to_move
from training.recipe_constants import constants


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
