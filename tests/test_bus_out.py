"""What researchers publish reaches the bus, or their researcher hears why not (issue 18): an
idea dropped while the bus was away used to stay "in play" for good, and a researcher with two
such ideas proposed nothing again."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from autogen_core import TopicId, TypeSubscription
from nats.aio.client import Client

from agents.runtime_agents import OUTBOX, SOURCE, BusOutAgent, Outgoing, QuietRuntime
from bus.codec import decode
from bus.messages import AgentEvent, Idea
from bus.subjects import EVENTS_STREAM, ensure_streams
from tests.conftest import MAX_PAYLOAD, make_idea, wait_for_async


async def _bus_out(nc: Client, released: list[tuple[str, str]]) -> QuietRuntime:
    runtime = QuietRuntime()

    def release(idea: Idea, why: str) -> None:
        released.append((idea.idea_id, why))

    js = nc.jetstream()
    await BusOutAgent.register(runtime, "bus-out", lambda: BusOutAgent(js, None, release))
    await runtime.add_subscription(TypeSubscription(OUTBOX, "bus-out"))
    runtime.start()
    return runtime


async def _events(nc: Client) -> list[object]:
    js = nc.jetstream()
    info = await js.stream_info(EVENTS_STREAM)
    if not info.state.messages:
        return []
    found = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        found.append(decode((await js.get_msg(EVENTS_STREAM, seq)).data))
    return found


async def test_an_idea_goes_out_once_the_stream_is_back(nc: Client) -> None:
    """While the stream is away (JetStream restarting, its store lost and not yet made again)
    every try fails at once; the idea must go out when it is back, not be dropped after a few
    tries (it was, after 5 tries 1 s apart)."""
    released: list[tuple[str, str]] = []
    runtime = await _bus_out(nc, released)
    await nc.jetstream().delete_stream(EVENTS_STREAM)
    idea = make_idea(1)
    await runtime.publish_message(Outgoing((idea,)), TopicId(OUTBOX, SOURCE))
    await asyncio.sleep(6)
    await ensure_streams(nc.jetstream(), MAX_PAYLOAD)

    async def sent() -> bool:
        return any(getattr(e, "idea_id", None) == idea.idea_id for e in await _events(nc))

    await wait_for_async(sent, 30, 0.5)
    assert not released
    await runtime.stop_when_idle()


async def test_an_idea_the_bus_refuses_goes_back_to_its_researcher(nc: Client) -> None:
    released: list[tuple[str, str]] = []
    runtime = await _bus_out(nc, released)
    huge = replace(make_idea(2), patch="+" + "x" * MAX_PAYLOAD)  # more than the server takes
    await runtime.publish_message(Outgoing((huge,)), TopicId(OUTBOX, SOURCE))
    await runtime.stop_when_idle()
    assert [idea_id for idea_id, _ in released] == [huge.idea_id]
    assert "the bus refused it (MaxPayloadError" in released[0][1]
    notes = [e for e in await _events(nc) if isinstance(e, AgentEvent)]
    assert len(notes) == 1 and notes[0].agent == huge.author
    assert notes[0].detail.startswith(f"{huge.idea_id} was never sent, so it is out of play")
