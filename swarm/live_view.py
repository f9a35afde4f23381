"""The live view of `swarm start`: who proposes what, what runs where, who leads, champion history.

`gather_snapshot` (live_snapshot.py) asks the ledger a few cheap read-only queries and
JetStream for the trainers' queues; `render` draws the snapshot with rich;
`LiveView` redraws it in place on a terminal, or prints one status line per update to a log.
What a researcher says about itself (an AgentEvent NOTE since its last proposal: it has nothing
it may edit, its budget is spent) gets a line of its own, once per distinct note.
"""

from __future__ import annotations

import time

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from bus.untrusted import for_terminal
from swarm.live_snapshot import (
    Experiment,
    LiveSnapshot,
    brain_and_persona,
    duration,
    of_limit,
    with_limit,
)

BAR_WIDTH = 12  # characters of a progress bar
LEADERBOARD_COLUMNS = ("tier", "v", "idea", "author", "hypothesis", "metric", "n")


def render(snapshot: LiveSnapshot) -> RenderableType:
    s = snapshot
    header = Text.assemble(
        ("swarm ", "bold"),
        f"elapsed {with_limit(duration(s.elapsed_s), s.minutes)} · ",
        f"experiments {s.experiments_run}{of_limit(s.max_experiments)} · ",
        (f"champion v{s.champion_version}", "bold green"),
    )
    totals = f"runs {_counts(s.runs_by_status)} · decisions {_counts(s.decisions_by_verdict)}"
    if s.llm_calls:
        totals += f" · LLM ${s.llm_usd:.4f} in {s.llm_calls} calls"
    parts: list[RenderableType] = [header, Text(totals, style="dim")]
    if s.error:
        parts.append(Text(for_terminal(s.error), style="bold red"))

    notes = [Text(for_terminal(line), style="yellow") for line in s.notes()]
    agents = _table("researchers", "agent", "brain", "persona", "in play", "last", "ago")
    for a in s.agents:
        brain, persona = brain_and_persona(a.name)
        ago = duration(s.taken_at - a.last_at) if a.last_at is not None else ""
        last = a.last_proposed or a.last_action
        agents.add_row(
            _plain(a.name),
            brain,
            persona,
            str(a.in_play),
            _cut(last),
            ago,
        )

    queues = _table("queues", "tier", "queued", "running")
    for q in s.queues:
        queues.add_row(str(q.tier), str(q.queued), str(q.running))

    experiments = _table("experiments", "tier", "idea", "seed", "progress")
    for e in s.experiments:
        idea = _plain(e.idea_id or "baseline")
        experiments.add_row(str(e.tier), idea, str(e.seed), _progress(e))

    better = "lower" if s.lower_is_better else "higher"
    title = f"leaderboard (latest champion per tier, {better} is better)"
    board = _table(title, *LEADERBOARD_COLUMNS)
    board.min_width = len(title)  # a board of short rows would wrap its title otherwise
    for b in s.leaderboard:
        metric = f"{b.mean_metric:.4f}"
        first = (str(b.tier), str(b.champion_version), _plain(b.idea_id), _plain(b.author))
        board.add_row(*first, _cut(b.hypothesis), metric, str(b.n_runs))

    champions = _table("champion history", "v", "kind", "idea", "author", "hypothesis", "ago")
    for c in s.champions:
        ago = duration(s.taken_at - c.created_at)
        by = (_plain(c.idea_id), _plain(c.author))
        champions.add_row(str(c.version), c.kind, *by, _cut(c.hypothesis), ago)

    middle = Table.grid(padding=(0, 2))
    middle.add_row(queues, experiments)
    return Group(*parts, agents, *notes, middle, board, champions)


class LiveView:
    """Redraws the snapshot in place on a terminal; prints one line per update otherwise."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._live: Live | None = None
        self._closed = False
        self._said: set[str] = set()  # notes already printed to a log

    def update(self, snapshot: LiveSnapshot) -> None:
        if self._closed:
            return
        if not self.console.is_terminal:
            line = f"swarm: {time.strftime('%H:%M:%S')} {snapshot.line()}"
            self.console.print(line, markup=False, highlight=False, soft_wrap=True)
            for note in snapshot.notes():  # each once: a log would repeat it every update
                if note not in self._said:
                    self._said.add(note)
                    self.console.print(
                        f"swarm: {note}", markup=False, highlight=False, soft_wrap=True
                    )
            return
        if self._live is None:
            self._live = Live(console=self.console, auto_refresh=False, transient=False)
            self._live.start()
        self._live.update(render(snapshot), refresh=True)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._live is not None:
            self._live.stop()


def _table(title: str, *columns: str) -> Table:
    table = Table(title=title, title_justify="left", box=None, pad_edge=False)
    for name in columns:
        # Free text gives way first when space is short (cut, see _cut); the rest keeps its width.
        table.add_column(name, no_wrap=name not in ("last", "hypothesis"))
    return table


def _cut(text: str) -> Text:
    return Text(for_terminal(text, newlines=False), no_wrap=True, overflow="ellipsis")


def _plain(text: str) -> Text:
    """A researcher's name, an idea id: shown as written, never read as rich markup (an agent
    named `[/]` stopped `swarm start`) nor as terminal escapes (bus/untrusted.py)."""
    return Text(for_terminal(text, newlines=False))


def _progress(e: Experiment) -> str:
    if not e.running:
        return f"queued {duration(e.age_s)}"
    if e.run_s is None:  # a trainer holds it, but when it started is not known (yet)
        return "running"
    if e.progress is None:  # no run at this tier has finished yet: nothing to measure against
        return f"running {duration(e.run_s)}"
    done = round(e.progress * BAR_WIDTH)
    return f"{'█' * done}{'░' * (BAR_WIDTH - done)} {e.progress:4.0%} {duration(e.run_s)}"


def _counts(counts: dict[str, int]) -> str:
    return " ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"
