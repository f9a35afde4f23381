"""The ladder process: replays the event stream into a Ladder, then acts on what arrives.

At start it reads SWARM_EVENTS from the first message (an ordered consumer), folding ideas,
RunSpecs, results, decisions and champion changes into the state without acting, so a restarted
ladder knows everything it already did. With a snapshot of that state (snapshot.py, written
every `snapshot_interval_s` and at stop) it starts from the snapshot and reads only the events
after it. Once it has caught up with the stream as it was at start, it acts after every burst
of events: RunSpecs go to the work queue (a capped tier's in turn, best first: work_queue.py)
and the event stream, Decisions and ChampionChanges to the event stream, champion sources to
the champion store first.
Publishing retries until it succeeds: ids are deterministic, so a retry never duplicates.

People talk to it by request/reply on `swarm.ladder.control` (approve, reject, revert).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from bus import snapshot_file
from bus.champion_store import ChampionStore
from bus.messages import (
    AgentEvent,
    AgentEventKind,
    ChampionChange,
    Message,
    RunSpec,
    event_key,
    new_id,
)
from bus.nats_bus import enqueue_job, enqueue_run, publish_event, queued_run_ids
from bus.replay import Replay, replay_events
from bus.subjects import LADDER_CONTROL_SUBJECT
from ledger.remote_events import ledger_events
from scale_ladder import snapshot
from scale_ladder.control import parse_control, shorten
from scale_ladder.ladder import Ladder, LadderRefusal
from scale_ladder.work_queue import WorkQueue

log = logging.getLogger(__name__)

FOLDED_KINDS = frozenset({"idea", "run_spec", "run_result", "decision", "champion_change"})
RETRY_S = 1.0
# How long a result published before the work queue was read may take to reach the ladder: a
# run missing from the queue and still without a result after this is lost, not finishing.
SETTLE_S = 5.0


@dataclass(frozen=True, slots=True)
class LadderOptions:
    max_message_bytes: int = 8 * 1024 * 1024
    # `--max-experiments`: RunSpecs this workspace may ever hold (0: no limit). The ladder stops
    # sending them there, so the swarm runs exactly that many experiments, however fast they
    # end; stopping when the ledger counted that many results overshot by the runs that ended
    # between two looks (40% with instant synthetic runs).
    max_specs: int = 0
    snapshot_path: Path | None = None  # where its state is kept between starts; None: nowhere
    snapshot_interval_s: float = 60.0


class LadderService:
    def __init__(self, nc: Client, ladder: Ladder, options: LadderOptions) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self.ladder = ladder
        self.options = options
        self.store = ChampionStore(self.js)
        self.caught_up = asyncio.Event()
        self._inbox: asyncio.Queue[tuple[Message | None, int]] = asyncio.Queue()
        self._lock = asyncio.Lock()  # one act-and-publish at a time
        self._stop = asyncio.Event()
        self._specs: set[str] = set()  # run ids of the RunSpecs in the stream (with max_specs)
        self._held: set[str] = set()  # RunSpecs past max_specs: made by the ladder, never sent
        # recipes, jobs, and a capped tier's jobs waiting their turn
        self._jobs = WorkQueue(self.js, {t.index: t.max_concurrent for t in ladder.tiers})
        self._stream = ""  # when the event stream was created (a snapshot names it)
        # Messages it made that the stream may not have (the state has them): given up on at a
        # stop, or a publish under way (cut short by a cancel). No snapshot then.
        self._gave_up = False
        self._publishing = False
        self._echoes: set[str] = set()  # events it published, not yet read back from the stream
        self._checkpoint: tuple[int, str] | None = None  # the last event folded in, by seq
        self._snapshot_at = time.monotonic()
        self._snapshot_s = 0.0  # how long the last snapshot took to write
        self._failed = ""  # why the last act failed (ladder.act raised), "" if it did not

    async def run(self, stop: asyncio.Event) -> None:
        self._stop = stop
        after = await self._restore()
        replay = self._replay = await replay_events(
            self.js, FOLDED_KINDS, self.options.max_message_bytes, self._receive, after, self._fill
        )
        start_seq = replay.start_seq
        control = await self.nc.subscribe(LADDER_CONTROL_SUBJECT, cb=self._control)
        if replay.done:  # nothing in the stream to read: what the ledger gave is all
            while not self._inbox.empty():
                self._fold(*self._inbox.get_nowait(), replay)
            self.caught_up.set()
        requeue = asyncio.ensure_future(self._requeue_lost())
        await self._announce(AgentEventKind.JOINED, f"replaying {start_seq} events")
        try:
            if self.caught_up.is_set():  # nothing to read first: act now, not at the first tick
                await self._act()
            stopper = asyncio.ensure_future(stop.wait())
            while not stop.is_set():
                getter = asyncio.ensure_future(self._inbox.get())
                done, _ = await asyncio.wait(
                    {getter, stopper}, timeout=1.0, return_when="FIRST_COMPLETED"
                )
                if getter not in done:
                    getter.cancel()
                    if self.caught_up.is_set():
                        await self._act()
                    continue
                self._fold(*getter.result(), replay)
                while not self._inbox.empty():
                    self._fold(*self._inbox.get_nowait(), replay)
                if self.caught_up.is_set():
                    self._snapshot_if_due()  # before acting: its last publishes are back
                    await self._act()
            stopper.cancel()
            await self._last_snapshot()
        finally:
            requeue.cancel()
            await self._announce(AgentEventKind.LEFT, f"{len(self.ladder.ideas)} ideas seen")
            for sub in (replay.subscription, control):
                await _quietly_unsubscribe(sub)

    async def _restore(self) -> int:
        """The ladder's state from its snapshot, if there is one it can use: the sequence it
        was folded up to (0: replay everything)."""
        path = self.options.snapshot_path
        if path is None:
            return 0
        self._stream, last_seq = await snapshot_file.stream_created(self.js)
        try:
            found = snapshot.load(path, self.ladder, self._stream, last_seq)
            seq, max_bytes = found.checkpoint.seq, self.options.max_message_bytes
            if not await snapshot_file.checkpoint_stands(self.js, found.checkpoint, max_bytes):
                raise snapshot.Stale(f"the stream no longer holds its event {seq}")
        except FileNotFoundError:
            return 0
        except snapshot.Stale as why:
            log.warning("ladder snapshot %s not used, replaying the whole stream: %s", path, why)
            return 0
        self.ladder, self._specs = found.ladder, set(found.specs)
        self._checkpoint = (seq, found.checkpoint.event)
        self.ladder.wake()  # as a full replay would: what a kill left waiting is looked at
        log.info("ladder state from its snapshot at event %d of %d", seq, last_seq)
        return seq

    async def _last_snapshot(self) -> None:
        """At a stop, once what it published last is back from the stream (a second at most)."""
        for _ in range(20):
            while not self._inbox.empty():
                self._fold(*self._inbox.get_nowait(), self._replay)
            if not self._echoes:
                break
            await asyncio.sleep(0.05)
        self._snapshot_at = float("-inf")
        self._snapshot_if_due()

    def _snapshot_if_due(self) -> None:
        """Write the state, if every message it made is in the stream, read back: RunSpecs
        held at the experiment limit (never sent, made again by a later start with a higher
        limit), messages given up on at a stop, a publish cut short, and a publish the server
        acknowledged but has not delivered back (it may lose it: a crash before its disk
        sync) exist in the state only, and a snapshot would keep them from ever being sent."""
        path = self.options.snapshot_path
        wait = max(self.options.snapshot_interval_s, snapshot_file.COST_SHARE * self._snapshot_s)
        due = time.monotonic() - self._snapshot_at >= wait
        unsent = (
            self._held or self._gave_up or self._publishing or self._echoes or self.ladder.unsent()
        )
        if path is None or not due or not self.caught_up.is_set() or unsent or not self._checkpoint:
            return
        self._snapshot_at = time.monotonic()
        seq, event = self._checkpoint
        try:
            checkpoint = snapshot_file.Checkpoint(seq, event, self._stream)
            snapshot.save(path, snapshot.Snapshot(self.ladder, checkpoint, frozenset(self._specs)))
        except Exception as exc:  # a full disk: the next start replays more, nothing is lost
            log.warning("could not write the ladder snapshot %s: %s", path, exc)
        self._snapshot_s = time.monotonic() - self._snapshot_at

    async def _requeue_lost(self) -> None:
        """Once caught up, put back the jobs of runs that have no result and are not on the
        work queue. A job or its result can be lost when the bus is killed (kill -9 of the
        nats-server in the fault tests left runs that no trainer would ever take), and a
        person may purge the queue; nothing else would ever run them. A run put back that was
        not lost after all (its result was on its way) runs once more and is recorded once:
        results are keyed by run id."""
        try:
            await self.caught_up.wait()
            async with self._lock:
                waiting = set(self.ladder.runs.unfinished)
            queued = await queued_run_ids(self.js)
            await asyncio.sleep(SETTLE_S)  # results published before `queued` was read land
            async with self._lock:
                lost = [
                    spec
                    for run_id, spec in self.ladder.runs.unfinished.items()
                    if run_id in waiting
                    and run_id not in queued
                    and run_id not in self._held
                    and run_id not in self._jobs
                ]
                parked = await self._jobs.put_back(self.ladder, lost)
            if parked:  # a capped tier's, waiting their turn at the stop: not lost
                log.info("%d jobs of capped tiers wait their turn again", len(parked))
            again = [s.run_id for s in lost if s.run_id not in parked]
            if again:
                log.warning("put back %d lost jobs: %s", len(again), again)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the bus is down: the next start looks again
            log.warning("could not look for lost jobs (%s)", exc)

    async def _fill(self, after: int, before: int) -> list[tuple[int, Message]]:
        """Events the stream let go of (retention), from the ledger that stored them."""
        log.info("events %d..%d left the stream: read from the ledger", after + 1, before - 1)
        return await ledger_events(self.nc, FOLDED_KINDS, after, before)

    async def _receive(self, message: Message | None, seq: int) -> None:
        await self._inbox.put((message, seq))  # folded in the main loop, which then acts

    def _fold(self, message: Message | None, seq: int, replay: Replay) -> None:
        # Counted with or without a limit: a later start (from a snapshot) may have one.
        if isinstance(message, RunSpec):
            self._specs.add(message.run_id)
        if message is not None:
            key = event_key(message.KIND, message.event_id)
            self._echoes.discard(key)
            self._checkpoint = (seq, key)
            try:
                self.ladder.observe(message)
            except Exception:  # one event must not stop the ladder (it would on every replay)
                log.exception("could not fold event %d", seq)
        # Caught up only once folded: acting (or a person's request) before would miss history.
        if replay.caught_up(seq) and not self.caught_up.is_set():
            log.info("ladder caught up at event %d", seq)
            self.caught_up.set()

    async def _act(self) -> None:
        async with self._lock:
            try:
                made = self.ladder.act()
            except Exception as exc:  # a failure outside one idea's: what it made is kept
                if str(exc) != self._failed:  # logged once, not at every tick
                    log.exception("the ladder could not act; it tries again at the next event")
                self._failed = str(exc)
                return
            self._failed = ""
            await self._publish(self._within_limit(made))
            if not self._stop.is_set():  # a RunSpec whose event was given up keeps its job
                await self._jobs.release(self.ladder)

    def _within_limit(self, messages: list[Message]) -> list[Message]:
        """The messages, less the RunSpecs past max_specs. Those stay in the ladder's state
        only: a ladder started later replays the stream, which never had them, and makes them
        again, as after a kill between making and sending."""
        limit = self.options.max_specs
        if not limit:
            self._specs.update(m.run_id for m in messages if isinstance(m, RunSpec))
            return messages
        kept: list[Message] = []
        for message in messages:
            if isinstance(message, RunSpec) and message.run_id not in self._specs:
                if len(self._specs) >= limit:
                    if not self._held:
                        log.info("%d experiments requested: the limit; no more RunSpecs", limit)
                    self._held.add(message.run_id)
                    continue
                self._specs.add(message.run_id)
            kept.append(message)
        return kept

    async def _publish(self, messages: list[Message]) -> None:
        """In order. Messages between champion changes go out pipelined (all sent, then all
        acks awaited: one round trip for the lot): first every event in the order the ladder
        made them (the stream keeps the call order), then the RunSpecs' jobs. Events first: a
        job whose event a stop cut short ran into a result of no RunSpec (the kill -9 test,
        once); a RunSpec without its job is one a start puts back. A champion change is a
        barrier: its store writes and event go out alone, after everything before it."""
        self._publishing = True
        self._echoes.update(event_key(m.KIND, m.event_id) for m in messages)
        batch: list[Message] = []
        for message in messages:
            if isinstance(message, ChampionChange):  # stopped with one unsent: none after it
                if not await self._pipelined(batch) or not await self._publish_until_done(message):
                    return
                batch = []
            else:
                batch.append(message)
        if await self._pipelined(batch):
            self._publishing = False

    async def _pipelined(self, messages: list[Message]) -> bool:
        """Publish the messages; False if the ladder stopped with one of them unsent."""
        # A capped tier's jobs wait in the dispatch (parked before any event goes out, so that
        # a retried RunSpec sends no job either); the rest go once every event is out.
        specs = [m for m in messages if isinstance(m, RunSpec) and not self._jobs.keep(m)]
        events = await asyncio.gather(
            *(publish_event(self.js, m) for m in messages), return_exceptions=True
        )
        for message, outcome in zip(messages, events, strict=True):
            if isinstance(outcome, BaseException) and not await self._publish_until_done(message):
                return False  # stopping: no job goes out after an event that did not
        try:
            await self._jobs.store_recipes(self.ladder, specs)
            jobs = await asyncio.gather(
                *(enqueue_job(self.js, s) for s in specs), return_exceptions=True
            )
        except Exception as exc:  # no job without its recipe: each alone, recipe first
            log.warning("storing recipes failed (%s: %s); retrying", type(exc).__name__, exc)
            jobs = [exc] * len(specs)
        for spec, outcome in zip(specs, jobs, strict=True):
            # again, alone (ids make repeats harmless)
            if isinstance(outcome, BaseException) and not await self._publish_until_done(spec):
                return False
        return True

    async def _publish_until_done(self, message: Message) -> bool:
        """Until published (True), or until the ladder is told to stop (False): giving up then
        is what a kill at that moment does, and the next ladder replays the stream and makes it
        again (the fault tests kill it anywhere). Retrying past a stop kept an orphaned ladder
        alive for as long as the bus was down."""
        while not self._stop.is_set():
            try:
                await self._publish_one(message)
                return True
            except Exception as exc:  # the bus is down or slow: the state already has it
                why = f"{type(exc).__name__}: {exc}"
                log.warning("publishing %s failed (%s); retrying", message.event_id, why)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), RETRY_S)
        self._gave_up = True
        log.warning("stopping with %s unpublished", message.event_id)
        return False

    async def _publish_one(self, message: Message) -> None:
        if isinstance(message, RunSpec) and message.run_id not in self._jobs:
            await self._jobs.store_recipes(self.ladder, [message])
            await enqueue_run(self.js, message)
        elif isinstance(message, ChampionChange):
            await self.store.put(message.version, message.source)
            await publish_event(self.js, message)
            await self.store.set_current(message.version)
            log.info("champion v%d (%s): %s", message.version, message.kind, message.reason)
        else:
            await publish_event(self.js, message)

    async def _control(self, msg: Msg) -> None:
        """approve / reject an idea held at the top tier, or revert the champion to a version.
        Every request is answered: `{"ok": true, "done": [event ids]}`, or `{"ok": false,
        "error": why}` for a request the ladder refuses or cannot read."""
        try:
            action, who, subject = parse_control(msg.data)
            await self.caught_up.wait()
            async with self._lock:
                if action == "approve":
                    out = self.ladder.approve(str(subject), who)
                elif action == "reject":
                    out = self.ladder.reject(str(subject), who)
                else:
                    out = self.ladder.revert(int(subject), who)
                out = self._within_limit(out)  # the answer names only what was sent
                await self._publish(out)
            answer: dict[str, object] = {"ok": True, "done": [m.event_id for m in out]}
        except LadderRefusal as exc:
            answer = {"ok": False, "error": shorten(str(exc))}
        except Exception as exc:  # a bug in our code: log it, answer, keep serving
            log.exception("control request failed")
            answer = {"ok": False, "error": shorten(f"ladder error: {exc}")}
        if msg.reply:  # a request sent without a reply subject is acted on, not answered
            await msg.respond(json.dumps(answer).encode())

    async def _announce(self, kind: AgentEventKind, detail: str) -> None:
        event = AgentEvent(new_id("ev"), "ladder", kind, role="ladder", detail=detail)
        try:
            await publish_event(self.js, event)
        except Exception as exc:
            log.warning("could not announce %s: %s", kind.value, exc)


async def _quietly_unsubscribe(sub: Subscription) -> None:
    try:
        await sub.unsubscribe()
    except Exception as exc:  # closing anyway
        log.debug("unsubscribe: %s", exc)
