"""Answering `swarm sql`: ask the running ledger over NATS, or read the file when stopped."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from nats.aio.client import Client
from nats.errors import MaxPayloadError, NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from bus.nats_bus import BusUnavailable, connect
from bus.subjects import SQL_SUBJECT
from ledger.duckdb_store import LedgerLocked, open_database
from ledger.sql_gate import SqlRefused, run_query
from ledger.sql_protocol import STATUS, TRUNCATED, SqlError, SqlRequest, ipc_to_table
from swarm.config import SwarmConfig
from swarm.workspace import Workspace


class LedgerUnavailable(RuntimeError):
    """Neither a running ledger nor a readable ledger file: the message says what to do."""


@dataclass(frozen=True, slots=True)
class Answer:
    table: pa.Table
    truncated: bool
    source: str  # "ledger" (asked the running swarm) or "file" (read the stopped ledger)


async def ask_ledger(nc: Client, sql: str, timeout_s: float, max_rows: int | None = None) -> Answer:
    """One SQL request to the running ledger. Raises SqlError with the ledger's reason."""
    body = SqlRequest(sql, max_rows).encode()
    try:
        reply = await nc.request(SQL_SUBJECT, body, timeout=timeout_s)
    except MaxPayloadError:
        raise SqlError(
            f"the request is {len(body)} bytes, larger than a bus message ({nc.max_payload} bytes)"
        ) from None
    except NoRespondersError:
        raise LedgerUnavailable("no ledger is answering on the bus (is it restarting?)") from None
    except (TimeoutError, NatsTimeout):
        raise LedgerUnavailable(f"the ledger did not answer within {timeout_s:g}s") from None
    headers = reply.headers or {}
    if headers.get(STATUS) != "ok":
        raise SqlError(reply.data.decode(errors="replace"))
    return Answer(ipc_to_table(reply.data), headers.get(TRUNCATED) == "1", "ledger")


def read_file(workspace: Workspace, config: SwarmConfig, sql: str) -> Answer:
    """Query the ledger file read-only, with the same gate, cap and timeout as the ledger."""
    path = workspace.ledger_path
    if not path.exists():
        raise LedgerUnavailable(
            f"no ledger at {path}: start a swarm first (`swarm start`) or pass --workspace"
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


async def query(workspace: Workspace, config: SwarmConfig, sql: str) -> Answer:
    settings = workspace.read_bus_settings()
    if settings is not None and workspace.is_running():
        try:
            nc = await connect(settings, "swarm-sql", config.bus.connect_timeout_s)
        except BusUnavailable as exc:
            raise LedgerUnavailable(f"the swarm is running but {exc}") from None
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
