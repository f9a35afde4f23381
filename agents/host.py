"""Hosting researchers: one autogen-core runtime per process, bridged to the swarm's NATS bus.

`swarm start --agents N` runs one host for its N researchers; `swarm agents --count N` runs one
on any machine that reaches the bus, and its researchers join the same community. Researchers
come in brain groups (tpe, gp, heuristic, anthropic, openai); when any is an LLM brain the host
also runs the meta-agent, which rewrites their strategy files, and keeps one LLM budget for them
all. The model brains of a kind share one study per host (agents/model_brain.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from autogen_core import SingleThreadedAgentRuntime, TopicId, TypeSubscription
from nats.aio.client import Client
from nats.js import JetStreamContext

from agents import host_snapshot
from agents.brain import Brain, Persona
from agents.brain_groups import MODEL_BRAINS, BrainGroup
from agents.bridge import NatsBridge
from agents.heuristic_brain import HeuristicBrain, OfflineBrain
from agents.history import History
from agents.host_snapshot import HostState, Snapshots
from agents.llm_brain import LlmBrain, LlmSettings
from agents.llm_budget import LlmBudget
from agents.llm_client import LlmClient
from agents.llm_setup import LlmSetup
from agents.meta_agent import MetaAgent
from agents.model_brain import ModelBrain, ModelSearch, Sampler
from agents.portfolio_brain import PortfolioBrain
from agents.researcher import Researcher
from agents.runtime_agents import (
    FINDINGS,
    META,
    OUTBOX,
    SOURCE,
    TICKS,
    AccountsAgent,
    BusOutAgent,
    HistoryAgent,
    MetaHostAgent,
    MetaTick,
    QuietRuntime,
    ResearcherAgent,
    Tick,
    tick_topic,
)
from agents.screening import Screen
from agents.strategy_book import StrategyBook
from bus import snapshot_file
from bus.messages import AgentEvent, AgentEventKind, Idea, new_id
from bus.nats_bus import publish_event
from bus.snapshot_file import Stale

log = logging.getLogger(__name__)

TICK_S = 1.0
FLUSH_S = 25.0  # at shutdown; `swarm start` gives the agents process 30 s before SIGKILL


@dataclass(frozen=True, slots=True)
class HostOptions:
    count: int
    name_prefix: str  # researchers: <prefix>-<i>-<persona> (heuristic), <prefix>-<i>-tpe|gp,
    # <prefix>-<i>-portfolio-<persona>, <prefix>-<i>-<llm brain>-<persona>
    personas: tuple[Persona, ...]
    max_in_flight: int
    seed: int
    editable: str
    target: str
    top_tier: int
    max_message_bytes: int = 8 * 1024 * 1024
    groups: tuple[BrainGroup, ...] = ()  # empty: every researcher heuristic
    llm: LlmSetup | None = None  # needed when a group is an LLM brain
    cooldown_s: float = 30.0  # after a failed LLM attempt
    meta_interval_s: float = 0.0  # 0: no meta-agent
    meta_min_outcomes: int = 4
    meta_brain: str = ""  # empty: the first LLM group's
    screen: int = 1  # candidates a heuristic or LLM researcher draws per idea (1: no screening)
    fixed: frozenset[str] = frozenset()  # constants no brain moves (recipes/fixed.py)
    snapshot_path: Path | None = None  # where its folded state is kept between starts
    snapshot_interval_s: float = 60.0


@dataclass(slots=True)
class Team:
    history: History  # what the swarm learned, folded once for all the team's researchers
    researchers: list[Researcher]
    budget: LlmBudget
    book: StrategyBook | None
    clients: dict[str, LlmClient]
    meta: MetaAgent | None = None

    @property
    def thinkers(self) -> list[Researcher]:
        return [r for r in self.researchers if isinstance(r.brain, LlmBrain)]

    async def close(self) -> None:
        for client in self.clients.values():
            await client.close()


def make_team(options: HostOptions, history: History | None = None) -> Team:
    groups = options.groups or (BrainGroup("tpe", options.count),)
    setup = options.llm
    budget = LlmBudget(setup.max_usd, setup.max_usd_per_agent) if setup else LlmBudget()
    book = StrategyBook(setup.strategies, setup.strategies_seed) if setup else None
    clients: dict[str, LlmClient] = {}
    settings: dict[str, LlmSettings] = {}
    history = history if history is not None else History(options.editable, options.target)
    team = Team(history, [], budget, book, clients)
    searches: dict[str, ModelSearch] = {}  # one study per model brain kind, shared by its group

    def search(kind: str) -> ModelSearch:
        if kind not in searches:  # made once: setdefault built a study for every researcher
            searches[kind] = ModelSearch(Sampler(kind), options.seed)
        return searches[kind]

    proposed_by: dict[str, str] = {}  # which brain each portfolio idea came from, for them all
    screen = Screen(options.screen, options.seed) if options.screen > 1 else None
    i = 0
    for group in groups:
        for _ in range(group.count):
            persona = options.personas[i % len(options.personas)]
            modelled = group.brain in (*MODEL_BRAINS, "portfolio")
            brain: Brain
            name = researcher_name(options.name_prefix, i, group.brain, persona)
            if group.brain in MODEL_BRAINS:
                brain = ModelBrain(search(group.brain))
            elif group.brain == "heuristic":
                brain = OfflineBrain(HeuristicBrain(persona, options.seed + i))
            elif group.brain == "portfolio":  # TPE's study is the host's, as for tpe researchers
                arms: dict[str, Brain] = {
                    "tpe": ModelBrain(search("tpe")),
                    "heuristic": OfflineBrain(HeuristicBrain(persona, options.seed + i)),
                }
                brain = PortfolioBrain(arms, options.seed + i, proposed_by)
            else:
                brain = LlmBrain(persona, _settings(group.brain, options, team, settings))
            team.researchers.append(
                Researcher(
                    name,
                    brain,
                    options.editable,
                    options.target,
                    options.max_in_flight,
                    options.top_tier,
                    options.cooldown_s,
                    team.history,
                    None if modelled else screen,  # a model is its own screen
                    options.fixed,
                )
            )
            i += 1
    if settings and options.meta_interval_s > 0:
        provider = options.meta_brain or next(iter(settings))
        meta_settings = _settings(provider, options, team, settings)
        team.meta = MetaAgent(
            f"{options.name_prefix}-meta", meta_settings, options.meta_min_outcomes
        )
    return team


def researcher_name(prefix: str, i: int, brain: str, persona: Persona) -> str:
    if brain in MODEL_BRAINS:
        return f"{prefix}-{i}-{brain}"
    if brain == "heuristic":
        return f"{prefix}-{i}-{persona.value}"
    if brain == "portfolio":
        return f"{prefix}-{i}-portfolio-{persona.value}"
    return f"{prefix}-{i}-{brain}-{persona.value}"


def team_names(options: HostOptions) -> tuple[str, ...]:
    """The names make_team gives the host's researchers, in order."""
    groups = options.groups or (BrainGroup("tpe", options.count),)
    brains = [g.brain for g in groups for _ in range(g.count)]
    personas = options.personas
    return tuple(
        researcher_name(options.name_prefix, i, b, personas[i % len(personas)])
        for i, b in enumerate(brains)
    )


