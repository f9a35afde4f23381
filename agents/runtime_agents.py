"""The researchers and the bus outlet as autogen-core agents (the small stable surface only).

Topics: the bridge publishes the swarm's ideas, decisions and champion changes, and the host's
Ticks, to FINDINGS; researchers publish their ideas and traces to OUTBOX, which only the BusOut
agent reads, so nothing that came from NATS is sent back to it.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from autogen_core import MessageContext, RoutedAgent, TopicId, message_handler
from nats.js import JetStreamContext

from agents.researcher import Researcher
from bus.messages import ChampionChange, Decision, Idea, Trace
from bus.nats_bus import publish_event

log = logging.getLogger(__name__)

FINDINGS = "findings"
OUTBOX = "outbox"
SOURCE = "swarm"


@dataclass(frozen=True, slots=True)
class Tick:
    """The host's nudge: propose if you have room."""


class ResearcherAgent(RoutedAgent):
    def __init__(self, researcher: Researcher) -> None:
        super().__init__(f"researcher {researcher.name}")
        self.researcher = researcher
        self._lock = asyncio.Lock()  # handlers of one agent run concurrently

    @message_handler
    async def on_idea(self, message: Idea, ctx: MessageContext) -> None:
        async with self._lock:
            self.researcher.on_idea(message)

    @message_handler
    async def on_decision(self, message: Decision, ctx: MessageContext) -> None:
        async with self._lock:
            self.researcher.on_decision(message)

    @message_handler
    async def on_champion(self, message: ChampionChange, ctx: MessageContext) -> None:
        async with self._lock:
            self.researcher.on_champion(message)

    @message_handler
    async def on_tick(self, message: Tick, ctx: MessageContext) -> None:
        async with self._lock:
            step = self.researcher.propose()
        if step is not None:
            outbox = TopicId(OUTBOX, SOURCE)
            await self.publish_message(step.trace, outbox)  # the why first, then the idea
            await self.publish_message(step.idea, outbox)


class BusOutAgent(RoutedAgent):
    """Sends what researchers publish to the swarm's event stream."""

    def __init__(self, js: JetStreamContext) -> None:
        super().__init__("publishes researchers' ideas and traces to NATS")
        self.js = js
        self.sent = 0

    @message_handler
    async def on_idea(self, message: Idea, ctx: MessageContext) -> None:
        await self._send(message)

    @message_handler
    async def on_trace(self, message: Trace, ctx: MessageContext) -> None:
        await self._send(message)

    async def _send(self, message: Idea | Trace) -> None:
        for attempt in range(5):
            try:
                await publish_event(self.js, message)
                self.sent += 1
                return
            except Exception as exc:  # the bus is reconnecting: the event id makes retries safe
                log.warning("publishing %s failed (%s), attempt %d", message.event_id, exc, attempt)
                await asyncio.sleep(1.0)
        log.error("dropped %s after 5 attempts", message.event_id)
