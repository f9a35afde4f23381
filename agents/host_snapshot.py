"""An agents host's folded state on disk, so a restart replays only the events after it (the
file, its header and the checks every snapshot needs: bus/snapshot_file.py).

What a host folds from the stream: the shared History (champions, findings, recipes tried,
failures), the LLM budget's spend and the strategy versions (AccountsAgent), and what each
researcher was told about its own ideas (its notes, and which strategy version each came from).
Researchers are named by host and index, so a restarted host's researchers take their memories
back. Live state (ideas in flight, rests, the model brains' studies, which are rebuilt from the
History at their next proposal) is not kept: a restarted host starts with none of it, as after a
full replay.

A snapshot is taken only at a point where every fold stands at the same event (the History and
the accounts are folded by two agents of the runtime) and no idea of this host's is folded but
not yet back from the stream (one may never be sent). Beyond the shared checks, another editable
file or target means a full replay.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from agents.brain import Failure, Finding, Gain
from agents.history import History
from agents.llm_budget import LlmBudget
from agents.researcher import Researcher
from agents.strategy_book import StrategyBook
from bus import snapshot_file
from bus.messages import StrategyVersion
from bus.snapshot_file import Checkpoint, Stale
from recipes.constants import Change

log = logging.getLogger(__name__)

FORMAT = 1


@dataclass(slots=True)
class Memory:
    """What a researcher was told about its own ideas."""

    notes: list[str]
    idea_strategy: dict[str, int]


@dataclass(slots=True)
class HostState:
    history: History
    spent_usd: float = 0.0
    by_agent: dict[str, float] = field(default_factory=dict)
    calls: set[str] = field(default_factory=set)  # LLM calls counted, by id
    strategies: dict[str, StrategyVersion] = field(default_factory=dict)
    memories: dict[str, Memory] = field(default_factory=dict)


STATE_CLASSES = (HostState, Memory, History, LlmBudget, Finding, Gain, Failure, Change)


def checkpoint_of(
    history: History, budget: LlmBudget, book: StrategyBook | None
) -> tuple[int, str] | None:
    """The event the host's state is folded up to, if it can be snapshotted now (see above)."""
    if history.unconfirmed or history.checkpoint is None or budget.unsent:
        return None
    if book is not None and book.unsent:
        return None  # a strategy version of its own may never be sent
    if book is not None and budget.checkpoint != history.checkpoint:
        return None  # the accounts stand at another batch: wait for them
    return history.checkpoint


def capture(
    history: History, budget: LlmBudget, book: StrategyBook | None, team: list[Researcher]
) -> HostState:
    return HostState(
        history,
        budget.spent_usd,
        dict(budget.by_agent),
        set(budget._seen),
        dict(book.latest) if book is not None else {},
        {r.name: Memory(list(r.notes), dict(r.idea_strategy)) for r in team},
    )


def restore(
    state: HostState, budget: LlmBudget, book: StrategyBook | None, team: list[Researcher]
) -> None:
    """Everything but the History (the team is built around it: make_team)."""
    budget.spent_usd = state.spent_usd
    budget.by_agent.update(state.by_agent)
    budget._seen |= state.calls
    budget.checkpoint = state.history.checkpoint
    if book is not None:
        book.latest.update(state.strategies)
    for researcher in team:
        memory = state.memories.get(researcher.name)
        if memory is not None:
            researcher.notes.extend(memory.notes)
            researcher.idea_strategy.update(memory.idea_strategy)


def save(path: Path, state: HostState, checkpoint: Checkpoint) -> None:
    snapshot_file.save(path, snapshot_file.header_of(FORMAT, STATE_CLASSES, checkpoint), state)


def load(
    path: Path,
    editable: str,
    target: str,
    team: tuple[str, ...],
    stream: str,
    last_seq: int,
) -> HostState:
    """The state at `path`, if it can stand for a full replay of the stream created at
    `stream`, now at `last_seq`, for a host of `editable` and `target` whose researchers are
    `team`; else Stale saying why (FileNotFoundError: none). Its History's checkpoint is the
    snapshot's."""
    header = snapshot_file.read_header(path)
    if header is None:
        raise FileNotFoundError(path)
    checkpoint = snapshot_file.check_header(header, FORMAT, STATE_CLASSES, stream, last_seq)
    state = snapshot_file.load_state(path)
    if not isinstance(state, HostState) or not isinstance(state.history, History):
        raise Stale(f"holds a {type(state).__name__}, not an agents host's state")
    history = state.history
    if (history.editable, history.target) != (editable, target):
        raise Stale(f"folded for {history.target} ({history.editable}), this host is {target}")
    if tuple(state.memories) != team:  # a replay tells every researcher about its own ideas
        raise Stale(f"its researchers were {len(state.memories)}, now {len(team)} (or renamed)")
    if history.checkpoint != (checkpoint.seq, checkpoint.event):
        raise Stale("its state and its header name different events")
    return state


class Snapshots:
    """Writes the host's state every `interval_s` once it has caught up, and at stop."""

    def __init__(self, path: Path | None, interval_s: float, stream: str) -> None:
        self.path = path
        self.interval_s = interval_s
        self.stream = stream
        self.written_at = time.monotonic()
        self.took_s = 0.0  # how long the last write took

    def write_if_due(
        self,
        history: History,
        budget: LlmBudget,
        book: StrategyBook | None,
        team: list[Researcher],
        now: bool = False,
    ) -> bool:
        wait = max(self.interval_s, snapshot_file.COST_SHARE * self.took_s)
        due = now or time.monotonic() - self.written_at >= wait
        at = checkpoint_of(history, budget, book)
        if self.path is None or not due or at is None or not self.stream:
            return False
        self.written_at = time.monotonic()
        try:
            save(self.path, capture(history, budget, book, team), Checkpoint(*at, self.stream))
        except Exception as exc:  # a full disk: the next start replays more, nothing is lost
            log.warning("could not write the agents snapshot %s: %s", self.path, exc)
            return False
        finally:
            self.took_s = time.monotonic() - self.written_at
        return True
