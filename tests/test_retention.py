"""Retention: the ledger purges old events from the stream only once it holds them, and a reader
that needs purged events reads them from the ledger, reaching the state a reader of the whole
stream reached. A real nats-server, the real ledger, ladder service and agents host."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from pathlib import Path

import pytest
from nats.aio.client import Client

from agents.host import run_host
from bus.champion_store import champion_bucket
from bus.codec import encode
from bus.embedded_server import EmbeddedNatsServer
from bus.messages import Idea, Message
from bus.nats_bus import BusSettings, connect
from bus.replay import EventsPurged, replay_events
from bus.subjects import EVENTS_STREAM, LEDGER_CONSUMER, ensure_streams
from ledger.remote_events import ledger_events
from ledger.retention import Retention, purge_once, stored_at
from ledger.service import LedgerOptions, LedgerService
from scale_ladder.ladder import Ladder
from scale_ladder.service import LadderOptions, LadderService
from tests.conftest import wait_for_async
from tests.ladder_sim import make_ladder, started
from tests.test_agents_snapshot import AUTHOR, options, publish, stop_when_caught_up
from tests.test_ladder_snapshot import state_of


async def stored_through(nc: Client, seq: int) -> None:
    js = nc.jetstream()

    async def floor() -> bool:
        return (await js.consumer_info(EVENTS_STREAM, LEDGER_CONSUMER)).ack_floor.stream_seq >= seq

    await wait_for_async(floor, timeout=20)


async def first_seq(nc: Client) -> int:
    return int((await nc.jetstream().stream_info(EVENTS_STREAM)).state.first_seq)


async def ladder_state(nc: Client, tmp_path: Path, snapshot: Path | None = None) -> Ladder:
    """A ladder service from start to caught up; its state, once stopped."""
    service = LadderService(nc, make_ladder(tmp_path), LadderOptions(snapshot_path=snapshot))
    stop = asyncio.Event()
    task = asyncio.ensure_future(service.run(stop))
    await asyncio.wait_for(service.caught_up.wait(), 30)
    stop.set()
    await task
    return service.ladder


async def host_findings(nc: Client, monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    stop_when_caught_up(monkeypatch)
    (researcher,) = await asyncio.wait_for(run_host(nc, options(None), asyncio.Event()), 60)
    return {"findings": dict(researcher.history.findings), "notes": list(researcher.notes)}


def a_history(tmp_path: Path) -> list[Message]:
    sim = started(make_ladder(tmp_path))
    for i, change in enumerate(["LR = 1.0->LR = 1.3", "WD = 0.1->WD = 0.3", "LR = 1.0->LR = 3.0"]):
        sim.propose(f"idea-{i}", change)
        sim.run_all()
    assert sim.ladder.current > 1
    return sim.log


async def test_readers_get_purged_events_from_the_ledger(
    nc: Client, ledger: LedgerService, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await champion_bucket(nc.jetstream())
    events = a_history(tmp_path)
    await publish(nc, events)
    await stored_through(nc, len(events))
    whole = state_of(await ladder_state(nc, tmp_path))
    learned = await host_findings(nc, monkeypatch)
    last = int((await nc.jetstream().stream_info(EVENTS_STREAM)).state.last_seq)
    await stored_through(nc, last)  # the two readers' own announcements too

    purged = await purge_once(nc.jetstream(), Retention(keep_s=1.0), time.time() + 10)
    assert purged == last and await first_seq(nc) == last + 1  # all stored, all old

    assert state_of(await ladder_state(nc, tmp_path)) == whole  # no snapshot: from the ledger
    assert await host_findings(nc, monkeypatch) == learned


async def test_a_snapshot_older_than_the_stream_is_used_and_the_gap_read_from_the_ledger(
    nc: Client, ledger: LedgerService, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await champion_bucket(nc.jetstream())
    events = a_history(tmp_path)
    half = len(events) // 2
    await publish(nc, events[:half])
    snap = tmp_path / "ladder.snapshot"
    await ladder_state(nc, tmp_path, snap)  # writes its snapshot at stop
    await publish(nc, events[half:])
    last = int((await nc.jetstream().stream_info(EVENTS_STREAM)).state.last_seq)
    await stored_through(nc, last)
    whole = state_of(await ladder_state(nc, tmp_path))
    await purge_once(nc.jetstream(), Retention(keep_s=1.0), time.time() + 10)
    caplog.set_level(logging.INFO, logger="scale_ladder.service")
    assert state_of(await ladder_state(nc, tmp_path, snap)) == whole
    said = [r.getMessage() for r in caplog.records]
    assert any("ladder state from its snapshot" in line for line in said), said
    assert any("left the stream: read from the ledger" in line for line in said), said


async def test_the_ledger_never_purges_what_it_has_not_stored(
    nc: Client, ledger: LedgerService, tmp_path: Path
) -> None:
    events = a_history(tmp_path)
    await publish(nc, events[:10])
    await stored_through(nc, 10)
    ledger.ingest = _never  # type: ignore[method-assign]  # stored nothing more from here on
    await publish(nc, events[10:20])
    await asyncio.sleep(0.3)
    purged = await purge_once(nc.jetstream(), Retention(keep_s=1.0), time.time() + 10)
    assert purged == 10 and await first_seq(nc) == 11


async def test_only_events_older_than_the_limit_go(
    nc: Client, ledger: LedgerService, tmp_path: Path
) -> None:
    events = a_history(tmp_path)
    await publish(nc, events[:10])
    await asyncio.sleep(1.2)
    cutoff = time.time()
    await publish(nc, events[10:20])
    await stored_through(nc, 20)
    purged = await purge_once(nc.jetstream(), Retention(keep_s=1.0), cutoff + 1.0)
    assert purged == 10 and await first_seq(nc) == 11
    assert await purge_once(nc.jetstream(), Retention(), time.time() + 1e6) == 0  # off


async def test_a_reader_with_nowhere_to_read_purged_events_says_so(
    nc: Client, ledger: LedgerService, tmp_path: Path
) -> None:
    await publish(nc, a_history(tmp_path)[:10])
    await stored_through(nc, 10)
    await purge_once(nc.jetstream(), Retention(keep_s=1.0), time.time() + 10)

    async def handle(message: Message | None, seq: int) -> None:
        pass

    with pytest.raises(EventsPurged, match=r"events 1\.\.10 were purged"):
        await replay_events(nc.jetstream(), frozenset({"idea"}), 1 << 20, handle)


def test_server_timestamps_read_as_epoch_seconds() -> None:
    assert stored_at("1970-01-01T00:00:01.500000000Z") == 1.5
    assert stored_at("1970-01-01T00:00:02Z") == 2.0


async def _never(batch: object) -> None:
    await asyncio.Event().wait()


async def test_events_whose_rows_would_change_them_come_back_as_they_were(
    nc: Client, ledger: LedgerService
) -> None:
    """A NUL in a string is stored as the text \\x00, and a timestamp past a TIMESTAMP's range
    is no row at all (a dead letter): the ledger keeps such events as the stream's bytes, so a
    reader of a purged stream gets them as a reader of the whole stream did."""
    events: list[Message] = [
        Idea("idea-far", AUTHOR, "from the far future", "", 1, created_at=1e13),
        Idea("idea-nul", AUTHOR, "raise\x00lr", "", 1),
        Idea("idea-plain", AUTHOR, "plain", "", 1),
    ]
    await publish(nc, events)
    await stored_through(nc, 3)
    await purge_once(nc.jetstream(), Retention(keep_s=1.0), time.time() + 10)
    assert await first_seq(nc) == 4
    back = await ledger_events(nc, {"idea"}, 0, 4)
    assert [seq for seq, _ in back] == [1, 2, 3]
    assert [message for _, message in back[:2]] == events[:2]  # exactly: their stream bytes
    plain = back[2][1]  # a row: timestamps to the microsecond, the rest as it was
    assert isinstance(plain, Idea) and abs(plain.created_at - events[2].created_at) < 1e-6
    assert dataclasses.replace(plain, created_at=events[2].created_at) == events[2]


async def test_a_reader_of_purged_events_waits_for_the_ledger(nc: Client, tmp_path: Path) -> None:
    """At a swarm's start the ladder may ask for purged events before the ledger answers: it
    waits for it (it exited, and was restarted, before)."""
    await champion_bucket(nc.jetstream())
    options = LedgerOptions(
        db_path=tmp_path / "ledger.duckdb", snapshot_dir=tmp_path / "snapshots",
        batch_size=100, snapshot_interval_s=0.3, sql_row_cap=500, sql_timeout_s=2,
        max_message_bytes=64 * 1024,
    )  # fmt: skip

    async def run_ledger(stop: asyncio.Event) -> asyncio.Task[None]:
        service = LedgerService(nc, options)
        task = asyncio.create_task(service.run(stop))
        await asyncio.wait_for(service.ready.wait(), 10)
        return task

    stop = asyncio.Event()
    ledger = await run_ledger(stop)
    events = a_history(tmp_path)
    await publish(nc, events)
    await stored_through(nc, len(events))
    whole = state_of(await ladder_state(nc, tmp_path))
    await stored_through(nc, int((await nc.jetstream().stream_info(EVENTS_STREAM)).state.last_seq))
    await purge_once(nc.jetstream(), Retention(keep_s=1.0), time.time() + 10)
    stop.set()
    await ledger  # no ledger answers now

    starting = asyncio.ensure_future(ladder_state(nc, tmp_path))
    await asyncio.sleep(1.0)
    assert not starting.done()  # waiting for the ledger, not failed
    stop = asyncio.Event()
    ledger = await run_ledger(stop)
    try:
        assert state_of(await asyncio.wait_for(starting, 30)) == whole
    finally:
        stop.set()
        await ledger


async def test_the_largest_event_the_stream_takes_comes_back_from_the_ledger(
    tmp_path: Path,
) -> None:
    """A row goes back as Arrow, a few KB larger than its JSON: an event that filled a whole
    bus message fitted the stream but no reply, and once purged it could not be read at all.
    The stream now takes events up to a message less the room a reply needs. The bus as
    `swarm start` sets it up: the server's message limit is the streams'."""
    size = 64 * 1024
    server = EmbeddedNatsServer(tmp_path / "run", tmp_path / "jetstream", size)
    server.start()
    stop = asyncio.Event()
    nc = await connect(BusSettings(server.url, token=server.token), "test")
    try:
        await ensure_streams(nc.jetstream(), size)
        options = LedgerOptions(
            db_path=tmp_path / "ledger.duckdb", snapshot_dir=tmp_path / "snapshots",
            max_message_bytes=size,
        )  # fmt: skip
        service = LedgerService(nc, options)
        task = asyncio.create_task(service.run(stop))
        await asyncio.wait_for(service.ready.wait(), 10)
        limit = (await nc.jetstream().stream_info(EVENTS_STREAM)).config.max_msg_size or 0
        idea = Idea("idea-big", AUTHOR, "", "", 1)
        room = limit - len(encode(idea)) - 200  # its Nats-Msg-Id header counts too
        idea = dataclasses.replace(idea, hypothesis="x" * room)  # plain ASCII: no escapes
        await publish(nc, [idea])
        await stored_through(nc, 1)
        await purge_once(nc.jetstream(), Retention(keep_s=1.0), time.time() + 10)
        assert _same_but_time(await ledger_events(nc, {"idea"}, 0, 2), idea)
        stop.set()
        await task
    finally:
        stop.set()
        await nc.close()
        server.stop()


def _same_but_time(back: list[tuple[int, Message]], idea: Idea) -> bool:
    (seq, message), *rest = back
    assert isinstance(message, Idea) and not rest
    return seq == 1 and dataclasses.replace(message, created_at=idea.created_at) == idea
