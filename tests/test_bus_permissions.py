"""One NATS user per role on the embedded server (bus/roles.py), against a real nats-server:
every role can do its job, and what it must not do is refused with a permissions violation
(and never reaches a stream)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeout

from bus.champion_store import ChampionStore, champion_bucket
from bus.codec import decode
from bus.embedded_server import EmbeddedNatsServer
from bus.messages import BudgetKind, Decision, Message, RunSpec, Trace, Verdict, new_id
from bus.nats_bus import (
    BusSettings,
    BusUnavailable,
    connect,
    enqueue_job,
    enqueue_run,
    publish_event,
    queued_jobs,
    queued_run_ids,
)
from bus.replay import replay_events
from bus.roles import Role, authorization_block
from bus.subjects import (
    EVENTS_STREAM,
    JOBS_STREAM,
    LADDER_CONTROL_SUBJECT,
    SQL_SUBJECT,
    ensure_streams,
    ensure_trainer_consumer,
    trainer_consumer_name,
)
from ledger.service import LedgerOptions, LedgerService
from recipes.identity import recipe_sha
from recipes.store import BUCKET as RECIPES_BUCKET
from swarm.sql_client import ask_ledger
from swarm.workspace import Workspace
from tests.conftest import MAX_PAYLOAD, make_idea, make_result, wait_for_async


@dataclass
class RoleBus:
    server: EmbeddedNatsServer
    passwords: dict[Role, str]

    async def connect(self, role: Role) -> tuple[Client, list[str]]:
        """A connection as `role`, and the errors the server sends it (refusals are async)."""
        errors: list[str] = []

        async def on_error(exc: Exception) -> None:
            errors.append(str(exc))

        settings = BusSettings(self.server.url, user=role.value, password=self.passwords[role])
        return await connect(settings, f"test-{role.value}", error_cb=on_error), errors


@pytest.fixture
async def roles(tmp_path: Path) -> AsyncIterator[RoleBus]:
    passwords = Workspace(tmp_path / "ws").role_passwords()
    server = EmbeddedNatsServer(
        tmp_path / "run", tmp_path / "js", MAX_PAYLOAD, authorization=authorization_block(passwords)
    )
    server.start()
    bus = RoleBus(server, passwords)
    try:
        nc, errors = await bus.connect(Role.SUPERVISOR)  # what `swarm start` sets up
        await ensure_streams(nc.jetstream(), MAX_PAYLOAD)
        await champion_bucket(nc.jetstream())
        await nc.close()
        assert not errors
        yield bus
    finally:
        server.stop()


def spec(tier: int = 0) -> RunSpec:
    return RunSpec(new_id("run"), tier, 0, 1, BudgetKind.TOKENS, 1000.0)


async def count(nc: Client, table: str) -> int:
    answer = await ask_ledger(nc, f"select count(*) as n from {table}", 5)
    return int(answer.table.column("n")[0].as_py())


async def test_each_role_does_its_job(roles: RoleBus, tmp_path: Path) -> None:
    conns = {role: await roles.connect(role) for role in Role if role != Role.SUPERVISOR}
    nc = {role: conn[0] for role, conn in conns.items()}
    options = LedgerOptions(
        db_path=tmp_path / "ledger.duckdb",
        snapshot_dir=tmp_path / "snapshots",
        batch_size=100,
        snapshot_interval_s=30,
        sql_row_cap=100,
        sql_timeout_s=5,
        max_message_bytes=MAX_PAYLOAD,
    )
    ledger = LedgerService(nc[Role.LEDGER], options)
    stop = asyncio.Event()
    ledger_task = asyncio.create_task(ledger.run(stop))
    try:
        await asyncio.wait_for(ledger.ready.wait(), 10)
        # The ladder: a champion version, a job with its event, a decision; it answers people.
        ladder = nc[Role.LADDER].jetstream()
        await ChampionStore(ladder).put(1, "X = 1\n")
        await ChampionStore(ladder).set_current(1)
        job = spec()
        await enqueue_run(ladder, job)
        decision = Decision(new_id("dec"), "idea-001", 0, Verdict.REJECT, 1, "test")
        await publish_event(ladder, decision)

        async def answer(msg: Msg) -> None:
            await msg.respond(b'{"ok": true, "done": []}')

        await nc[Role.LADDER].subscribe(LADDER_CONTROL_SUBJECT, cb=answer)
        # A researcher proposes and explains, and replays the stream from its start.
        researcher = nc[Role.RESEARCHER].jetstream()
        await publish_event(researcher, make_idea(1))
        await publish_event(researcher, Trace(new_id("trace"), "agent-1", "propose"))
        seen: list[Message] = []

        async def handle(message: Message | None, seq: int) -> None:
            if message is not None:
                seen.append(message)

        replay = await replay_events(
            researcher, frozenset({"idea", "decision"}), MAX_PAYLOAD, handle
        )
        # The trainer takes the job, reads the champion, sends a heartbeat, reports, acks.
        trainer = nc[Role.TRAINER].jetstream()
        await ensure_trainer_consumer(trainer, 0)
        jobs = await trainer.pull_subscribe_bind(trainer_consumer_name(0), stream=JOBS_STREAM)
        (msg,) = await jobs.fetch(1, timeout=5)
        taken = decode(msg.data, MAX_PAYLOAD)
        assert isinstance(taken, RunSpec) and taken.run_id == job.run_id
        assert await ChampionStore(trainer).get(1) == "X = 1\n"
        await msg.in_progress()
        await publish_event(trainer, make_result(1, run_id=job.run_id))
        await msg.ack()
        # People: SQL through the ledger, the ladder's control subject, stream state.
        cli = nc[Role.CLI]

        async def recorded() -> bool:
            tables = ("runs", "run_specs", "ideas", "decisions", "traces")
            return all([await count(cli, table) == 1 for table in tables])

        await wait_for_async(recorded, 15)
        reply = await cli.request(LADDER_CONTROL_SUBJECT, b'{"action": "approve"}', timeout=5)
        assert reply.data == b'{"ok": true, "done": []}'
        assert (await cli.jetstream().stream_info(EVENTS_STREAM)).state.messages == 5
        await wait_for_async(lambda: _true(len(seen) == 2), 5)
        await replay.subscription.unsubscribe()
    finally:
        stop.set()
        await asyncio.wait_for(ledger_task, 10)
        for client, _ in conns.values():
            await client.close()
    assert {role: errors for role, (_, errors) in conns.items() if errors} == {}


async def _true(value: bool) -> bool:
    return value


Action = Callable[[Client], Awaitable[object]]


def publishing(message: Message) -> Action:
    return lambda nc: publish_event(nc.jetstream(), message, timeout=1)


async def take_job(nc: Client) -> None:
    jobs = await nc.jetstream().pull_subscribe_bind(trainer_consumer_name(0), stream=JOBS_STREAM)
    await jobs.fetch(1, timeout=1)


async def answer_sql(nc: Client) -> None:
    async def answer(msg: Msg) -> None:
        await msg.respond(b"forged")

    await nc.subscribe(SQL_SUBJECT, cb=answer)


async def make_job(nc: Client) -> None:
    await enqueue_job(nc.jetstream(), spec(), timeout=1)


FORGED_RECIPE = "LR = 9\n"
FORGED_KEY = f"$KV.{RECIPES_BUCKET}.{recipe_sha(FORGED_RECIPE)}"


async def forge_recipe(nc: Client) -> None:
    """Write a recipe into the store trainers run recipes from: the ladder's alone."""
    await nc.publish(FORGED_KEY, FORGED_RECIPE.encode())


