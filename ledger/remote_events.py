"""Events the stream no longer holds, read from the running ledger over the bus.

With retention on (ledger/retention.py) the stream keeps only its recent events, and the ledger
purges none it has not stored, so the two together hold every event. A reader that needs events
from before the stream's first one (a restart without a usable snapshot, or with one older than
what the stream holds, or a new agents host) reads those from the ledger, through the same SQL
gate as `swarm sql`: the rows of the kinds it folds, by stream sequence, in stream order, as the
messages they were made from (ledger/readback.py, which `swarm audit` uses on the file).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable
from typing import Any

import pyarrow as pa
from nats.aio.client import Client

from bus.codec import CodecError, decode
from bus.messages import Message
from bus.subjects import event_subject
from ledger.readback import select_list, to_message
from ledger.schema import TABLES
from ledger.sql_protocol import LedgerUnavailable, SqlError, ask

PAGE_ROWS = 1000  # rows per request; fewer when the ledger cuts a reply to fit a bus message
# At a swarm's start the ladder and the hosts may ask before the ledger answers: they wait.
LEDGER_WAIT_S = 60.0


async def ledger_events(
    nc: Client,
    kinds: Iterable[str],
    after: int,
    before: int,
    timeout_s: float = 30.0,
    max_bytes: int = 64 * 1024 * 1024,
) -> list[tuple[int, Message]]:
    """(stream seq, message) of the stored events of `kinds` with after < seq < before, in
    stream order."""
    kinds = set(kinds)
    found: list[tuple[int, Message]] = []
    for kind in sorted(kinds & TABLES.keys()):
        table = TABLES[kind]
        columns, _ = await _ask(
            nc,
            f"SELECT column_name FROM information_schema.columns WHERE table_name = '{table.name}'",
            timeout_s,
        )
        select = select_list(table, set(columns.column("column_name").to_pylist()))
        async for row in _rows(nc, select, table.name, after, before, timeout_s):
            seq = row.pop("stream_seq")
            found.append((seq, to_message(table, list(row.values()))))
    kept = await _kept(nc, after, before, timeout_s, max_bytes)
    found = [(seq, m) for seq, m in found if seq not in kept]
    found += [(seq, m) for seq, m in kept.items() if m is not None and m.KIND in kinds]
    found.sort(key=lambda item: item[0])
    return found


async def _ask(nc: Client, sql: str, timeout_s: float) -> tuple[pa.Table, bool]:
    """One request, asked again while no ledger answers (it is starting or restarting), for up
    to LEDGER_WAIT_S."""
    waited, pause = 0.0, 0.25
    while True:
        try:
            return await ask(nc, sql, timeout_s)
        except LedgerUnavailable:
            if waited >= LEDGER_WAIT_S:
                raise
            await asyncio.sleep(pause)
            waited, pause = waited + pause, min(pause * 2, 5.0)


async def _kept(
    nc: Client, after: int, before: int, timeout_s: float, max_bytes: int
) -> dict[int, Message | None]:
    """The events the ledger kept as the stream held them (their rows would not give them back
    as they were: ledger/migrations.py), decoded as a reader of the stream decodes them."""
    kept: dict[int, Message | None] = {}
    select = "stream_seq, subject, data"
    async for row in _rows(nc, select, "kept_events", after, before, timeout_s):
        message = None
        with contextlib.suppress(CodecError):
            message = decode(row["data"], max_bytes)
        if message is not None and row["subject"] != event_subject(message):
            message = None  # as bus/replay.py: not on its own kind's subject
        kept[row["stream_seq"]] = message
    return kept


async def _rows(
    nc: Client, select: str, table: str, after: int, before: int, timeout_s: float
) -> AsyncIterator[dict[str, Any]]:
    """The rows of `table` with after < stream_seq < before, in stream order, a page per
    request (a page the ledger cut to fit a reply goes on from its last row)."""
    low = after
    while True:
        rows, cut = await _ask(
            nc,
            f"SELECT {select} FROM {table} WHERE stream_seq > {low} "
            f"AND stream_seq < {before} ORDER BY stream_seq LIMIT {PAGE_ROWS}",
            timeout_s,
        )
        if rows.num_rows == 0 and cut:
            raise SqlError(f"a {table} row after stream seq {low} is larger than a reply")
        for row in rows.to_pylist():
            low = row["stream_seq"]
            yield row
        if rows.num_rows < PAGE_ROWS and not cut:
            return
