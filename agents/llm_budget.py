"""What the swarm's LLM calls have cost, and whether another call is allowed.

Spend is folded from LlmCall events: the host's own calls as they are made, and every host's
calls as the bus brings them (history first), so one budget holds across processes, machines and
restarts. A call is idempotent here (keyed by its id), so seeing it twice counts it once.

The check comes before a call and the cost is known only after it, so concurrent calls can pass
the limit by at most what the calls in flight cost: one proposal per researcher.
"""

from __future__ import annotations

from collections import defaultdict

from bus.messages import LlmCall


class LlmBudget:
    def __init__(self, max_usd: float = 0.0, max_usd_per_agent: float = 0.0) -> None:
        self.max_usd = max_usd  # 0: no limit
        self.max_usd_per_agent = max_usd_per_agent
        self.spent_usd = 0.0
        self.by_agent: dict[str, float] = defaultdict(float)
        self._seen: set[str] = set()
        self.checkpoint: tuple[int, str] | None = None  # the last event folded, by stream seq
        self.unsent: set[str] = set()  # own calls counted, not yet back from the stream

    def observe(self, call: LlmCall, own: bool = False) -> None:
        """Count a call: one of this host's as it is made (`own`), any as the stream brings
        it (counted once). An own call not yet back from the stream keeps the host from
        snapshotting (agents/host_snapshot.py): it may never be sent."""
        if own:
            self.unsent.add(call.call_id)
        else:
            self.unsent.discard(call.call_id)
        if call.call_id in self._seen:
            return
        self._seen.add(call.call_id)
        self.spent_usd += call.cost_usd
        self.by_agent[call.agent] += call.cost_usd

    def refusal(self, agent: str) -> str | None:
        """Why `agent` may not call an LLM now; None if it may."""
        if self.max_usd and self.spent_usd >= self.max_usd:
            return f"the swarm's LLM budget is spent (${self.spent_usd:.4f} of ${self.max_usd:.2f})"
        mine = self.by_agent.get(agent, 0.0)
        if self.max_usd_per_agent and mine >= self.max_usd_per_agent:
            return f"{agent}'s LLM budget is spent (${mine:.4f} of ${self.max_usd_per_agent:.2f})"
        return None
