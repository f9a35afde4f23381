"""The researchers, the meta-agent and the bus outlet as autogen-core agents (the small stable
surface only).

Topics: the bridge publishes the swarm's history (ideas, decisions, failed runs, champion
changes, LLM calls, strategy versions) to FINDINGS, which one HistoryAgent per host folds, once,
into the History its researchers share (agents/history.py), telling each event only to those it
concerns: the runtime serialises a message once per delivery (for its telemetry), so a delivery
per researcher made 100 researchers cost 100x per event, and so did a fold per researcher.
Ticks go to TICKS (all researchers, every second) and to `tick-<i>` (one researcher, as soon as
it has room for another idea); the host's MetaTicks go to META. Researchers and the meta-agent
publish their records, traces and ideas to OUTBOX, which only the BusOut agent reads, so nothing
that came from NATS is sent back to it.

Events travel in batches (HistoryBatch in, Outgoing out): autogen-core's runtime takes one
message from its queue per turn of the event loop, so a message per event left a host's queue
about a second behind at 150 runs/s, and every idea a second late on the bus.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from autogen_core import (
    MessageContext,
    RoutedAgent,
    SingleThreadedAgentRuntime,
    TopicId,
    message_handler,
)
from nats.errors import MaxPayloadError
from nats.js import JetStreamContext
from nats.js.errors import BadRequestError

from agents.history import History, SharedHistory
from agents.llm_budget import LlmBudget
from agents.meta_agent import MetaAgent
from agents.researcher import Researcher, Step
from agents.strategy_book import StrategyBook
from bus.codec import CodecError
from bus.messages import (
    NEVER_SENT,
    AgentEvent,
    AgentEventKind,
    ChampionChange,
    Decision,
    Idea,
    LlmCall,
    Message,
    PromptPrefix,
    RunResult,
    StrategyVersion,
    Trace,
    new_id,
)
from bus.nats_bus import publish_event

log = logging.getLogger(__name__)

# What the bus will never take, however often it is sent: too large, or refused as malformed.
REFUSED = (MaxPayloadError, BadRequestError, CodecError)
RETRY_S = 1.0  # the first wait between tries while the bus is away; doubled up to RETRY_MAX_S
RETRY_MAX_S = 10.0
TRIES_WHEN_STOPPING = 5  # once the host is stopping, a bus still away gets this many more tries


class QuietRuntime(SingleThreadedAgentRuntime):
    """The single-threaded runtime without its telemetry attributes.

    autogen-core builds them for every delivery, serialising the message to JSON, whether or not
    a tracer is installed: 12% of the agents process at 100 researchers. The host installs no
    tracer, so nothing reads them. (A private method: tests/test_history_agent.py fails if an
    upgrade of autogen-core renames it.)
    """

    async def _create_otel_attributes(self, *args: Any, **kwargs: Any) -> Mapping[str, str]:
        return {}


FINDINGS = "findings"
TICKS = "ticks"
OUTBOX = "outbox"
META = "meta"
SOURCE = "swarm"


@dataclass(frozen=True, slots=True)
class Tick:
    """The host's nudge: propose if you have room."""


@dataclass(frozen=True, slots=True)
class MetaTick:
    """The host's nudge to the meta-agent: review the researchers."""


@dataclass(frozen=True, slots=True)
class HistoryBatch:
    """Events from the bus, in stream order (the bridge sends what arrived in one loop turn)."""

    events: tuple[Message, ...]
    last: tuple[int, str] | None = None  # the last one's stream seq and event key


@dataclass(frozen=True, slots=True)
class Outgoing:
    """Messages for the bus, to be published in this order."""

    messages: tuple[Message, ...]


HistoryEvent = Idea | Decision | ChampionChange | RunResult | LlmCall


def events_of(message: HistoryBatch | Message) -> tuple[Message, ...]:
    """What a FINDINGS message carries: the bridge sends batches; tests may send one event."""
    return message.events if isinstance(message, HistoryBatch) else (message,)


def tick_topic(index: int) -> str:
    return f"tick-{index}"


class HistoryAgent(RoutedAgent):
    """Folds the swarm's history once into the host's shared History, tells each event only to
    the researchers it concerns, and nudges each one that has room for another idea now, rather
    than at the next periodic tick."""

    def __init__(self, history: History, researchers: list[Researcher]) -> None:
        super().__init__("folds the swarm's history for the host's researchers")
        self.shared = SharedHistory(history, researchers)

    @message_handler
    async def on_history(self, message: HistoryBatch | HistoryEvent, ctx: MessageContext) -> None:
        # The events are folded, and told, before anything awaits, so handlers running
        # concurrently cannot interleave inside a fold: each sees the events in stream order.
        freed: dict[int, None] = {}  # in order, once each
        for event in events_of(message):
            if isinstance(event, HistoryEvent):
                freed.update(dict.fromkeys(self.shared.fold(event)))
        if isinstance(message, HistoryBatch) and message.last is not None:
            self.shared.history.checkpoint = message.last
        for index in freed:
            await self.publish_message(Tick(), TopicId(tick_topic(index), SOURCE))


class ResearcherAgent(RoutedAgent):
    def __init__(self, researcher: Researcher) -> None:
        super().__init__(f"researcher {researcher.name}")
        self.researcher = researcher

    @message_handler
    async def on_tick(self, message: Tick, ctx: MessageContext) -> None:
        # Not under the lock: an LLM answer takes seconds, and the researcher must go on
        # folding the swarm's events meanwhile (it refuses a second attempt by itself).
        was_stopped = bool(self.researcher.stopped)
        step = await self.researcher.propose()
        if step is not None:
            await publish_step(self, step)
        if self.researcher.stopped and not was_stopped:
            note = AgentEvent(
                new_id("ev"),
                self.researcher.name,
                AgentEventKind.NOTE,
                role="researcher",
                detail=self.researcher.stopped,
            )
            await self.publish_message(note, TopicId(OUTBOX, SOURCE))


