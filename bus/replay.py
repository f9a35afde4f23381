"""Reading the event stream from its first event, then live: how a restarted ladder rebuilds its
state and how agents joining late learn the swarm's history.

An ordered consumer on SWARM_EVENTS delivers every event in stream order. `handle` gets each one
with its stream sequence: the decoded message for the wanted kinds, None for other kinds and for
undecodable events (the ledger keeps those as dead letters), so the reader always knows where
it is. It has caught up once it has handled the sequence that was last when it started.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy

from bus.codec import CodecError, decode
from bus.messages import Message
from bus.subjects import EVENTS_STREAM, EVENTS_SUBJECTS, event_subject

Handler = Callable[[Message | None, int], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Replay:
    subscription: Subscription
    start_seq: int  # the stream's last event when the replay began (0: it was empty)

    def caught_up(self, seq: int) -> bool:
        return seq >= self.start_seq


async def replay_events(
    js: JetStreamContext, kinds: frozenset[str], max_bytes: int, handle: Handler, after: int = 0
) -> Replay:
    """Replay from the first event, or from the one after sequence `after` (a reader that has
    folded the events up to it already: a snapshot)."""

    async def deliver(msg: Msg) -> None:
        message = None
        if msg.subject.rpartition(".")[2] in kinds:
            with contextlib.suppress(CodecError):
                message = decode(msg.data, max_bytes)
            if message is not None and msg.subject != event_subject(message):
                message = None  # not on its own kind's subject: the ledger dead-letters it
        await handle(message, msg.metadata.sequence.stream)

    start_seq = (await js.stream_info(EVENTS_STREAM)).state.last_seq
    where: dict[str, Any] = {"deliver_policy": DeliverPolicy.ALL}
    if after:
        start = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE)
        start.opt_start_seq = after + 1
        where = {"config": start}
    subscription = await js.subscribe(
        EVENTS_SUBJECTS,
        stream=EVENTS_STREAM,  # named: no lookup by subject (one request, one permission less)
        ordered_consumer=True,
        cb=deliver,
        **where,
    )
    return Replay(subscription, start_seq)
