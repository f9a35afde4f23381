"""`swarm report`: the report of this workspace's swarm, from the running ledger or its file."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pyarrow as pa

from bus.nats_bus import connect
from ledger.duckdb_store import open_database
from swarm.config import SwarmConfig
from swarm.ladder_process import target_info
from swarm.report import ReportFiles, file_query, write_report
from swarm.sql_client import LedgerUnavailable, ask_ledger
from swarm.workspace import Workspace


async def write_swarm_report(
    config: SwarmConfig, workspace: Workspace, out: Path | None = None
) -> ReportFiles:
    out = out or workspace.root / "reports"
    lower = target_info(config).lower_is_better
    title = f"research-swarm: {workspace.root}"
    settings = workspace.read_bus_settings()
    if settings is not None and workspace.is_running():
        nc = await connect(settings, "swarm-report", config.bus.connect_timeout_s)
        loop = asyncio.get_running_loop()

        def ask(sql: str) -> pa.Table:  # runs in the report's thread, asks on this loop
            future = asyncio.run_coroutine_threadsafe(
                ask_ledger(nc, sql, config.ledger.sql_timeout_s + 5), loop
            )
            return future.result().table

        try:
            return await asyncio.to_thread(write_report, ask, out, title, lower)
        finally:
            await nc.close()
    if not workspace.ledger_path.exists():
        raise LedgerUnavailable(f"no ledger at {workspace.ledger_path}: start a swarm first")
    con = open_database(workspace.ledger_path, read_only=True)
    try:
        return write_report(file_query(con), out, title, lower)
    finally:
        con.close()