REFUSED = [
    (Role.TRAINER, forge_recipe, f'publish to "{FORGED_KEY.lower()}"'),
    (Role.RESEARCHER, forge_recipe, f'publish to "{FORGED_KEY.lower()}"'),
    (Role.TRAINER, publishing(make_idea(7)), 'publish to "swarm.events.idea"'),
    (
        Role.TRAINER,
        publishing(Decision("d-x", "idea-007", 0, Verdict.PROMOTE, 1, "forged")),
        'publish to "swarm.events.decision"',
    ),
    (Role.TRAINER, answer_sql, 'subscription to "swarm.sql"'),
    (Role.RESEARCHER, publishing(make_result(7)), 'publish to "swarm.events.run_result"'),
    (
        Role.RESEARCHER,
        take_job,
        'publish to "$js.api.consumer.msg.next.swarm_jobs.trainers-tier0"',
    ),
    (Role.RESEARCHER, answer_sql, 'subscription to "swarm.sql"'),
    (Role.RESEARCHER, make_job, 'publish to "swarm.jobs.tier0"'),
    (Role.CLI, publishing(make_result(7)), 'publish to "swarm.events.run_result"'),
    (Role.CLI, publishing(make_idea(7)), 'publish to "swarm.events.idea"'),
    (Role.LADDER, publishing(make_result(7)), 'publish to "swarm.events.run_result"'),
    (Role.LEDGER, publishing(make_idea(7)), 'publish to "swarm.events.idea"'),
]


