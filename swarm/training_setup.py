"""Wiring training to the config and workspace: the target, the champion recipe, the tiers,
the device, and the `swarm run` and `swarm worker` commands."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from bus.messages import RunResult, RunSpec, RunStatus, new_id
from bus.nats_bus import BusSettings, connect
from bus.untrusted import for_terminal
from scale_ladder.tiers import Tier, load_tiers
from swarm.config import ConfigError, SwarmConfig
from swarm.config_files import ladder_path
from swarm.corpus_choice import SECRET_DATA, STDLIB_DATA, corpus_of, on_secret_language
from swarm.event_loop import stop_on_signals
from swarm.ladder_process import check_command, held_out_patterns, metric_reader, target_info
from swarm.preflight import check_confinement
from swarm.workspace import Workspace
from training.run_limits import RunLimits
from training.sandbox import Limits
from training.spec_recipe import patched_or_refused
from training.synthetic import SyntheticTarget
from training.targets import BytelmTarget, CommandTarget, Target
from training.trainer import Trainer, TrainerOptions


def make_target(config: SwarmConfig, workspace: Workspace) -> Target:
    t = config.target
    if t.kind == "bytelm":
        data = corpus_of(config)
        if data == SECRET_DATA:
            return BytelmTarget(workspace.corpus_dir, language_key=workspace.language_key())
        own = data not in ("", STDLIB_DATA)
        return BytelmTarget(workspace.corpus_dir, Path(data) if own else None)
    if t.kind == "synthetic":
        return SyntheticTarget()
    check_command(config, tiers(config))  # before any run: a bad regex fails here, named
    info = target_info(config)
    return CommandTarget(
        Path(t.project).resolve(),
        info.editable,
        t.run,
        metric_reader(config),
        info.lower_is_better,
        own_python=t.swarm_python,
        skip=(workspace.root.resolve(),),
        eval_command=t.eval,
        held_out=held_out_patterns(t),
    )


def resolve_device(name: str) -> str:
    """Device "auto": cuda where torch sees a GPU, else cpu. Without an NVIDIA driver loaded
    there is none to see, and torch (~1.4 s, ~200 MB) is not imported to be told so: a trainer
    of the synthetic or a command target never needs it."""
    if name != "auto":
        return name
    if not Path("/proc/driver/nvidia").exists():
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def tiers(config: SwarmConfig) -> list[Tier]:
    return load_tiers(ladder_path(config), config.target.kind)


def limits_for(tier: Tier, config: SwarmConfig | None = None, device: str = "cpu") -> RunLimits:
    """A tier's limits under `config` (the defaults without one, as the benches use)."""
    config = config or SwarmConfig()
    return RunLimits(
        time_limit_s=tier.time_limit_s,
        eval_tokens=tier.eval_tokens,
        limits=Limits(address_space_bytes=address_space_bytes(config, device)),
        unsafe_no_sandbox=config.trainers.unsafe_no_sandbox,
    )


def address_space_bytes(config: SwarmConfig, device: str) -> int:
    """The experiment's RLIMIT_AS (0: none): `trainers.address_space_gb`, by default 4 GiB on
    CPU and none on CUDA, whose start-up reserves address space far past any useful limit
    (GPU memory is the GPU's own to bound; host memory, the machine's)."""
    gib = config.trainers.address_space_gb
    if gib < 0:
        return 0 if device.startswith("cuda") else Limits().address_space_bytes
    return int(gib * 1024**3)


def run_spec(tier: Tier, seed: int, patch: str = "", idea_id: str = "") -> RunSpec:
    return tier.run_spec(new_id("run"), seed, idea_id=idea_id, patch=patch)


