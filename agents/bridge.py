"""NATS → autogen runtime: what researchers learn from (ideas, decisions, runs, champion changes,
LLM calls and strategy versions), history first.

An ordered consumer reads the event stream from its first message, so agents joining a running
swarm (from any machine) learn everything that happened before they came, then follow live.
What arrives in one turn of the event loop goes to the runtime as one HistoryBatch (see
agents/runtime_agents.py for why).
"""

from __future__ import annotations

import asyncio
import logging

from autogen_core import SingleThreadedAgentRuntime, TopicId
from nats.aio.client import Client

from agents.runtime_agents import FINDINGS, SOURCE, HistoryBatch
from bus.messages import Message, event_key
from bus.replay import Replay, replay_events
from ledger.remote_events import ledger_events

log = logging.getLogger(__name__)

BRIDGED_KINDS = frozenset(
    {"idea", "decision", "run_result", "champion_change", "llm_call", "strategy"}
)


class NatsBridge:
    def __init__(self, nc: Client, runtime: SingleThreadedAgentRuntime, max_bytes: int) -> None:
        self.nc = nc
        self.runtime = runtime
        self.max_bytes = max_bytes
        self.caught_up = asyncio.Event()
        self.forwarded = 0
        self._replay: Replay | None = None
        self._batch: list[Message] = []
        self._last: tuple[int, str] | None = None  # the batch's last event, by stream seq
        self._handled = 0  # the last stream seq handed over by the replay
        self._sending: set[asyncio.Task[None]] = set()

    @property
    def last(self) -> tuple[int, str] | None:
        """The stream seq and event key of the last event forwarded."""
        return self._last

    async def start(self, after: int = 0) -> None:
        """Replay from the first event, or from the one after `after` (the host's state was
        restored from a snapshot folded up to it)."""
        js = self.nc.jetstream()
        self._replay = await replay_events(
            js, BRIDGED_KINDS, self.max_bytes, self._forward, after, self._from_ledger
        )
        # Nothing after it, or every event to read came while the replay was being set up.
        if self._replay.done or self._replay.caught_up(self._handled):
            self.caught_up.set()

    async def _from_ledger(self, after: int, before: int) -> list[tuple[int, Message]]:
        log.info("events %d..%d left the stream: read from the ledger", after + 1, before - 1)
        return await ledger_events(self.nc, BRIDGED_KINDS, after, before)

    async def _forward(self, message: Message | None, seq: int) -> None:
        # The replay decodes by subject; a message of another kind sent on a bridged subject
        # (the ledger dead-letters it) must not reach researchers that never expect its type.
        if message is not None and message.KIND in BRIDGED_KINDS:
            if not self._batch:
                asyncio.get_running_loop().call_soon(self._send_batch)
            self._batch.append(message)
            self._last = (seq, event_key(message.KIND, message.event_id))
            self.forwarded += 1
        self._handled = max(self._handled, seq)
        if self._replay is not None and self._replay.caught_up(seq):
            self.caught_up.set()

    def _send_batch(self) -> None:
        batch = HistoryBatch(tuple(self._batch), self._last)
        self._batch = []
        # Tasks start in the order they are made: batches reach the runtime in stream order.
        task = asyncio.ensure_future(self.runtime.publish_message(batch, TopicId(FINDINGS, SOURCE)))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def stop(self) -> None:
        if self._replay is not None:
            try:
                await self._replay.subscription.unsubscribe()
            except Exception as exc:
                log.debug("bridge unsubscribe: %s", exc)
            self._replay = None