@pytest.mark.parametrize(
    ("role", "action", "refusal"),
    REFUSED,
    ids=[f"{r.value}-{refusal.split()[-1]}" for r, _, refusal in REFUSED],
)
async def test_what_a_role_must_not_do_is_refused(
    roles: RoleBus, role: Role, action: Action, refusal: str
) -> None:
    trainer, _ = await roles.connect(Role.TRAINER)  # a tier-0 consumer, as trainers make it
    await ensure_trainer_consumer(trainer.jetstream(), 0)
    await trainer.close()
    nc, errors = await roles.connect(role)
    try:
        # A refused request gets no answer: it times out, and the reason arrives as an error.
        with contextlib.suppress(TimeoutError, NatsTimeout):
            await action(nc)
        await nc.flush()
        await wait_for_async(lambda: _true(bool(errors)), 5, 0.02)
    finally:
        await nc.close()
    assert errors == [f"nats: permissions violation for {refusal}"]
    cli, _ = await roles.connect(Role.CLI)
    try:  # and nothing reached the streams
        js = cli.jetstream()
        assert (await js.stream_info(EVENTS_STREAM)).state.messages == 0
        assert (await js.stream_info(JOBS_STREAM)).state.messages == 0
    finally:
        await cli.close()


async def test_wrong_password_and_token_are_refused(roles: RoleBus) -> None:
    url = roles.server.url
    for settings in (
        BusSettings(url, user="trainer", password=roles.passwords[Role.LADDER]),
        BusSettings(url, token="anything"),
        BusSettings(url),
    ):
        with pytest.raises(BusUnavailable):
            await connect(settings, "intruder", timeout_s=1)
    assert oct(roles.server.run_dir.joinpath("nats-server.conf").stat().st_mode & 0o777) == "0o600"


async def test_the_ladder_may_read_which_jobs_are_queued(roles: RoleBus) -> None:
    """A restarted ladder lists the work queue to put back lost jobs (scale_ladder/service.py),
    and sends a capped tier's jobs as its trainers' consumer has room (work_queue.py): its role
    may read the job stream's messages and the trainers' consumers, and nothing else is asked
    of it."""
    nc, errors = await roles.connect(Role.LADDER)
    trainer, trainer_errors = await roles.connect(Role.TRAINER)
    try:
        job = spec()
        await enqueue_job(nc.jetstream(), job)
        assert await queued_run_ids(nc.jetstream()) == {job.run_id}
        assert await queued_jobs(nc.jetstream(), 0) is None  # no trainer of tier 0 yet
        await ensure_trainer_consumer(trainer.jetstream(), 0, 1)
        assert await queued_jobs(nc.jetstream(), 0) == 1
        await asyncio.sleep(0.2)  # a refusal would arrive asynchronously
        assert errors == [] and trainer_errors == []
    finally:
        await nc.close()
        await trainer.close()