async def run_once(
    config: SwarmConfig, workspace: Workspace, tier_index: int, seed: int, patch: str, device: str
) -> RunResult:
    """`swarm run`: one experiment through the same sandboxed runner the trainers use."""
    ladder = tiers(config)
    if not 0 <= tier_index < len(ladder):
        raise ConfigError(f"--tier {tier_index}: the ladder has tiers 0..{len(ladder) - 1}")
    tier = ladder[tier_index]
    if warning := check_confinement(config):
        print(warning, file=sys.stderr)
    workspace.create()
    target = make_target(config, workspace)
    spec = run_spec(tier, seed, patch)
    device = resolve_device(device)
    recipe = patched_or_refused(spec, target.initial_source(), target.editable, device, "swarm-run")
    if isinstance(recipe, RunResult):
        return recipe
    return await asyncio.to_thread(
        target.run,
        spec,
        recipe,
        limits_for(tier, config, device),
        workspace.root / "scratch",
        device,
        "swarm-run",
        workspace.logs_dir / "runs",
    )


def summary(result: RunResult, metric_name: str, measured: bool = True) -> str:
    """The greppable `key: value` lines every run ends with. A command target's own run says
    nothing about its steps, tokens, FLOPs or memory: `measured` False shows them as unknown
    rather than as 0. A run that failed ends with the tail of its log."""

    def known(value: str) -> str:
        return value if measured else "unknown"

    lines = {
        "status": result.status.value,
        metric_name: "none" if result.metric is None else f"{result.metric:.6f}",  # said, not blank
        # the same metric on training text the run was never sent (training/control_windows.py)
        **(
            {f"control_{metric_name}": f"{result.control_metric:.6f}"}
            if result.control_metric is not None
            else {}
        ),
        "steps": known(str(result.steps)),
        "tokens": known(str(result.tokens)),
        "train_seconds": f"{result.train_seconds:.2f}",
        **({"eval_seconds": f"{result.eval_seconds:.2f}"} if result.eval_seconds else {}),
        "flops": known(f"{result.flops:.3e}"),
        "peak_mem_mb": known(f"{result.peak_mem_mb:.0f}"),
        "device": result.device,
        **({"unconfined": "yes (--unsafe-no-sandbox)"} if result.unconfined else {}),
        "corpus_hash": known(result.corpus_hash),
        "run_id": result.run_id,
    }
    if result.reason:
        lines["reason"] = for_terminal(result.reason, newlines=False)
    text = "\n".join(f"{key}: {value}" for key, value in lines.items())
    if result.status != RunStatus.OK and result.log_tail:
        text += f"\n--- the end of its log ---\n{for_terminal(result.log_tail.rstrip())}"
    return text


async def run_worker(
    config: SwarmConfig, workspace: Workspace, settings: BusSettings, serve: str
) -> None:
    """`swarm worker`: a trainer on this machine serving the given tiers until stopped."""
    ladder = tiers(config)
    wanted = serve or config.trainers.tiers
    indexes = tuple(int(t) for t in wanted.split(",")) if wanted else tuple(t.index for t in ladder)
    if warning := check_confinement(config):
        print(warning, file=sys.stderr)
    if on_secret_language(config) and not workspace.seed_secret_file.exists():
        # a secret made here would be another language: every run refused for its corpus
        raise ConfigError(
            f"target.data {config.target.data!r} is the swarm's secret language here, drawn "
            "from its secret: copy its workspace's run/seed_secret to "
            f"{workspace.seed_secret_file} (mode 0600) first"
        )
    workspace.create()
    target = make_target(config, workspace)
    device = resolve_device(config.trainers.device)
    options = TrainerOptions(
        tiers=indexes,
        device=device,
        scratch_dir=workspace.root / "scratch",
        log_dir=workspace.logs_dir / "runs",
        default_limits={t.index: limits_for(t, config, device) for t in ladder},
        max_message_bytes=config.bus.max_payload_bytes,
        max_concurrent={t.index: t.max_concurrent for t in ladder},
        instant_target=isinstance(target, SyntheticTarget),
    )
    stop = asyncio.Event()
    stop_on_signals(stop)
    nc = await connect(settings, f"trainer-{os.getpid()}", config.bus.connect_timeout_s)
    try:
        await Trainer(nc, target, options).run(stop)
    finally:
        await nc.close()
