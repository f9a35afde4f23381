"""Where the web view reads: a running swarm's ledger over the bus, or a stopped ledger's file.

Both go through the SQL gate `swarm sql` uses (the ledger answers one read-only statement per
request; the file is opened read-only and each statement passes the same gate), so the web
view is one more reader, never a writer. A running swarm also tells its queues (JetStream).
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

import pyarrow as pa
from nats.aio.client import Client

from swarm.config import SwarmConfig
from swarm.live_snapshot import trainer_queues
from swarm.sql_client import ask_ledger, read_file
from swarm.workspace import Workspace


class Source(Protocol):
    running: bool

    async def table(self, sql: str) -> pa.Table: ...

    async def queues(self) -> dict[int, tuple[int, int]]:
        """(queued, running) per tier; empty when the swarm is stopped."""
        ...


async def rows(source: Source, sql: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = (await source.table(sql)).to_pylist()
    return found


class BusSource:
    """A running swarm, through its ledger's SQL endpoint (as the cli role)."""

    running = True

    def __init__(self, nc: Client, timeout_s: float) -> None:
        self.nc, self.timeout_s = nc, timeout_s

    async def table(self, sql: str) -> pa.Table:
        return (await ask_ledger(self.nc, sql, self.timeout_s)).table

    async def queues(self) -> dict[int, tuple[int, int]]:
        return await trainer_queues(self.nc, self.timeout_s)


class FileSource:
    """A stopped swarm's ledger file, opened read-only for each statement."""

    running = False

    def __init__(self, workspace: Workspace, config: SwarmConfig) -> None:
        self.workspace, self.config = workspace, config

    async def table(self, sql: str) -> pa.Table:
        return (await asyncio.to_thread(read_file, self.workspace, self.config, sql)).table

    async def queues(self) -> dict[int, tuple[int, int]]:
        return {}
