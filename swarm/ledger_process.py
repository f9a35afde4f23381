"""`swarm ledger`: the ledger as its own process (started and restarted by `swarm start`)."""

from __future__ import annotations

import asyncio
import logging

from bus.nats_bus import connect
from bus.roles import Role
from ledger.retention import Retention
from ledger.service import LedgerOptions, LedgerService
from swarm.config import SwarmConfig
from swarm.event_loop import stop_on_signals
from swarm.workspace import Workspace

log = logging.getLogger(__name__)


class SwarmNotRunning(RuntimeError):
    pass


def ledger_options(config: SwarmConfig, workspace: Workspace) -> LedgerOptions:
    return LedgerOptions(
        db_path=workspace.ledger_path,
        snapshot_dir=workspace.snapshot_dir,
        batch_size=config.ledger.batch_size,
        commit_interval_s=config.ledger.commit_interval_s,
        snapshot_interval_s=config.ledger.snapshot_interval_s,
        sql_row_cap=config.ledger.sql_row_cap,
        sql_timeout_s=config.ledger.sql_timeout_s,
        max_message_bytes=config.bus.max_payload_bytes,
        retention=Retention(
            keep_s=config.ledger.events_keep_days * 86400,
            keep_bytes=int(config.ledger.events_keep_gb * 1e9),
        ),
    )


async def run_ledger(config: SwarmConfig, workspace: Workspace) -> None:
    settings = workspace.read_bus_settings(Role.LEDGER)
    if settings is None:
        raise SwarmNotRunning(f"no bus settings in {workspace.bus_file}: is the swarm started?")
    stop = asyncio.Event()
    stop_on_signals(stop)
    nc = await connect(settings, "ledger", config.bus.connect_timeout_s)
    try:
        await LedgerService(nc, ledger_options(config, workspace)).run(stop)
    finally:
        await nc.close()
