"""A researcher whose offline brain has nothing it may move says so: an AgentEvent once per
champion, a line in the live view, the fixed names in the LLM prompt, and `swarm start` /
`swarm agents` refusing such a swarm before anything runs."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest
from nats.aio.client import Client
from rich.console import Console

from agents.brain import Brain, Desk, Persona
from agents.heuristic_brain import HeuristicBrain, OfflineBrain
from agents.llm_prompt import researcher_prefix
from agents.model_brain import ModelBrain, ModelSearch, Sampler
from agents.researcher import Researcher
from bus.messages import AgentEvent, AgentEventKind, ChampionChange, ChangeKind, Trace, new_id
from bus.nats_bus import publish_event
from ledger.service import LedgerService
from recipes.fixed import fixed_names
from swarm.config import ConfigError, SwarmConfig, with_overrides
from swarm.live_snapshot import AgentRow, LiveSnapshot, gather_snapshot
from swarm.live_view import LiveView, render
from swarm.preflight import check_editable, check_llm
from swarm.sql_client import ask_ledger
from swarm.start import start_swarm
from swarm.workspace import Workspace
from tests.conftest import wait_for_async

# Every dial held fixed or with no range to derive.
HELD_ALL = '''"""A script whose dials the project holds."""
import os
out_dir = 'out'  # a string: moves only when declared
batch_size = 12
n_layer = 6
learning_rate = 6e-4
dropout = 0.0  # zero: no scale to move on
seed = 1337  # search: fixed
exec(open('configurator.py').read())
iter_num = 0
'''
PATTERNS = "batch_size, n_*"
COMMAND = "python train.py --learning_rate=1e-3"
WHY = (
    "train.py has no constant a search may move: seed fixed by `# search: fixed`; batch_size, "
    "n_layer, learning_rate fixed by target.fixed or the run command; out_dir, dropout with no "
    "range to derive (declare one with `# search:`)"
)
NOW = 1_700_000_000.0


def _brain(kind: str) -> Brain:
    if kind == "tpe":
        return ModelBrain(ModelSearch(Sampler.TPE, seed=0))
    return OfflineBrain(HeuristicBrain(Persona.EXPLORER, 0))


@pytest.mark.parametrize("kind", ["tpe", "heuristic"])
async def test_an_offline_researcher_with_nothing_to_move_says_why_once_per_champion(
    kind: str,
) -> None:
    fixed = fixed_names(PATTERNS, COMMAND)
    researcher = Researcher(f"h-0-{kind}", _brain(kind), "train.py", "bytelm", 1, 2, fixed=fixed)
    researcher.observe(ChampionChange(1, 0, ChangeKind.INITIAL, "a", source=HELD_ALL))
    step = await researcher.propose()
    assert step is not None and step.idea is None and step.trace.action == "idle"
    (note,) = step.records
    assert isinstance(note, AgentEvent) and note.kind is AgentEventKind.NOTE
    assert (note.agent, note.role) == (researcher.name, "researcher")
    assert note.detail.startswith(WHY) and "opening block" in note.detail
    assert step.trace.why == note.detail
    researcher.resting_until = 0.0
    assert await researcher.propose() is None  # said already for this champion
    researcher.observe(ChampionChange(2, 1, ChangeKind.STACK, "b", source=HELD_ALL + "\n"))
    again = await researcher.propose()
    assert again is not None and again.trace.action == "idle"  # a new champion: said again
    movable = HELD_ALL.replace("dropout = 0.0", "dropout = 0.1")
    researcher.observe(ChampionChange(3, 2, ChangeKind.STACK, "c", source=movable))
    proposed = await researcher.propose()
    assert proposed is not None and proposed.idea is not None
    assert "dropout" in proposed.trace.proposed


def test_the_llm_prompt_names_the_constants_held_fixed() -> None:
    def desk(fixed: frozenset[str]) -> Desk:
        return Desk("r", 1, HELD_ALL, "train.py", 2, (), (), (), frozenset(), fixed=fixed)

    prompt = researcher_prefix(desk(fixed_names(PATTERNS, COMMAND)), "program", "strategy")
    assert "Leave these constants as they are" in prompt
    assert "batch_size, n_layer, learning_rate, seed." in prompt
    only_declared = researcher_prefix(desk(frozenset()), "program", "strategy")
    assert "as they are" in only_declared and ": seed." in only_declared
    not_python = Desk("r", 1, "a: [1\n", "config.yaml", 2, (), (), (), frozenset())
    assert "as they are" not in researcher_prefix(not_python, "program", "strategy")


# --- the live view ----------------------------------------------------------------------------


def _snapshot() -> LiveSnapshot:
    agents = (
        AgentRow("h-0-tpe", 0, "idle", f"idle: {WHY}", NOW - 3, note=WHY),
        AgentRow("h-1-tpe", 0, "idle", f"idle: {WHY}", NOW - 2, note=WHY),
        AgentRow("h-2-explorer", 1, "propose", "idea-a: dropout 0.1→0.2", NOW - 1),
    )
    return LiveSnapshot(60.0, None, 0, taken_at=NOW, agents=agents)


def test_the_live_view_shows_a_line_per_note() -> None:
    console = Console(file=io.StringIO(), width=400, color_system=None)
    console.print(render(_snapshot()))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert f"h-0-tpe and 1 more researchers: {WHY}" in text
    assert text.count("has no constant a search may move") == 1 + 2  # the line, and two cells


def test_a_log_gets_each_note_once() -> None:
    console = Console(file=io.StringIO(), width=100, color_system=None)
    view = LiveView(console)
    view.update(_snapshot())
    view.update(_snapshot())
    view.close()
    lines = console.file.getvalue().splitlines()  # type: ignore[attr-defined]
    notes = [line for line in lines if "more researchers:" in line]
    assert len(notes) == 1 and notes[0] == f"swarm: h-0-tpe and 1 more researchers: {WHY}"


async def test_gather_snapshot_keeps_a_note_until_the_researcher_proposes_again(
    nc: Client, ledger: LedgerService
) -> None:
    js = nc.jetstream()
    quiet, busy, t = "h-0-tpe", "h-1-tpe", time.time()
    for agent in (quiet, busy):
        join = AgentEvent(
            new_id("ev"), agent, AgentEventKind.JOINED, "researcher", created_at=t - 20
        )
        await publish_event(js, join)
    events: list[Trace | AgentEvent] = [  # quiet: a proposal, then its note; busy: the reverse
        Trace(new_id("tr"), quiet, "propose", proposed="idea-a", created_at=t - 10),
        AgentEvent(new_id("ev"), quiet, AgentEventKind.NOTE, "researcher", WHY, created_at=t - 5),
        AgentEvent(new_id("ev"), busy, AgentEventKind.NOTE, "researcher", WHY, created_at=t - 10),
        Trace(new_id("tr"), busy, "propose", proposed="idea-b", created_at=t - 5),
    ]
    for event in events:
        await publish_event(js, event)

    async def all_in() -> bool:
        sql = "SELECT (SELECT count(*) FROM agent_events) + (SELECT count(*) FROM traces) AS n"
        return bool((await ask_ledger(nc, sql, 5)).table.column("n")[0].as_py() == 6)

    await wait_for_async(all_in, 20)
    found = await gather_snapshot(nc, time.monotonic() - 60, None, 0)
    assert found.error == ""
    assert [(a.name, a.note) for a in found.agents] == [(quiet, WHY), (busy, "")]
    assert found.notes() == [f"{quiet}: {WHY}"]


# --- pre-flight: `swarm start` and `swarm agents` --------------------------------------------


def _command_config(project: Path, source: str, brain: str = "tpe", fixed: str = "") -> SwarmConfig:
    project.mkdir(exist_ok=True)
    (project / "train.py").write_text(source)
    config = with_overrides(
        SwarmConfig(),
        "target",
        kind="command",
        project=str(project),
        edit="train.py",
        run=COMMAND,
        metric="val_loss",
        fixed=fixed,
    )
    return with_overrides(config, "agents", brain=brain, count=4)


def test_preflight_refuses_offline_brains_with_nothing_to_move(tmp_path: Path) -> None:
    config = _command_config(tmp_path / "p", HELD_ALL, "tpe:2,heuristic:2", fixed=PATTERNS)
    with pytest.raises(ConfigError) as caught:
        check_editable(config, 4)
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / 'p' / 'train.py'}: the offline researchers")
    assert WHY in message
    for how in ("UPPER_CASE name anywhere", "opening block", "`# search:`", "target.fixed"):
        assert how in message
    assert "LLM brain (agents.brain)" in message
    with pytest.raises(ConfigError, match="no constant a search may move"):
        check_llm(config, Workspace(tmp_path / "ws"), 4)  # what `swarm agents` calls first


def test_preflight_says_when_there_are_no_constants_at_all(tmp_path: Path) -> None:
    below = "import os\nmain()\nlearning_rate = 6e-4\n"  # after the opening block: not a dial
    with pytest.raises(ConfigError, match=r"train\.py has no constants to move; a dial is"):
        check_editable(_command_config(tmp_path / "p", below), 4)
    with pytest.raises(ConfigError, match="cannot read it as Python"):
        check_editable(_command_config(tmp_path / "q", "def broken(:\n"), 4)


@pytest.mark.parametrize(
    ("source", "brain", "fixed"),
    [
        (HELD_ALL.replace("dropout = 0.0", "dropout = 0.1"), "tpe", PATTERNS),  # one dial left
        (HELD_ALL, "tpe", ""),  # batch_size and n_layer move
        (HELD_ALL, "tpe:2,anthropic:2", PATTERNS),  # an LLM may edit any code
    ],
)
def test_preflight_passes_a_swarm_that_can_propose(
    tmp_path: Path, source: str, brain: str, fixed: str
) -> None:
    check_editable(_command_config(tmp_path / "p", source, brain, fixed), 4)


async def test_swarm_start_refuses_before_anything_runs(tmp_path: Path) -> None:
    config = with_overrides(SwarmConfig(), "target", kind="synthetic", fixed="*")
    config = with_overrides(config, "agents", brain="heuristic", count=2)
    workspace = Workspace(tmp_path / "ws")
    with pytest.raises(ConfigError, match=r"synthetic\.py: the offline researchers"):
        await start_swarm(config, workspace, out=io.StringIO())
    assert not workspace.root.exists()  # no lock, no bus, no process
