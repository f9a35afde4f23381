"""Reading the event stream from its first event, then live: how a restarted ladder rebuilds its
state and how agents joining late learn the swarm's history.

An ordered consumer on SWARM_EVENTS delivers the events of the kinds the reader folds, in stream
order; the server leaves the other kinds out (a third of a swarm's events are traces and agent
events no reader here folds, and each delivered event costs its reader about 70 µs). `handle`
gets each one with its stream sequence: the decoded message, or None for an undecodable event
(the ledger keeps those as dead letters), so the reader always knows where it is. It has caught
up once it has handled the last event of its kinds that the stream held when it started.

With retention on, the stream may no longer hold the first events a reader needs; `fill` then
gives them from the ledger, which stored each before the stream let it go
(ledger/remote_events.py, ledger/retention.py), and the stream is read from its first event on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from bus.codec import CodecError, decode
from bus.messages import Message
from bus.subjects import EVENTS_STREAM, EVENTS_SUBJECTS, PREFIX, event_subject

Handler = Callable[[Message | None, int], Awaitable[None]]
# (after, before) -> (seq, message) of the events in between, in stream order
Fill = Callable[[int, int], Awaitable[list[tuple[int, Message]]]]


class EventsPurged(RuntimeError):
    """The stream no longer holds events the reader needs, and it has nowhere else to read
    them from."""


@dataclass(frozen=True, slots=True)
class Replay:
    subscription: Subscription
    start_seq: int  # the last event of its kinds when the replay began (0: none)
    after: int = 0  # the stream was read from the event after this one

    @property
    def done(self) -> bool:
        """Nothing to read: the stream held nothing after `after` when the replay began."""
        return self.start_seq <= self.after

    def caught_up(self, seq: int) -> bool:
        return seq >= self.start_seq


async def replay_events(
    js: JetStreamContext,
    kinds: frozenset[str],
    max_bytes: int,
    handle: Handler,
    after: int = 0,
    fill: Fill | None = None,
) -> Replay:
    """Replay from the first event, or from the one after sequence `after` (a reader that has
    folded the events up to it already: a snapshot). Events before the stream's first one come
    from `fill`; without one, EventsPurged."""

    async def deliver(msg: Msg) -> None:
        seq = msg.metadata.sequence.stream
        message = None
        if msg.subject.rpartition(".")[2] in kinds:
            with contextlib.suppress(CodecError):
                message = decode(msg.data, max_bytes)
            if message is not None and msg.subject != event_subject(message):
                message = None  # not on its own kind's subject: the ledger dead-letters it
        await handle(message, seq)

    while True:  # until the stream holds every event after `after` (a purge may run meanwhile)
        state = (await js.stream_info(EVENTS_STREAM)).state
        if after + 1 >= state.first_seq or state.last_seq == 0:
            break
        if fill is None:
            raise EventsPurged(
                f"the event stream starts at event {state.first_seq}; events "
                f"{after + 1}..{state.first_seq - 1} were purged (retention) and no ledger "
                "was asked for them"
            )
        for seq, message in await fill(after, state.first_seq):
            await handle(message if message.KIND in kinds else None, seq)
        after = state.first_seq - 1
    start_seq = await _last_of(js, kinds) if state.last_seq else 0
    config = ConsumerConfig(filter_subjects=[f"{PREFIX}.events.{kind}" for kind in sorted(kinds)])
    if after:
        config.deliver_policy = DeliverPolicy.BY_START_SEQUENCE
        config.opt_start_seq = after + 1
    subscription = await js.subscribe(
        EVENTS_SUBJECTS,
        stream=EVENTS_STREAM,  # named: no lookup by subject (one request, one permission less)
        ordered_consumer=True,
        cb=deliver,
        config=config,
    )
    first = (await js.stream_info(EVENTS_STREAM)).state.first_seq
    if first > after + 1 and start_seq:  # purged between the check above and the subscription
        # The consumer may have started past them: folding on would miss them for good. A
        # restart (`swarm start` restarts its processes) reads them from the ledger.
        with contextlib.suppress(Exception):
            await subscription.unsubscribe()
        raise EventsPurged(
            f"events {after + 1}..{first - 1} left the stream while this process started "
            "reading it; start it again (it reads them from the ledger then)"
        )
    return Replay(subscription, start_seq, after)


async def _last_of(js: JetStreamContext, kinds: frozenset[str]) -> int:
    """The stream sequence of the last event of any of `kinds` (0: none)."""
    last = 0
    for kind in kinds:
        with contextlib.suppress(NotFoundError):
            msg = await js.get_msg(EVENTS_STREAM, subject=f"{PREFIX}.events.{kind}")
            last = max(last, msg.seq or 0)
    return last
