"""A trainer: takes RunSpecs off the JetStream work queue, runs them, publishes RunResults.

Higher tiers first (promotion before new work). While a run is in progress the trainer sends
`in_progress()` heartbeats, so JetStream does not hand the job to someone else; it publishes the
RunResult and only then acks. A trainer killed mid-run never acks: the job comes back after the
consumer's ack_wait and another trainer completes it; the result's event id (from the run id)
keeps the ledger at exactly one result. A job delivered MAX_DELIVERIES times (its trainers keep
dying) ends in a CRASH result saying so, so no RunSpec is left without a result.

An instant target (the synthetic one, whose experiments are arithmetic) is served in batches: up
to INSTANT_BATCH jobs per fetch, run on the event loop, their results published together. One
job per fetch cost four round trips per run and capped the swarm's capacity benchmark.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from bus.champion_store import ChampionMissing, ChampionStore
from bus.codec import CodecError, decode_as
from bus.dead_letters import dead_letter
from bus.messages import AgentEvent, AgentEventKind, RunResult, RunSpec, RunStatus, new_id
from bus.nats_bus import publish_event
from bus.subjects import (
    JOBS_STREAM,
    TRAINER_HEARTBEAT_S,
    ensure_trainer_consumer,
    job_subject,
    trainer_consumer_name,
)
from recipes.patch import PatchRefused
from recipes.store import RecipeMissing, RecipeStore
from training.process_outcome import result_fields
from training.run_limits import MIN_FREE_BYTES, Cancelled, RunLimits, free_bytes
from training.spec_recipe import from_patch, patch_refusal, refused
from training.targets import Target

log = logging.getLogger(__name__)

MAX_DELIVERIES = 3
DISK_WAIT_S = 5.0  # between looks at a full disk (run_limits.MIN_FREE_BYTES)
ACK_CONFIRM_S = 5.0  # how long a job's ack may take to be confirmed
IDLE_POLL_S = 0.5
INSTANT_BATCH = 32  # jobs per fetch for an instant target
# An instant target's pull: nats-py's fetch of a batch, when no job is ready, waits its whole
# timeout for the batch to fill, so the wait is kept short.
INSTANT_POLL_S = 0.02
# How long an empty higher tier or the current champion's number is trusted. Real runs take
# seconds, so each of their jobs still checks both afresh; instant runs check every RECHECK_S.
RECHECK_S = 0.2


class WrongTarget(ValueError):
    """The swarm's jobs are for another target than this trainer's, or its data."""


@dataclass(frozen=True, slots=True)
class TrainerOptions:
    tiers: tuple[int, ...]
    device: str
    scratch_dir: Path
    log_dir: Path
    default_limits: dict[int, RunLimits]  # per tier, for RunSpecs that do not carry limits
    max_message_bytes: int = 8 * 1024 * 1024
    max_concurrent: dict[int, int] = field(default_factory=dict)  # per tier cap, swarm-wide
    instant_target: bool = False  # experiments cost nothing: batch them (see the module doc)


class Trainer:
    def __init__(self, nc: Client, target: Target, options: TrainerOptions) -> None:
        self.nc = nc
        self.js: JetStreamContext = nc.jetstream()
        self.target = target
        self.options = options
        self.name = f"trainer-{socket.gethostname()}-{new_id('')[1:9]}"
        self.completed = 0
        self.champions = ChampionStore(self.js)
        self.recipes = RecipeStore(self.js)
        self._cancel = threading.Event()
        self._higher_empty_until = 0.0  # monotonic: higher tiers were found empty until then
        self._current: tuple[int, float] = (0, 0.0)  # champion number, monotonic time read
        self._data: str | None = None  # its data's hash, once read
        self._publishing: list[asyncio.Future[None]] = []  # instant results awaiting acks
        self._disk_full = False  # said so, and waiting for room (_room)

    async def run(self, stop: asyncio.Event) -> None:
        subs = []
        for tier in sorted(self.options.tiers, reverse=True):  # highest tier first
            await ensure_trainer_consumer(self.js, tier, self.options.max_concurrent.get(tier, 0))
            subs.append(
                await self.js.pull_subscribe_bind(trainer_consumer_name(tier), stream=JOBS_STREAM)
            )
        await self._announce(AgentEventKind.JOINED, f"tiers {list(self.options.tiers)}")
        try:
            while not stop.is_set():
                if not self.options.instant_target and not await self._room(stop):
                    continue
                for msg in await self._next_jobs(subs):
                    if stop.is_set():  # the rest of a batch comes back after the ack wait
                        break
                    await self._handle(msg, stop)
                await self._published()
        finally:
            await self._published()
            await self._announce(AgentEventKind.LEFT, f"completed {self.completed} runs")
            for sub in subs:
                await sub.unsubscribe()

    async def _room(self, stop: asyncio.Event) -> bool:
        """Room on disk for a run; else say so (once), wait a while and answer False."""
        free = free_bytes(self.options.scratch_dir)
        if free >= MIN_FREE_BYTES:
            if self._disk_full:
                log.info("the disk has room again: taking jobs")
            self._disk_full = False
            return True
        if not self._disk_full:
            self._disk_full = True
            why = (
                f"{free / 2**20:.0f} MiB free where runs write ({self.options.scratch_dir}): "
                f"taking no job until {MIN_FREE_BYTES / 2**20:.0f} MiB are"
            )
            log.warning(why)
            await self._announce(AgentEventKind.NOTE, why)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), DISK_WAIT_S)
        return False

    async def _next_jobs(self, subs: list[JetStreamContext.PullSubscription]) -> list[Msg]:
        """The next jobs (one, or a batch for an instant target), highest tier first. A higher
        tier is fetched from only when the server says it has a job this trainer may take: an
        empty tier then costs one round trip, where a pull on it would wait out its expiry (50
        ms a tier, per job: the trainers' ceiling was ~10 jobs/s). Only the lowest tier is
        waited on; a job arriving meanwhile at a higher tier waits at most IDLE_POLL_S."""
        tiers = sorted(self.options.tiers, reverse=True)  # as `subs`
        wait = INSTANT_POLL_S if self.options.instant_target else IDLE_POLL_S
        if time.monotonic() >= self._higher_empty_until:
            for tier, sub in zip(tiers[:-1], subs[:-1], strict=True):
                if await _has_job(sub):
                    msgs = await _fetch(sub, 0.05, self._batch(tier))
                    if msgs:
                        return msgs
            self._higher_empty_until = time.monotonic() + RECHECK_S
        return await _fetch(subs[-1], wait, self._batch(tiers[-1]))

    def _batch(self, tier: int) -> int:
        """Jobs per fetch, never more than a capped tier's cap: a pull for more stays waiting on
        the server after the client returns, and takes the tier's next job into a queue nobody
        reads until the ack wait ends (one fault-test drain left 28 capped jobs undone)."""
        if not self.options.instant_target:
            return 1
        cap = self.options.max_concurrent.get(tier, 0)
        return min(INSTANT_BATCH, cap) if cap > 0 else INSTANT_BATCH

    async def _handle(self, msg: Msg, stop: asyncio.Event) -> None:
        try:
            spec = decode_as(msg.data, RunSpec, self.options.max_message_bytes)
            if msg.subject != job_subject(spec.tier):  # as the ledger checks an event's kind
                raise CodecError(f"a tier {spec.tier} RunSpec on subject {msg.subject}")
        except CodecError as exc:
            log.warning("refused job on %s: %s", msg.subject, exc.reason)
            seq = msg.metadata.sequence.stream
            letter = dead_letter(msg.subject, msg.data, exc.reason, "trainer", key=f"job{seq}")
            await publish_event(self.js, letter)
            await msg.ack()
            return
        if spec.target != self.target.name:
            # A worker joined with the wrong --target: running the job would turn it into a
            # CRASH the ladder acts on. Hand it back for a right trainer and stop, saying why.
            await msg.nak(delay=TRAINER_HEARTBEAT_S)
            raise WrongTarget(
                f"this worker runs target {self.target.name!r}, but the swarm's jobs are for "
                f"{spec.target!r}: start it with --target {spec.target}"
            )
        mine = await self._data_hash() if spec.corpus_hash else ""
        if mine and mine != spec.corpus_hash:
            # Other data: its runs would not pair with the swarm's, and a result would make
            # the ladder reject the idea. Hand the job back and stop, saying why.
            await msg.nak(delay=TRAINER_HEARTBEAT_S)
            raise WrongTarget(
                f"this worker's data is corpus {mine[:16]}, but the swarm runs on corpus "
                f"{spec.corpus_hash[:16]}: start it with the swarm's data (target.data in "
                "swarm.toml, or --data; --data stdlib for a swarm begun before the secret "
                "language was the default)"
            )
        deliveries = msg.metadata.num_delivered
        if deliveries > MAX_DELIVERIES:
            reason = f"abandoned after {deliveries - 1} deliveries: trainers died running it"
            await self._publish(
                RunResult(
                    run_id=spec.run_id,
                    tier=spec.tier,
                    seed=spec.seed,
                    champion_version=spec.champion_version,
                    status=RunStatus.CRASH,
                    idea_id=spec.idea_id,
                    trainer=self.name,
                    reason=reason,
                ),
                msg,
            )
            return
        current = await self._current_champion()
        if spec.champion_version < current:  # the ladder no longer uses results for it
            base = result_fields(spec, self.options.device, self.name)
            why = f"champion moved from v{spec.champion_version} to v{current} before it ran"
            await self._publish(RunResult(**base, status=RunStatus.SKIPPED, reason=why), msg)
            return
        try:
            source = await self._recipe(spec)
        except (RecipeMissing, ChampionMissing, PatchRefused) as exc:
            why = patch_refusal(exc) if isinstance(exc, PatchRefused) else str(exc)
            await self._publish(refused(spec, self.options.device, self.name, why), msg)
            return
        log.info(
            "run %s (tier %d, seed %d, delivery %d)", spec.run_id, spec.tier, spec.seed, deliveries
        )
        if self.options.instant_target:  # arithmetic: no thread, no heartbeat, nothing to stop
            self._publishing.append(
                asyncio.ensure_future(self._publish(self._run(spec, source), msg))
            )
            return
        # The live view measures a run from here, not from when it was queued. Keyed by the
        # delivery: a re-publish adds nothing, a job taken again after a death starts again.
        # Instant runs (above) announce nothing: they end before anyone could look, and each
        # would cost one more message and ledger row.
        key = f"started-{spec.run_id}-{deliveries}"
        await self._announce(AgentEventKind.STARTED, spec.run_id, key)
        heartbeat = asyncio.create_task(self._heartbeat(msg))
        runner = asyncio.ensure_future(asyncio.to_thread(self._run, spec, source))
        stopper = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({runner, stopper}, return_when=asyncio.FIRST_COMPLETED)
            if stop.is_set() and not runner.done():
                self._cancel.set()  # the experiment is killed; the job goes back to the queue
            try:
                result = await runner
            except Cancelled:
                await msg.nak()
                log.info("run %s handed back: trainer stopping", spec.run_id)
                return
        finally:
            heartbeat.cancel()
            stopper.cancel()
        await self._publish(result, msg)

    async def _data_hash(self) -> str:
        """This worker's data, hashed once (a target without a corpus of ours: "")."""
        if self._data is None:
            self._data = await asyncio.to_thread(self.target.data_hash)
        return self._data

    async def _current_champion(self) -> int:
        """The current champion's number, read again when RECHECK_S old (see the constant)."""
        number, read_at = self._current
        if time.monotonic() - read_at < RECHECK_S:
            return number
        try:
            number = await self.champions.current()
        except Exception as exc:  # the store is unreachable: run the job rather than guess
            log.warning("could not read the current champion: %s", exc)
        self._current = (number, time.monotonic())  # unreachable: not asked again for a while
        return number

    async def _published(self) -> None:
        """Wait for the instant results in flight. One that fails is not acked: its job comes
        back after the ack wait and runs again, as after a trainer's death."""
        pending, self._publishing = self._publishing, []
        for outcome in await asyncio.gather(*pending, return_exceptions=True):
            if isinstance(outcome, Exception):
                log.warning("a result was not published (its job will be redelivered): %s", outcome)

    async def _recipe(self, spec: RunSpec) -> str:
        """The whole recipe `spec` runs: by its content address from the recipe store; for a
        RunSpec older than those (schema v1.1), its champion with its patch applied
        (spec_recipe.py)."""
        if spec.recipe_sha:
            return await self.recipes.get(spec.recipe_sha)
        champion = await self._champion(spec.champion_version)
        return from_patch(champion, spec.patch, self.target.editable)

    async def _champion(self, version: int) -> str:
        """The recipe an older RunSpec's patch applies to, from the champion store. Version 1 is
        the target's own recipe, so a trainer also serves RunSpecs made without a ladder."""
        try:
            return await self.champions.get(version)
        except ChampionMissing:
            if version == 1:
                return self.target.initial_source()
            raise

    def _run(self, spec: RunSpec, source: str) -> RunResult:
        limits = self.options.default_limits.get(spec.tier) or RunLimits(time_limit_s=600)
        if spec.time_limit_s:
            limits = replace(limits, time_limit_s=spec.time_limit_s)
        if spec.eval_tokens:
            limits = replace(limits, eval_tokens=spec.eval_tokens)
        try:
            return self.target.run(
                spec,
                source,
                limits,
                self.options.scratch_dir,
                self.options.device,
                self.name,
                self.options.log_dir,
                self._cancel,
            )
        except Cancelled:
            raise
        except Exception as exc:  # a fault of ours that an experiment found: its run, not us
            log.exception("run %s: the runner failed", spec.run_id)
            base = result_fields(spec, self.options.device, self.name)
            why = f"the runner failed: {type(exc).__name__}: {str(exc)[:300]}"
            return RunResult(**base, status=RunStatus.CRASH, reason=why)

    async def _publish(self, result: RunResult, msg: Msg) -> None:
        await publish_event(self.js, result, timeout=30)  # before the ack: never lost
        try:
            # Confirmed, not fire-and-forget: the next look at a capped tier must not count
            # this job as still held, or the trainer turns to a lower tier while the capped
            # one has work (a loaded CI run saw a tier-0 job start before tier 2's last jobs).
            await msg.ack_sync(timeout=ACK_CONFIRM_S)
        except nats.errors.TimeoutError:
            # The result is published; if the ack was lost the job comes back and its second
            # result is dropped by run id (ledger and ladder).
            log.warning("run %s: the server did not confirm its ack", result.run_id)
        self.completed += 1
        log.info(
            "run %s: %s %s",
            result.run_id,
            result.status.value,
            f"{result.metric:.4f}" if result.metric is not None else result.reason,
        )

    async def _heartbeat(self, msg: Msg) -> None:
        while True:
            await asyncio.sleep(TRAINER_HEARTBEAT_S)
            try:
                await msg.in_progress()
            except Exception as exc:  # a missed heartbeat only risks a redelivery
                log.warning("heartbeat failed: %s", exc)

    async def _announce(self, kind: AgentEventKind, detail: str, key: str = "") -> None:
        """Best effort: an event that cannot be published is logged, never stops the trainer."""
        event = AgentEvent(key or new_id("ev"), self.name, kind, role="trainer", detail=detail)
        try:
            await publish_event(self.js, event)
        except Exception as exc:
            log.warning("could not announce %s: %s", kind.value, exc)


async def _has_job(sub: JetStreamContext.PullSubscription) -> bool:
    try:
        info = await sub.consumer_info()
    except Exception as exc:  # unknown: try the pull, as before
        log.debug("consumer info failed: %s", exc)
        return True
    cap = info.config.max_ack_pending or 0
    pending, held = info.num_pending or 0, info.num_ack_pending or 0
    if pending and (cap <= 0 or held < cap):
        return True
    if not held:
        return False
    # Nothing new, or at the cap. A job held by a trainer that died, or handed to a pull that
    # had already timed out, comes back after its ack_wait, but only to a new pull: pull once
    # nothing was delivered for ack_wait, or the tier waits forever (a soak run found this at a
    # cap; a fault test on a tier whose last job's trainer was killed, with no job after it).
    last = info.delivered.last_active if info.delivered else None
    quiet = (datetime.now(UTC) - last).total_seconds() if last else float("inf")
    return quiet > (info.config.ack_wait or 0)


async def _fetch(sub: JetStreamContext.PullSubscription, timeout: float, batch: int) -> list[Msg]:
    try:
        return await sub.fetch(batch, timeout=timeout)
    except TimeoutError:
        return []
