"""Hosting researchers: one autogen-core runtime per process, bridged to the swarm's NATS bus.

`swarm start --agents N` runs one host for its N researchers; `swarm agents --count N` runs one
on any machine that reaches the bus, and its researchers join the same community.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

from autogen_core import SingleThreadedAgentRuntime, TopicId, TypeSubscription
from nats.aio.client import Client

from agents.bridge import NatsBridge
from agents.heuristic_brain import HeuristicBrain, Persona
from agents.researcher import Researcher
from agents.runtime_agents import FINDINGS, OUTBOX, SOURCE, BusOutAgent, ResearcherAgent, Tick
from bus.messages import AgentEvent, AgentEventKind, new_id
from bus.nats_bus import publish_event

log = logging.getLogger(__name__)

TICK_S = 1.0


@dataclass(frozen=True, slots=True)
class HostOptions:
    count: int
    name_prefix: str  # researchers are named <prefix>-<i>-<persona>: stable across restarts
    personas: tuple[Persona, ...]
    max_in_flight: int
    seed: int
    editable: str
    target: str
    top_tier: int
    max_message_bytes: int = 8 * 1024 * 1024


def researchers(options: HostOptions) -> list[Researcher]:
    made = []
    for i in range(options.count):
        persona = options.personas[i % len(options.personas)]
        name = f"{options.name_prefix}-{i}-{persona.value}"
        brain = HeuristicBrain(persona, options.seed + i)
        made.append(
            Researcher(
                name,
                brain,
                options.editable,
                options.target,
                options.max_in_flight,
                options.top_tier,
            )
        )
    return made


async def run_host(nc: Client, options: HostOptions, stop: asyncio.Event) -> list[Researcher]:
    js = nc.jetstream()
    runtime = SingleThreadedAgentRuntime()
    team = researchers(options)
    for i, researcher in enumerate(team):
        agent_type = f"researcher-{i}"
        await ResearcherAgent.register(runtime, agent_type, _factory(researcher))
        await runtime.add_subscription(TypeSubscription(FINDINGS, agent_type))
    await BusOutAgent.register(runtime, "bus-out", lambda: BusOutAgent(js))
    await runtime.add_subscription(TypeSubscription(OUTBOX, "bus-out"))
    runtime.start()
    bridge = NatsBridge(nc, runtime, options.max_message_bytes)
    await bridge.start()
    await _announce(nc, team, AgentEventKind.JOINED)
    try:
        await _caught_up(bridge, stop)
        log.info("%d researchers caught up with the swarm's history", len(team))
        while not stop.is_set():
            await runtime.publish_message(Tick(), TopicId(FINDINGS, SOURCE))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), TICK_S)
    finally:
        await bridge.stop()
        await runtime.stop_when_idle()
        await runtime.close()
        await _announce(nc, team, AgentEventKind.LEFT)
    return team


def _factory(researcher: Researcher) -> Callable[[], ResearcherAgent]:
    return lambda: ResearcherAgent(researcher)


async def _caught_up(bridge: NatsBridge, stop: asyncio.Event) -> None:
    waiter = asyncio.ensure_future(bridge.caught_up.wait())
    stopper = asyncio.ensure_future(stop.wait())
    await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    stopper.cancel()


async def _announce(nc: Client, team: list[Researcher], kind: AgentEventKind) -> None:
    js = nc.jetstream()
    for researcher in team:
        detail = f"persona {researcher.brain.persona.value}; proposed {researcher.proposed}"
        event = AgentEvent(new_id("ev"), researcher.name, kind, role="researcher", detail=detail)
        try:
            await publish_event(js, event)
        except Exception as exc:
            log.warning("could not announce %s for %s: %s", kind.value, researcher.name, exc)
