"""Answering `swarm sql`: ask the running ledger over NATS, or read the file when stopped."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from nats.aio.client import Client

from bus.nats_bus import BusUnavailable, connect
from ledger.duckdb_store import LedgerLocked, open_database
from ledger.sql_gate import SqlRefused, run_query
from ledger.sql_protocol import LedgerUnavailable, SqlError, ask

__all__ = ["Answer", "LedgerUnavailable", "ask_ledger", "connect_running", "query", "read_file"]
from swarm.config import SwarmConfig
from swarm.workspace import Workspace


@dataclass(frozen=True, slots=True)
class Answer:
    table: pa.Table
    truncated: bool
    source: str  # "ledger" (asked the running swarm) or "file" (read the stopped ledger)


async def ask_ledger(nc: Client, sql: str, timeout_s: float, max_rows: int | None = None) -> Answer:
    """One SQL request to the running ledger. Raises SqlError with the ledger's reason."""
    table, truncated = await ask(nc, sql, timeout_s, max_rows)
    return Answer(table, truncated, "ledger")


def read_file(workspace: Workspace, config: SwarmConfig, sql: str) -> Answer:
    """Query the ledger file read-only, with the same gate, cap and timeout as the ledger."""
    path = workspace.ledger_path
    if not path.exists():
        raise LedgerUnavailable(
            f"no ledger at {path}: no swarm has run in {workspace.root} (start one with "
            "`swarm start`, or name another workspace with --workspace)"
        )
    try:
        con = open_database(path, read_only=True)
    except LedgerLocked:
        raise LedgerUnavailable(
            f"{path} is held by a running ledger that did not answer on the bus; "
            "retry in a moment, or check `swarm status`"
        ) from None
    try:
        result = run_query(con, sql, config.ledger.sql_row_cap, config.ledger.sql_timeout_s)
    except SqlRefused as exc:
        raise SqlError(str(exc)) from None
    finally:
        con.close()
    return Answer(result.table, result.truncated, "file")


async def connect_running(workspace: Workspace, config: SwarmConfig, name: str) -> Client | None:
    """The bus of the swarm running in `workspace`, as the cli role; None when none runs."""
    settings = workspace.read_bus_settings()
    if settings is None or not workspace.is_running():
        return None
    try:
        return await connect(settings, name, config.bus.connect_timeout_s)
    except BusUnavailable as exc:
        raise LedgerUnavailable(f"the swarm is running but {exc}") from None


async def query(workspace: Workspace, config: SwarmConfig, sql: str) -> Answer:
    nc = await connect_running(workspace, config, "swarm-sql")
    if nc is not None:
        try:
            # A little longer than the ledger's own limit, so its timeout message wins.
            return await ask_ledger(nc, sql, config.ledger.sql_timeout_s + 5)
        except LedgerUnavailable as exc:
            # Between a ledger crash and its restart the file is free: read it directly.
            try:
                return read_file(workspace, config, sql)
            except LedgerUnavailable:
                raise LedgerUnavailable(f"the swarm is running but {exc}") from None
        finally:
            await nc.close()
    return read_file(workspace, config, sql)
