"""`swarm ladder`: the scale ladder as its own process (started and restarted by `swarm start`).

Exactly one ladder runs per swarm: it is the only maker of RunSpecs, Decisions and champion
versions. It needs no torch: only the target's name, editable file, direction and first recipe.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from bus.nats_bus import connect
from bus.roles import Role
from recipes.fixed import fixed_names
from scale_ladder.ladder import Ladder
from scale_ladder.seeds import DEFAULT_SEED_SECRET
from scale_ladder.service import LadderOptions, LadderService
from scale_ladder.tiers import Tier, load_ladder
from swarm.config import ConfigError, SwarmConfig, TargetConfig
from swarm.config_files import ladder_path
from swarm.corpus_choice import on_secret_language
from swarm.event_loop import stop_on_signals
from swarm.ledger_process import SwarmNotRunning
from swarm.workspace import Workspace
from training.command_io import CommandError, MetricReader, check_placeholders
from training.corpus import corpus_hash
from training.held_out import hidden_from_training
from training.target_info import BYTELM, SYNTHETIC, TargetInfo


def target_info(config: SwarmConfig) -> TargetInfo:
    t = config.target
    if t.kind == "bytelm":
        return BYTELM
    if t.kind == "synthetic":
        return SYNTHETIC
    require_target_keys(config, ("edit", "metric"))
    project = Path(t.project).resolve()
    if not (project / t.edit).is_file():
        raise ConfigError(
            f"the editable file {t.edit!r} (target.edit in swarm.toml, or --edit): no such file "
            f"in {project}"
        )
    return TargetInfo("command", t.edit, t.metric, t.direction == "minimize", project / t.edit)


def require_target_keys(config: SwarmConfig, keys: tuple[str, ...]) -> None:
    missing = [key for key in keys if not getattr(config.target, key)]
    if missing:
        raise ConfigError(
            f"--target command needs {', '.join('--' + m for m in missing)} "
            "(target." + ", target.".join(missing) + " in the config)"
        )


def metric_reader(config: SwarmConfig) -> MetricReader:
    t = config.target
    return MetricReader(t.metric, t.metric_from, t.metric_regex)


def check_command(config: SwarmConfig, tiers: list[Tier]) -> None:
    """A command target's run command and metric work at every tier, before anything runs."""
    require_target_keys(config, ("edit", "run", "metric"))
    try:
        metric_reader(config).check()
        check_placeholders(config.target.run, ((t.name, t.dials) for t in tiers))
        check_two_stage(config.target, tiers)
    except CommandError as exc:
        raise ConfigError(str(exc)) from None


def held_out_patterns(target: TargetConfig) -> tuple[str, ...]:
    return tuple(p.strip() for p in target.held_out.split(",") if p.strip())


def check_two_stage(target: TargetConfig, tiers: list[Tier]) -> None:
    """The evaluation command's placeholders, and held-out files that exist and can be hidden."""
    if target.eval:
        tiers_dials = ((t.name, t.dials) for t in tiers)
        check_placeholders(target.eval, tiers_dials, "target.eval", ("train_dir",))
    hidden_from_training(Path(target.project), held_out_patterns(target), bool(target.eval))


def make_ladder(config: SwarmConfig, seed_secret: bytes = DEFAULT_SEED_SECRET) -> Ladder:
    """The ladder a config describes. A swarm's ladder gets its workspace's seed secret
    (Workspace.seed_secret); the default one is for checking a config."""
    info = target_info(config)
    ladder = load_ladder(ladder_path(config), config.target.kind)
    if info.name == "command":
        check_command(config, ladder.tiers)
    return Ladder(
        ladder.tiers,
        info.editable,
        info.initial_source(),
        target=info.name,
        lower_is_better=info.lower_is_better,
        require_approval=ladder.require_approval,
        near_duplicate_similarity=ladder.near_duplicate_similarity,
        fixed=fixed_names(config.target.fixed, config.target.run),
        seed_secret=seed_secret,
    )


def pin_corpus(ladder: Ladder, config: SwarmConfig, workspace: Workspace) -> None:
    """The secret language's hash, the swarm's data before any run: its RunSpecs carry it from
    the first, so a trainer with another swarm's secret (another language) is refused from its
    first job, instead of setting the swarm's data by finishing the first baseline. Other
    data is recorded from the first baseline run (baselines.record_corpus): this machine may
    not hold the workers' folder or Python. A snapshot that recorded other data (a swarm begun
    on the stdlib) restores its own, and trainers on the secret language are then refused."""
    if on_secret_language(config):
        ladder.pinned_corpus = corpus_hash(
            workspace.corpus_dir, language_key=workspace.language_key()
        )


async def run_ladder(config: SwarmConfig, workspace: Workspace) -> None:
    settings = workspace.read_bus_settings(Role.LADDER)
    if settings is None:
        raise SwarmNotRunning(f"no bus settings in {workspace.bus_file}: is the swarm started?")
    ladder = make_ladder(config, workspace.seed_secret())
    pin_corpus(ladder, config, workspace)
    stop = asyncio.Event()
    stop_on_signals(stop)
    nc = await connect(settings, "ladder", config.bus.connect_timeout_s)
    try:
        options = LadderOptions(
            max_message_bytes=config.bus.max_payload_bytes,
            max_specs=config.limits.max_experiments,
            snapshot_path=workspace.run_dir / "ladder.snapshot",
            snapshot_interval_s=config.ladder.snapshot_interval_s,
        )
        await LadderService(nc, ladder, options).run(stop)
    finally:
        await nc.close()
