"""Every subject, stream and durable consumer of the swarm, declared in one place.

JetStream carries what must not be lost:
- EVENTS (limits retention): every message kind, the ledger's input; replayable by anyone.
- JOBS (work-queue retention): RunSpecs waiting for a trainer, one subject per tier.
Core NATS carries queries (SQL) that may be retried.

`ensure_streams` is idempotent: it creates what is missing and updates what differs, so it can run
at every start on an existing JetStream store.
"""

from __future__ import annotations

import logging

from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import NotFoundError

from bus.messages import Message

log = logging.getLogger(__name__)

PREFIX = "swarm"
EVENTS_STREAM = "SWARM_EVENTS"
EVENTS_SUBJECTS = f"{PREFIX}.events.>"
JOBS_STREAM = "SWARM_JOBS"
JOBS_SUBJECTS = f"{PREFIX}.jobs.>"

SQL_SUBJECT = f"{PREFIX}.sql"
# Requests to the ladder from people: approve, reject, revert (JSON in, JSON out).
LADDER_CONTROL_SUBJECT = f"{PREFIX}.ladder.control"
LEDGER_CONSUMER = "ledger"
# The ledger's consumer pushes here (a plain subscription with a callback is ~2.5x faster than
# nats-py's pull fetch, which waits per message). Acks still go to each message's reply subject.
LEDGER_DELIVER_SUBJECT = f"{PREFIX}._ledger.deliver"

# JetStream drops a re-published event with the same Nats-Msg-Id within this window.
DUPLICATE_WINDOW_S = 120.0
# The ledger must commit and ack a batch within this; unacked events are redelivered after it
# (so it is also how long events a killed ledger had in hand wait before coming back).
LEDGER_ACK_WAIT_S = 10.0
# Events in the ledger's hands, unacked, at most: bounds its memory and its redelivery burst.
LEDGER_MAX_ACK_PENDING = 20_000


def event_subject(message: Message) -> str:
    """Where a message is published: `swarm.events.<kind>`."""
    return f"{PREFIX}.events.{message.KIND}"


def job_subject(tier: int) -> str:
    return f"{PREFIX}.jobs.tier{tier}"


def event_size_limit(max_msg_bytes: int) -> int:
    """The largest event the stream takes: a bus message less room for the ledger to send it
    back as an Arrow row in one reply (ledger/remote_events.py reads purged events so; a row is
    a few KB larger than its JSON, and an event that filled a whole message could never be read
    back once retention purged it)."""
    return max_msg_bytes - max(8 * 1024, min(64 * 1024, max_msg_bytes // 8))


def stream_configs(max_msg_bytes: int) -> list[StreamConfig]:
    return [
        StreamConfig(
            name=EVENTS_STREAM,
            subjects=[EVENTS_SUBJECTS],
            retention=RetentionPolicy.LIMITS,
            storage=StorageType.FILE,
            duplicate_window=DUPLICATE_WINDOW_S,
            max_msg_size=event_size_limit(max_msg_bytes),
        ),
        StreamConfig(
            name=JOBS_STREAM,
            subjects=[JOBS_SUBJECTS],
            retention=RetentionPolicy.WORK_QUEUE,
            storage=StorageType.FILE,
            duplicate_window=DUPLICATE_WINDOW_S,
            max_msg_size=max_msg_bytes,
        ),
    ]


# Trainers share one durable consumer per tier on the work queue. A trainer sends in_progress()
# every TRAINER_HEARTBEAT_S while it runs a job; a job whose trainer died comes back after
# TRAINER_ACK_WAIT_S, to another trainer.
TRAINER_ACK_WAIT_S = 20.0
TRAINER_HEARTBEAT_S = 5.0


def trainer_consumer_name(tier: int) -> str:
    return f"trainers-tier{tier}"


def trainer_consumer_config(tier: int, max_concurrent: int = 0) -> ConsumerConfig:
    return ConsumerConfig(
        durable_name=trainer_consumer_name(tier),
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=TRAINER_ACK_WAIT_S,
        max_deliver=-1,  # trainers give up on a job themselves, with a RunResult saying why
        filter_subject=job_subject(tier),
        # The tier's concurrency cap across every trainer: jobs handed out and not yet acked.
        max_ack_pending=max_concurrent if max_concurrent > 0 else -1,
    )


async def ensure_trainer_consumer(js: JetStreamContext, tier: int, max_concurrent: int = 0) -> None:
    config = trainer_consumer_config(tier, max_concurrent)
    try:
        info = await js.consumer_info(JOBS_STREAM, trainer_consumer_name(tier))
    except NotFoundError:
        await js.add_consumer(JOBS_STREAM, config)
        return
    if (info.config.max_ack_pending or -1) != config.max_ack_pending:
        await js.add_consumer(JOBS_STREAM, config)  # same durable: updates the cap in place


def ledger_consumer_config() -> ConsumerConfig:
    return ConsumerConfig(
        durable_name=LEDGER_CONSUMER,
        deliver_policy=DeliverPolicy.ALL,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=LEDGER_ACK_WAIT_S,
        # The ledger never gives up on an event: a row that cannot be stored is stored as a
        # dead letter instead, so unbounded redelivery only happens while the ledger is down.
        max_deliver=-1,
        max_ack_pending=LEDGER_MAX_ACK_PENDING,
        filter_subject=EVENTS_SUBJECTS,
        deliver_subject=LEDGER_DELIVER_SUBJECT,
    )


async def ensure_streams(js: JetStreamContext, max_msg_bytes: int) -> None:
    for config in stream_configs(max_msg_bytes):
        assert config.name is not None
        try:
            await js.stream_info(config.name)
        except NotFoundError:
            log.info("creating stream %s", config.name)
            await js.add_stream(config)
        else:
            await js.update_stream(config)


async def ensure_ledger_consumer(js: JetStreamContext) -> None:
    config = ledger_consumer_config()
    try:
        await js.consumer_info(EVENTS_STREAM, LEDGER_CONSUMER)
    except NotFoundError:
        await js.add_consumer(EVENTS_STREAM, config)