async def publish_step(agent: RoutedAgent, step: Step) -> None:
    """The records first, then the why, then the idea: whoever reads the idea finds its story."""
    idea = (step.idea,) if step.idea is not None else ()
    await agent.publish_message(
        Outgoing((*step.records, step.trace, *idea)), TopicId(OUTBOX, SOURCE)
    )


class AccountsAgent(RoutedAgent):
    """Keeps the host's LLM budget and strategy versions up to date with every host's calls."""

    def __init__(self, budget: LlmBudget, book: StrategyBook) -> None:
        super().__init__("folds LLM spend and strategy versions")
        self.budget = budget
        self.book = book

    @message_handler
    async def on_history(
        self, message: HistoryBatch | LlmCall | StrategyVersion, ctx: MessageContext
    ) -> None:
        for event in events_of(message):
            if isinstance(event, LlmCall):
                self.budget.observe(event)
            elif isinstance(event, StrategyVersion):
                self.book.observe(event)
        if isinstance(message, HistoryBatch) and message.last is not None:
            self.budget.checkpoint = message.last


class MetaHostAgent(RoutedAgent):
    """Hosts the meta-agent: on each MetaTick it reviews every LLM researcher in turn."""

    def __init__(self, meta: MetaAgent, team: list[Researcher]) -> None:
        super().__init__(f"meta-agent {meta.name}")
        self.meta = meta
        self.team = team
        self.rewrites = 0
        self.reviewing = False

    @message_handler
    async def on_meta_tick(self, message: MetaTick, ctx: MessageContext) -> None:
        if self.reviewing:  # a review still waiting on the model: two would race on one file
            return
        self.reviewing = True
        try:
            await self._review_all()
        finally:
            self.reviewing = False

    async def _review_all(self) -> None:
        outbox = TopicId(OUTBOX, SOURCE)
        for researcher in self.team:
            review = await self.meta.review(researcher)
            for record in review.records:
                await self.publish_message(record, outbox)
            if review.rewritten is not None:
                self.rewrites += 1
                v = review.rewritten
                trace = Trace(
                    new_id("trace"),
                    self.meta.name,
                    "rewrite strategy",
                    read=json.dumps(v.hit_rates_before),
                    proposed=f"{v.agent} strategy v{v.version}",
                    why=v.reason,
                    data={"strategy_id": v.strategy_id, "call_id": v.call_id},
                )
                await self.publish_message(trace, outbox)
            else:
                log.debug("meta: %s not rewritten: %s", researcher.name, review.why_not)


class BusOutAgent(RoutedAgent):
    """Sends what researchers publish to the swarm's event stream. While the bus is away it
    tries again until it is back (the event id makes repeats harmless): a researcher counts its
    idea in play from the moment it proposes it, so an idea dropped after a few tries left it
    waiting for a verdict that would never come, and two such drops left it idle for good. An
    idea the bus refuses outright is given back to its researcher (`release`), with a note on
    the bus saying why."""

    def __init__(
        self,
        js: JetStreamContext,
        stopping: asyncio.Event | None = None,
        release: Callable[[Idea, str], None] | None = None,
    ) -> None:
        super().__init__("publishes researchers' ideas and traces to NATS")
        self.js = js
        self.stopping = stopping or asyncio.Event()
        self.release = release
        self.sent = 0

    @message_handler
    async def on_outgoing(
        self,
        message: Idea | Trace | LlmCall | PromptPrefix | StrategyVersion | AgentEvent,
        ctx: MessageContext,
    ) -> None:
        await self._send(message)

    @message_handler
    async def on_outgoing_batch(self, message: Outgoing, ctx: MessageContext) -> None:
        for item in message.messages:
            await self._send(item)

    async def _send(self, message: Message) -> None:
        why = await self._publish(message)
        if not why:
            return
        log.error("dropped %s: %s", message.event_id, why)
        if isinstance(message, Idea) and self.release is not None:
            self.release(message, why)
            detail = f"{message.idea_id}{NEVER_SENT}, so it is out of play: {why}"
            note = AgentEvent(
                new_id("ev"), message.author, AgentEventKind.NOTE, role="researcher", detail=detail
            )
            with contextlib.suppress(Exception):  # the bus took nothing: the log says it
                await publish_event(self.js, note)

    async def _publish(self, message: Message) -> str:
        """Until published (""), or why it never will be."""
        tries, after_stop = 0, 0
        while True:
            try:
                await publish_event(self.js, message)
                self.sent += 1
                return ""
            except REFUSED as exc:
                return f"the bus refused it ({type(exc).__name__}: {str(exc)[:200]})"
            except Exception as exc:  # the bus is away or reconnecting
                tries += 1
                after_stop += self.stopping.is_set()
                if after_stop >= TRIES_WHEN_STOPPING:
                    return f"the host stopped while the bus was away ({exc or type(exc).__name__})"
                log.warning("publishing %s failed (%s), try %d", message.event_id, exc, tries)
                if self.stopping.is_set():  # the last few tries: as quick as they were before
                    await asyncio.sleep(RETRY_S)
                    continue
                with contextlib.suppress(TimeoutError):  # a stop cuts a long wait short
                    await asyncio.wait_for(
                        self.stopping.wait(), min(RETRY_S * 2 ** (tries - 1), RETRY_MAX_S)
                    )
