"""NATS → autogen runtime: the swarm's ideas, decisions and champion changes, history first.

An ordered consumer reads the event stream from its first message, so agents joining a running
swarm (from any machine) learn everything that happened before they came, then follow live.
"""

from __future__ import annotations

import asyncio
import logging

from autogen_core import SingleThreadedAgentRuntime, TopicId
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.api import DeliverPolicy

from agents.runtime_agents import FINDINGS, SOURCE
from bus.codec import CodecError, decode
from bus.subjects import EVENTS_STREAM, EVENTS_SUBJECTS

log = logging.getLogger(__name__)

BRIDGED_KINDS = frozenset({"idea", "decision", "champion_change"})


class NatsBridge:
    def __init__(self, nc: Client, runtime: SingleThreadedAgentRuntime, max_bytes: int) -> None:
        self.nc = nc
        self.runtime = runtime
        self.max_bytes = max_bytes
        self.caught_up = asyncio.Event()
        self.forwarded = 0
        self._start_seq = 0
        self._sub: Subscription | None = None

    async def start(self) -> None:
        js = self.nc.jetstream()
        self._start_seq = (await js.stream_info(EVENTS_STREAM)).state.last_seq
        if self._start_seq == 0:
            self.caught_up.set()
        self._sub = await js.subscribe(
            EVENTS_SUBJECTS,
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.ALL,
            cb=self._forward,
        )

    async def _forward(self, msg: Msg) -> None:
        if msg.subject.rpartition(".")[2] in BRIDGED_KINDS:
            try:
                message = decode(msg.data, self.max_bytes)
            except CodecError:
                message = None  # the ledger keeps it as a dead letter
            if message is not None:
                await self.runtime.publish_message(message, TopicId(FINDINGS, SOURCE))
                self.forwarded += 1
        if msg.metadata.sequence.stream >= self._start_seq:
            self.caught_up.set()

    async def stop(self) -> None:
        if self._sub is not None:
            try:
                await self._sub.unsubscribe()
            except Exception as exc:
                log.debug("bridge unsubscribe: %s", exc)
            self._sub = None