def _settings(
    provider: str, options: HostOptions, team: Team, made: dict[str, LlmSettings]
) -> LlmSettings:
    if provider not in made:
        setup = options.llm
        if setup is None or team.book is None:
            raise ValueError(f"brain {provider!r} needs LLM settings (HostOptions.llm)")
        client = team.clients[provider] = setup.client(provider)
        made[provider] = LlmSettings(
            client, setup.price(provider), team.budget, team.book, setup.program, setup.max_tokens
        )
    return made[provider]


async def run_host(nc: Client, options: HostOptions, stop: asyncio.Event) -> list[Researcher]:
    js = nc.jetstream()
    runtime = QuietRuntime()
    stream, last_seq = await snapshot_file.stream_created(js)
    restored = await _restore(js, options, stream, last_seq)
    team = make_team(options, restored.history if restored is not None else None)
    if restored is not None:
        host_snapshot.restore(restored, team.budget, team.book, team.researchers)
    snapshots = Snapshots(options.snapshot_path, options.snapshot_interval_s, stream)
    try:
        for i, researcher in enumerate(team.researchers):
            agent_type = f"researcher-{i}"
            await ResearcherAgent.register(runtime, agent_type, _factory(researcher))
            await runtime.add_subscription(TypeSubscription(TICKS, agent_type))
            await runtime.add_subscription(TypeSubscription(tick_topic(i), agent_type))
        history, researchers = team.history, team.researchers
        await HistoryAgent.register(runtime, "history", lambda: HistoryAgent(history, researchers))
        await runtime.add_subscription(TypeSubscription(FINDINGS, "history"))
        if team.book is not None:
            book = team.book
            await AccountsAgent.register(
                runtime, "accounts", lambda: AccountsAgent(team.budget, book)
            )
            await runtime.add_subscription(TypeSubscription(FINDINGS, "accounts"))
        if team.meta is not None:
            meta, thinkers = team.meta, team.thinkers
            await MetaHostAgent.register(runtime, "meta", lambda: MetaHostAgent(meta, thinkers))
            await runtime.add_subscription(TypeSubscription(META, "meta"))
        by_name = {r.name: r for r in team.researchers}

        def release(idea: Idea, why: str) -> None:
            if (author := by_name.get(idea.author)) is not None:
                author.release(idea.idea_id, why)

        await BusOutAgent.register(runtime, "bus-out", lambda: BusOutAgent(js, stop, release))
        await runtime.add_subscription(TypeSubscription(OUTBOX, "bus-out"))
        runtime.start()
        bridge = NatsBridge(nc, runtime, options.max_message_bytes)
        checkpoint = team.history.checkpoint
        await bridge.start(checkpoint[0] if restored is not None and checkpoint else 0)
        await _announce(nc, team, AgentEventKind.JOINED)
        try:
            await _caught_up(bridge, team.history, stop)
            log.info("%d researchers caught up with the swarm's history", len(team.researchers))
            await _tick(runtime, team, options, stop, snapshots)
        finally:
            await bridge.stop()
            try:  # let LLM calls in flight finish, so what they cost reaches the ledger
                await asyncio.wait_for(runtime.stop_when_idle(), FLUSH_S)
                if bridge.caught_up.is_set():  # idle: every batch it forwarded is folded
                    _snapshot(snapshots, team, now=True)
            except TimeoutError:
                log.warning("LLM calls still running after %.0fs; stopping without them", FLUSH_S)
                with contextlib.suppress(RuntimeError):  # it may have stopped meanwhile
                    await runtime.stop()
            await runtime.close()
            await _announce(nc, team, AgentEventKind.LEFT)
    finally:
        await team.close()
    return team.researchers


