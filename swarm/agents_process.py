"""`swarm agents`: a host of researcher agents joining a swarm (this machine's or another's)."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from pathlib import Path

from agents.heuristic_brain import Persona
from agents.host import HostOptions, run_host
from bus.nats_bus import BusSettings, connect
from scale_ladder.tiers import load_ladder
from swarm.config import SwarmConfig
from swarm.event_loop import stop_on_signals
from swarm.ladder_process import target_info


def host_options(config: SwarmConfig, count: int, name_prefix: str) -> HostOptions:
    info = target_info(config)
    tiers = load_ladder(Path(config.ladder.path)).tiers
    personas = tuple(Persona(p.strip()) for p in config.agents.personas.split(","))
    return HostOptions(
        count=count,
        name_prefix=name_prefix or socket.gethostname().split(".")[0],
        personas=personas,
        max_in_flight=config.agents.max_in_flight,
        seed=config.agents.seed,
        editable=info.editable,
        target=info.name,
        top_tier=len(tiers) - 1,
        max_message_bytes=config.bus.max_payload_bytes,
    )


async def run_agents(
    config: SwarmConfig, settings: BusSettings, count: int, name_prefix: str = ""
) -> None:
    # autogen-core logs every message it routes at INFO: far too much for a log file.
    logging.getLogger("autogen_core").setLevel(logging.WARNING)
    options = host_options(config, count, name_prefix)
    stop = asyncio.Event()
    stop_on_signals(stop)
    nc = await connect(settings, f"agents-{os.getpid()}", config.bus.connect_timeout_s)
    try:
        await run_host(nc, options, stop)
    finally:
        await nc.close()
