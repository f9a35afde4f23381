"""The ledger process: the only DuckDB writer.

It pulls events from the durable `ledger` consumer in batches, commits each batch in one DuckDB
transaction and acks only after the commit: a crash before the commit loses nothing (JetStream
redelivers), a crash after it duplicates nothing (primary keys on event ids). It also answers SQL
on `swarm.sql` and writes Parquet snapshots of the tables every few seconds.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg

from bus.codec import CodecError, decode_versioned
from bus.dead_letters import dead_letter, letter_id
from bus.messages import DeadLetter, Message, event_key
from bus.subjects import (
    EVENTS_STREAM,
    LEDGER_CONSUMER,
    LEDGER_DELIVER_SUBJECT,
    LEDGER_MAX_ACK_PENDING,
    PREFIX,
    SQL_SUBJECT,
    ensure_ledger_consumer,
)
from ledger import retention
from ledger.duckdb_store import LedgerStore
from ledger.retention import Retention
from ledger.sql_gate import SqlRefused, run_query
from ledger.sql_protocol import (
    SqlError,
    SqlRequest,
    error_headers,
    error_text,
    ok_headers,
    table_to_ipc,
)

log = logging.getLogger(__name__)

# Snapshots wait at least this many times as long as the last one took.
SNAPSHOT_SHARE = 10.0

# Replies go to requesters' inboxes only (nats-py's request/reply uses this prefix).
REPLY_PREFIX = "_INBOX."

# Room left in a reply for headers and framing when fitting an Arrow payload under max_payload.
REPLY_HEADROOM_BYTES = 4096


@dataclass(frozen=True, slots=True)
class LedgerOptions:
    db_path: Path
    snapshot_dir: Path
    batch_size: int = 2000
    commit_interval_s: float = 0.05
    snapshot_interval_s: float = 5.0
    sql_row_cap: int = 10_000
    sql_timeout_s: float = 10.0
    max_message_bytes: int = 1024 * 1024
    retention: Retention = field(default_factory=Retention)  # off: every event is kept


class LedgerService:
    def __init__(self, nc: Client, options: LedgerOptions) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self.options = options
        self.store = LedgerStore(options.db_path)
        # One thread writes (DuckDB transactions stay in order); queries and snapshots use
        # their own cursors on other threads and see committed snapshots (MVCC).
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="ledger-writer")
        self._readers = ThreadPoolExecutor(2, thread_name_prefix="ledger-reader")
        self.ingested = 0
        self.ready = asyncio.Event()  # set once it consumes events and answers SQL
        self._inbox: list[Msg] = []
        self._answering: set[asyncio.Task[None]] = set()
        self._arrived = asyncio.Event()

    async def run(self, stop: asyncio.Event) -> None:
        # The streams exist: whoever runs the server made them (`swarm start`'s supervisor),
        # and the ledger's NATS user may not (bus/roles.py). Its own consumer it makes itself.
        await ensure_ledger_consumer(self.js)
        events = await self.nc.subscribe(
            LEDGER_DELIVER_SUBJECT,
            cb=self._on_event,
            # Above the consumer's max_ack_pending, so the client never drops a pushed event.
            pending_msgs_limit=2 * LEDGER_MAX_ACK_PENDING,
            pending_bytes_limit=-1,
        )
        sql_sub = await self.nc.subscribe(SQL_SUBJECT, queue="ledger", cb=self._answer_soon)
        log.info("ledger ready: %s", self.options.db_path)
        self.ready.set()
        try:
            async with asyncio.TaskGroup() as group:
                ingest = group.create_task(self._ingest_forever())
                snapshots = group.create_task(self._snapshot_forever())
                purges = group.create_task(self._purge_forever())
                await stop.wait()
                ingest.cancel()
                snapshots.cancel()
                purges.cancel()
        finally:
            await sql_sub.unsubscribe()
            await events.unsubscribe()
            for task in list(self._answering):
                task.cancel()
            await asyncio.gather(*self._answering, return_exceptions=True)
            self._readers.shutdown(wait=True, cancel_futures=True)
            await asyncio.get_running_loop().run_in_executor(self._writer, self._final_snapshot)
            self._writer.shutdown(wait=True)
            self.store.close()

    async def _purge_forever(self) -> None:
        while self.options.retention.on:
            # An interval first: at a swarm's start the ladder and the hosts are reading the
            # stream, and a purge under a starting reader makes it start again.
            await asyncio.sleep(retention.PURGE_INTERVAL_S)
            try:
                await retention.purge_once(self.js, self.options.retention, time.time())
            except Exception as exc:  # the bus restarting: the next round purges it
                log.warning("could not purge old events from the stream: %s", exc)

    async def _on_event(self, msg: Msg) -> None:
        self._inbox.append(msg)
        self._arrived.set()

    async def _ingest_forever(self) -> None:
        # Batches form by themselves: whatever arrived while the last batch was committing, or
        # in the commit interval. Each commit has a fixed cost (a few DuckDB statements per
        # table): back to back, tiny commits kept a core busy at 60 runs/s.
        loop = asyncio.get_running_loop()
        next_commit = loop.time()
        while True:
            await self._arrived.wait()
            pause = next_commit - loop.time()
            if pause > 0 and len(self._inbox) < self.options.batch_size:
                await asyncio.sleep(pause)
            next_commit = loop.time() + self.options.commit_interval_s
            batch = self._inbox[: self.options.batch_size]
            del self._inbox[: len(batch)]
            if not self._inbox:
                self._arrived.clear()
            await self.ingest(batch)

    async def ingest(self, batch: list[Msg]) -> None:
        """Decode, commit, then ack. Undecodable events are committed as dead letters."""
        seqs = [_stream_seq(msg) for msg in batch]
        newer: dict[tuple[str, str], tuple[int, dict[str, Any]]] = {}
        messages = [
            self._decode_or_dead_letter(msg, seq, newer)
            for msg, seq in zip(batch, seqs, strict=True)
        ]
        loop = asyncio.get_running_loop()
        write = functools.partial(self.store.write_batch, messages, seqs, newer)
        refused = await loop.run_in_executor(self._writer, write)
        for letter in refused:
            log.warning("dead letter %s: %s", letter.dead_letter_id, letter.reason)
        unfaithful = _unfaithful(batch, seqs, messages, refused)
        if unfaithful:  # rare: no trip to the writer thread for every batch
            await loop.run_in_executor(self._writer, self.store.keep, unfaithful)
        for msg, seq in zip(batch, seqs, strict=True):
            if seq is not None:  # not a reply to whatever a sender put in `reply`
                await msg.ack()
        self.ingested += len(batch)

    def _decode_or_dead_letter(
        self, msg: Msg, seq: int | None, newer: dict[tuple[str, str], tuple[int, dict[str, Any]]]
    ) -> Message:
        if seq is None:
            # Not from the stream (someone published to the deliver subject): keep it anyway.
            reason = "not a JetStream delivery of the event stream"
            return dead_letter(msg.subject, msg.data, reason, "ledger")
        try:
            decoded = decode_versioned(msg.data, self.options.max_message_bytes)
            message = decoded.message
            if msg.subject != f"{PREFIX}.events.{message.KIND}":
                raise CodecError(f"a {message.KIND} message on subject {msg.subject}")
            if decoded.unknown:  # a newer host's fields: kept beside the row
                # the first copy's, as the row is the first copy's (LedgerStore._write)
                row = (message.KIND, message.event_id)
                newer.setdefault(row, (decoded.minor, decoded.unknown))
            return message
        except CodecError as exc:
            # Keyed by stream sequence, so a redelivered bad event stays one dead letter.
            key = f"seq{seq}"
            log.warning("refused event %s on %s: %s", key, msg.subject, exc.reason)
            return dead_letter(msg.subject, msg.data, exc.reason, "ledger", key=key)

    async def _answer_soon(self, msg: Msg) -> None:
        # nats-py runs a subscription's callbacks one at a time: answering in the callback let
        # one slow query hold up every other (the live view, `swarm status`) for seconds.
        task = asyncio.create_task(self._answer_sql(msg))
        self._answering.add(task)
        task.add_done_callback(self._answering.discard)

    async def _answer_sql(self, msg: Msg) -> None:
        if not msg.reply.startswith(REPLY_PREFIX):
            # The server lets the ledger answer on any reply subject a request names: one
            # naming the champion bucket or a job subject would have the ledger write there.
            log.warning("SQL request with reply subject %r refused: not an inbox", msg.reply[:200])
            return
        try:
            request = SqlRequest.decode(msg.data)
            cap = min(request.max_rows or self.options.sql_row_cap, self.options.sql_row_cap)
            loop = asyncio.get_running_loop()
            result = await loop.run_in_executor(
                self._readers,
                run_query,
                self.store.con,
                request.sql,
                cap,
                self.options.sql_timeout_s,
            )
            table, truncated = result.table, result.truncated
            body = table_to_ipc(table)
            limit = self.nc.max_payload - REPLY_HEADROOM_BYTES
            while len(body) > limit and table.num_rows > 0:
                table, truncated = table.slice(0, table.num_rows // 2), True
                body = table_to_ipc(table)
            if len(body) > limit or (truncated and table.num_rows == 0 < result.table.num_rows):
                raise SqlError(
                    f"one row of the result is larger than a bus message ({limit} bytes): "
                    "select fewer or shorter columns (e.g. left(col, 1000))"
                )
            await self.nc.publish(msg.reply, body, headers=ok_headers(truncated))
        except (SqlRefused, SqlError) as exc:
            await self.nc.publish(msg.reply, error_text(str(exc)), headers=error_headers())
        except Exception as exc:  # a bug in our code: log it, answer, keep serving
            log.exception("SQL request failed")
            await self.nc.publish(
                msg.reply, error_text(f"ledger error: {exc}"), headers=error_headers()
            )

    async def _snapshot_forever(self) -> None:
        # A snapshot rewrites whole tables, so it slows as the ledger grows: waiting at least
        # SNAPSHOT_SHARE times as long as the last one took keeps it to a tenth of a core.
        loop = asyncio.get_running_loop()
        took = 0.0
        while True:
            await asyncio.sleep(max(self.options.snapshot_interval_s, SNAPSHOT_SHARE * took))
            started = loop.time()
            await loop.run_in_executor(
                self._readers, self.store.snapshot, self.options.snapshot_dir
            )
            took = loop.time() - started

    def _final_snapshot(self) -> None:
        try:
            self.store.snapshot(self.options.snapshot_dir)
        except OSError as exc:
            log.warning("final snapshot failed: %s", exc)


def _unfaithful(
    batch: list[Msg], seqs: list[int | None], messages: list[Message], refused: list[DeadLetter]
) -> list[tuple[int, str, bytes, str]]:
    """The events of a batch whose rows would not give them back as they were: refused by the
    store (kept as a dead letter only), or holding a NUL (stored as the text \\x00)."""
    refused_ids = {letter.dead_letter_id for letter in refused}
    kept = []
    for msg, seq, message in zip(batch, seqs, messages, strict=True):
        if seq is None or isinstance(message, DeadLetter):
            continue  # never an event a reader folds
        if letter_id("ledger", event_key(message.KIND, message.event_id)) in refused_ids:
            kept.append((seq, msg.subject, msg.data, "cannot store its row"))
        elif b"\\u0000" in msg.data:
            kept.append((seq, msg.subject, msg.data, "a NUL in a string"))
    return kept


def _stream_seq(msg: Msg) -> int | None:
    """Where the event sits in the stream: the order every replay of it folds events in. None
    for anything else published to the deliver subject, a forged `$JS.ACK.…` reply included."""
    if not (msg.reply or "").startswith("$JS.ACK."):
        return None
    try:
        metadata = msg.metadata
    except Exception:  # nats-py parsing a sender's reply subject: any failure means "forged"
        return None
    if metadata.stream != EVENTS_STREAM or metadata.consumer != LEDGER_CONSUMER:
        return None
    return int(metadata.sequence.stream)