async def _restore(
    js: JetStreamContext, options: HostOptions, stream: str, last_seq: int
) -> HostState | None:
    """The host's state from its snapshot, if there is one it can use."""
    path = options.snapshot_path
    if path is None:
        return None
    try:
        state = host_snapshot.load(
            path, options.editable, options.target, team_names(options), stream, last_seq
        )
        seq, event = state.history.checkpoint or (0, "")
        checkpoint = snapshot_file.Checkpoint(seq, event, stream)
        if not await snapshot_file.checkpoint_stands(js, checkpoint, options.max_message_bytes):
            raise Stale(f"the stream no longer holds its event {seq}")
    except FileNotFoundError:
        return None
    except Stale as why:
        log.warning("agents snapshot %s not used, replaying the whole stream: %s", path, why)
        return None
    log.info("agents host state from its snapshot at event %d of %d", seq, last_seq)
    return state


def _snapshot(snapshots: Snapshots, team: Team, now: bool = False) -> None:
    snapshots.write_if_due(team.history, team.budget, team.book, team.researchers, now)


async def _tick(
    runtime: SingleThreadedAgentRuntime,
    team: Team,
    options: HostOptions,
    stop: asyncio.Event,
    snapshots: Snapshots,
) -> None:
    next_meta = time.monotonic() + options.meta_interval_s
    while not stop.is_set():
        _snapshot(snapshots, team)  # between two folds: each stands at a batch's end
        await runtime.publish_message(Tick(), TopicId(TICKS, SOURCE))
        if team.meta is not None and time.monotonic() >= next_meta:
            next_meta = time.monotonic() + options.meta_interval_s
            await runtime.publish_message(MetaTick(), TopicId(META, SOURCE))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), TICK_S)


def _factory(researcher: Researcher) -> Callable[[], ResearcherAgent]:
    return lambda: ResearcherAgent(researcher)


async def _caught_up(bridge: NatsBridge, history: History, stop: asyncio.Event) -> None:
    """Until the bridge has read the stream up to where it was at start and the history has
    folded all it forwarded (the runtime folds batches after the bridge sends them), or stop."""
    waiter = asyncio.ensure_future(bridge.caught_up.wait())
    stopper = asyncio.ensure_future(stop.wait())
    await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    stopper.cancel()
    target = bridge.last[0] if bridge.last is not None else 0
    while not stop.is_set() and (history.checkpoint or (0, ""))[0] < target:
        await asyncio.sleep(0.01)


async def _announce(nc: Client, team: Team, kind: AgentEventKind) -> None:
    js = nc.jetstream()
    events = [
        AgentEvent(
            new_id("ev"),
            r.name,
            kind,
            role="researcher",
            detail=(
                f"brain {r.brain.label}; persona {r.brain.persona or 'none'}; proposed {r.proposed}"
            ),
        )
        for r in team.researchers
    ]
    if team.meta is not None:
        label = f"{team.meta.settings.client.provider} {team.meta.settings.client.model}"
        events.append(AgentEvent(new_id("ev"), team.meta.name, kind, role="meta", detail=label))
    # Together: one at a time, a host orphaned with the bus down spent 5 s per researcher here.
    outcomes = await asyncio.gather(
        *(publish_event(js, event) for event in events), return_exceptions=True
    )
    for event, outcome in zip(events, outcomes, strict=True):
        if isinstance(outcome, Exception):
            log.warning("could not announce %s for %s: %s", kind.value, event.agent, outcome)
