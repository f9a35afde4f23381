"""The ledger service against a real nats-server: ingest, dedup, dead letters, SQL replies."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from nats.aio.client import Client
from nats.js.errors import BadRequestError

from bus.codec import encode
from bus.nats_bus import publish_event
from bus.subjects import SQL_SUBJECT
from ledger.service import LedgerService
from ledger.sql_protocol import SqlError
from swarm.sql_client import ask_ledger
from tests.conftest import make_idea, make_result, wait_for_async


async def count(nc: Client, table: str) -> int:
    answer = await ask_ledger(nc, f"select count(*) as n from {table}", 5)
    return int(answer.table.column("n")[0].as_py())


async def test_events_are_ingested_once_even_when_published_twice(
    nc: Client, ledger: LedgerService
) -> None:
    js = nc.jetstream()
    results = [make_result(i) for i in range(300)]
    for message in [*results, *results[:50], make_idea(1), make_idea(1)]:
        await publish_event(js, message)
    # Bypass JetStream's duplicate window (a re-publish with another msg id): the ledger's
    # primary key still keeps one row.
    await js.publish("swarm.events.run_result", encode(results[0]), headers={"Nats-Msg-Id": "x"})

    async def all_in() -> bool:
        return await count(nc, "runs") == 300 and await count(nc, "ideas") == 1

    await wait_for_async(all_in, 20)
    await asyncio.sleep(0.5)  # let the extra copy arrive too
    assert await count(nc, "runs") == 300
    assert await count(nc, "dead_letters") == 0


BAD = [
    ("swarm.events.run_result", b"{broken", "not JSON"),
    (
        "swarm.events.idea",
        b'{"kind":"idea","v":99,"data":{}}',
        "idea is v99.0 and this build reads v1",
    ),
    ("swarm.events.idea", b'{"kind":"spaceship","v":1,"data":{}}', "unknown message kind"),
    ("swarm.events.run_result", encode(make_idea(3)), "a idea message on subject"),
    ("swarm.events.nonsense", encode(make_idea(4)), "a idea message on subject"),
]


async def test_malformed_events_become_dead_letters_and_ingest_goes_on(
    nc: Client, ledger: LedgerService
) -> None:
    js = nc.jetstream()
    for subject, raw, _ in BAD:
        await js.publish(subject, raw)
    await publish_event(js, make_result(7))
    # Oversized events are refused by the stream itself, at publish, with a clear error.
    with pytest.raises(BadRequestError, match="message size exceeds maximum"):
        await js.publish("swarm.events.idea", b"\x00\xff" * 40_000)

    async def all_in() -> bool:
        return await count(nc, "dead_letters") == len(BAD) and await count(nc, "runs") == 1

    await wait_for_async(all_in, 20)
    answer = await ask_ledger(nc, "select subject, reason, raw_bytes from dead_letters", 5)
    rows = answer.table.to_pylist()
    for subject, raw, reason in BAD:
        assert any(r["subject"] == subject and reason in r["reason"] for r in rows), reason
        assert any(r["raw_bytes"] == len(raw) for r in rows)


async def test_sql_endpoint_answers_and_refuses(nc: Client, ledger: LedgerService) -> None:
    js = nc.jetstream()
    for i in range(600):
        await publish_event(js, make_result(i))
    await wait_for_async(lambda: _has(nc, 600), 20)
    capped = await ask_ledger(nc, "select * from runs", 5)
    assert capped.truncated and capped.table.num_rows == 500
    asked = await ask_ledger(nc, "select * from runs", 5, max_rows=10)
    assert asked.truncated and asked.table.num_rows == 10
    with pytest.raises(SqlError, match="got DELETE"):
        await ask_ledger(nc, "delete from runs", 5)
    with pytest.raises(SqlError, match="interrupted after the 2s"):
        await ask_ledger(nc, "select count(*) from range(100000000000) t", 10)
    reply = await nc.request(SQL_SUBJECT, b"not json", timeout=5)
    assert reply.headers and reply.headers["Swarm-Status"] == "error"
    assert b"malformed SQL request" in reply.data
    reply = await nc.request(SQL_SUBJECT, json.dumps({"sql": 5}).encode(), timeout=5)
    assert b"malformed SQL request" in reply.data
    assert await count(nc, "runs") == 600


async def _has(nc: Client, n: int) -> bool:
    return await count(nc, "runs") == n


async def test_large_results_are_cut_to_fit_one_message(nc: Client, ledger: LedgerService) -> None:
    js = nc.jetstream()
    tail = "x" * 40_000
    for i in range(400):
        await publish_event(js, make_result(i, log_tail=tail))
    await wait_for_async(lambda: _has(nc, 400), 20)
    answer = await ask_ledger(nc, "select run_id, log_tail from runs", 10)
    assert answer.truncated
    assert 0 < answer.table.num_rows < 400


async def test_snapshots_appear(nc: Client, ledger: LedgerService, tmp_path: Path) -> None:
    await publish_event(nc.jetstream(), make_result(1))

    async def snapped() -> bool:
        return (tmp_path / "snapshots" / "runs.parquet").exists() and await _has(nc, 1)

    await wait_for_async(snapped, 10)


async def test_answers_go_only_to_an_inbox(nc: Client, ledger: LedgerService) -> None:
    """The server lets the ledger answer on whatever reply subject a request names, and any
    role that may ask (researchers too, for the events retention purged) could name the
    champion bucket or a job subject: the ledger would have written its answer there."""
    js = nc.jetstream()
    body = json.dumps({"sql": "select 1 as one"}).encode()
    for target in ("swarm.jobs.tier0", "swarm.events.decision", "$KV.SWARM_CHAMPIONS.current"):
        await nc.publish(SQL_SUBJECT, body, reply=target)
    answer = await ask_ledger(nc, "select 1 as one", 5)  # an inbox: answered as ever
    assert answer.table.column("one").to_pylist() == [1]
    await asyncio.sleep(0.3)
    for stream in ("SWARM_JOBS", "SWARM_EVENTS"):
        assert (await js.stream_info(stream)).state.messages == 0
