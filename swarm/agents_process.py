"""`swarm agents`: a host of researcher agents joining a swarm (this machine's or another's)."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import socket

from agents.brain import Persona
from agents.brain_groups import LLM_BRAINS, parse_brain_groups
from agents.host import HostOptions, run_host
from bus.nats_bus import BusSettings, connect
from scale_ladder.tiers import load_ladder
from swarm.config import SwarmConfig
from swarm.config_files import ladder_path
from swarm.event_loop import stop_on_signals
from swarm.ladder_process import target_info
from swarm.preflight import check_llm, llm_setup, project_fixed
from swarm.workspace import Workspace


def host_options(
    config: SwarmConfig, workspace: Workspace, count: int, name_prefix: str
) -> HostOptions:
    info = target_info(config)
    tiers = load_ladder(ladder_path(config), config.target.kind).tiers
    prefix = name_prefix or socket.gethostname().split(".")[0]
    personas = tuple(Persona(p.strip()) for p in config.agents.personas.split(","))
    groups = parse_brain_groups(config.agents.brain, count)
    thinking = any(g.brain in LLM_BRAINS for g in groups)
    return HostOptions(
        count=count,
        name_prefix=prefix,
        personas=personas,
        max_in_flight=config.agents.max_in_flight,
        screen=config.agents.screen,
        seed=config.agents.seed,
        editable=info.editable,
        target=info.name,
        top_tier=len(tiers) - 1,
        max_message_bytes=config.bus.max_payload_bytes,
        groups=groups,
        llm=llm_setup(config, workspace) if thinking else None,
        cooldown_s=config.llm.cooldown_s,
        meta_interval_s=config.meta.interval_s if config.meta.enabled else 0.0,
        meta_min_outcomes=config.meta.min_outcomes,
        meta_brain=config.meta.brain,
        fixed=project_fixed(config),
        # One file per host name: its researchers' names, and so their memories, are its own.
        snapshot_path=workspace.run_dir / f"agents-{_file_safe(prefix)}.snapshot",
        snapshot_interval_s=config.agents.snapshot_interval_s,
    )


def _file_safe(name: str) -> str:
    """A file name for a host name: readable, and one of its own (two names that read alike,
    `lab 1` and `lab_1`, must not share a snapshot)."""
    readable = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:40]
    return f"{readable}-{hashlib.sha256(name.encode()).hexdigest()[:12]}"


async def run_agents(
    config: SwarmConfig,
    workspace: Workspace,
    settings: BusSettings,
    count: int,
    name_prefix: str = "",
) -> None:
    # autogen-core logs every message it routes at INFO: far too much for a log file.
    logging.getLogger("autogen_core").setLevel(logging.WARNING)
    # The SDKs log each request at INFO; a request never carries the key in its URL, but a
    # quiet log is easier to keep clean.
    for sdk in ("anthropic", "openai", "httpx", "httpcore"):
        logging.getLogger(sdk).setLevel(logging.WARNING)
    check_llm(config, workspace, count)
    options = host_options(config, workspace, count, name_prefix)
    # A host joining from another machine may have no workspace yet: its snapshot's folder,
    # private (the snapshot is a pickle it loads).
    workspace.run_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(workspace.run_dir, 0o700)
    stop = asyncio.Event()
    stop_on_signals(stop)
    nc = await connect(settings, f"agents-{os.getpid()}", config.bus.connect_timeout_s)
    try:
        await run_host(nc, options, stop)
    finally:
        await nc.close()
