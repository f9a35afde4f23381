"""Start-up of the ladder and of an agents host: time from start to "caught up" with N events in
the stream, by a full replay and from a snapshot of their state (bus/snapshot_file.py).

    python -m bench.startup --events 10000,100000
    python -m bench.startup --events 1000000     # minutes: making and publishing the history

For each N: makes a history of N events with the real Ladder in this process (ideas on a small
recipe, each run on a seed-paired simulated metric until decided, winners stacked, and for every
idea a Trace and an AgentEvent: kinds the ladder does not fold, as in a swarm), publishes it to
a real embedded nats-server, then times the real LadderService, and the real agents host (four
heuristic researchers, the ideas' author among them), from start to caught up:
1. without a snapshot: the whole stream (before snapshots, every start);
2. from the snapshot the first start wrote when it stopped, with 1% more events published
   after it (what a restart after a crash or an upgrade reads).
Prints wall seconds and this process's CPU seconds for each, and the snapshot's size. The host's
researchers are stopped as soon as it has caught up: the bench times the start, not research.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from pathlib import Path

import agents.host as host
from agents.brain import Persona
from agents.brain_groups import BrainGroup
from agents.bridge import NatsBridge
from agents.history import History
from agents.host import HostOptions, run_host
from bus.champion_store import champion_bucket
from bus.embedded_server import EmbeddedNatsServer
from bus.messages import AgentEvent, AgentEventKind, Idea, Message, RunResult, RunSpec, RunStatus
from bus.messages import Trace as TraceEvent
from bus.nats_bus import BusSettings, connect, publish_event
from bus.subjects import ensure_streams
from recipes.patch import make_patch
from scale_ladder.admission import patched_source
from scale_ladder.ladder import Ladder
from scale_ladder.service import LadderOptions, LadderService
from scale_ladder.tiers import load_tiers

# Twenty constants, each best at its own value: ideas move two at a time, so they rarely
# repeat one another (the ladder refuses near-duplicates) and winners keep being found.
NAMES = [f"C{k:02d}" for k in range(20)]
BEST = {name: 1.0 + 0.1 * k for k, name in enumerate(NAMES)}
RECIPE = "".join(f"{name} = 0.5\n" for name in NAMES)
LADDER = """
[[tier]]
name = "t0"
depth = 1
width = 32
context = 16
budget_kind = "tokens"
budget = 1000
time_limit_s = 10
eval_tokens = 64
seeds = 2
max_seeds = 4
min_improvement = 0.002
top_fraction = 0.5

[[tier]]
name = "t1"
depth = 2
width = 64
context = 16
budget_kind = "tokens"
budget = 3000
time_limit_s = 10
eval_tokens = 64
seeds = 2
max_seeds = 4
min_improvement = 0.002
"""
MAX_PAYLOAD = 8 * 1024 * 1024
AUTHOR = "bench-0-explorer"  # the agents host's first researcher


def make_ladder(folder: Path) -> Ladder:
    (folder / "ladder.toml").write_text(LADDER)
    return Ladder(load_tiers(folder / "ladder.toml"), "recipe.py", RECIPE)


def metric(source: str, seed: int, tier: int) -> float:
    values = dict(line.split(" = ") for line in source.splitlines() if " = " in line)
    loss = sum(0.05 * (float(values[name]) - BEST[name]) ** 2 for name in NAMES)
    shared = random.Random(f"{seed}/{tier}").gauss(0, 0.02)  # the seed: idea and baseline alike
    noise = shared + random.Random(f"{source}/{seed}/{tier}").gauss(0, 0.002)
    return 2.0 + loss + noise


def history(n: int, folder: Path) -> list[Message]:
    """About `n` events of a swarm's life, made by the real ladder."""
    ladder, rng = make_ladder(folder), random.Random(0)
    log: list[Message] = []
    queue: list[RunSpec] = []

    def feed(message: Message) -> None:
        log.append(message)
        ladder.observe(message)
        for out in ladder.act():
            log.append(out)
            if isinstance(out, RunSpec):
                queue.append(out)

    for out in ladder.act():
        log.append(out)
        queue += [out] if isinstance(out, RunSpec) else []
    i = 0
    while len(log) < n:
        source = ladder.champions[ladder.current].source
        moves = {name: round(rng.uniform(0.0, 4.0), 3) for name in rng.sample(NAMES, 2)}
        new = "".join(
            f"{name} = {moves.get(name, value)}\n"
            for name, value in (line.split(" = ") for line in source.splitlines())
        )
        idea_id = f"idea-{i:07d}"
        patch = make_patch(source, new, "recipe.py")
        log.append(TraceEvent(f"trace-{i:07d}", AUTHOR, "proposed", idea_id=idea_id))
        log.append(AgentEvent(f"beat-{i:07d}", AUTHOR, AgentEventKind.HEARTBEAT))
        feed(Idea(idea_id, AUTHOR, f"try {moves}", patch, ladder.current))
        while queue:
            spec = queue.pop(0)
            base = ladder.champions[spec.champion_version].source
            run = patched_source(base, spec.patch, "recipe.py") if spec.patch else base
            value_of = metric(run, spec.seed, spec.tier)
            feed(
                RunResult(
                    spec.run_id, spec.tier, spec.seed, spec.champion_version, RunStatus.OK,
                    idea_id=spec.idea_id, metric=value_of,
                )
            )  # fmt: skip
        i += 1
    return log[:n]


async def publish(settings: BusSettings, events: list[Message]) -> None:
    nc = await connect(settings, "bench")
    js = nc.jetstream()
    await ensure_streams(js, MAX_PAYLOAD)
    await champion_bucket(js)
    for start in range(0, len(events), 500):
        await asyncio.gather(*(publish_event(js, m) for m in events[start : start + 500]))
    await nc.close()


async def start_once(settings: BusSettings, folder: Path, snapshot: Path) -> tuple[float, float]:
    """Wall and CPU seconds from start to caught up; then stops (writing its snapshot)."""
    nc = await connect(settings, "ladder")
    wall, cpu = time.perf_counter(), time.process_time()
    running = LadderService(nc, make_ladder(folder), LadderOptions(snapshot_path=snapshot))
    stop = asyncio.Event()
    task = asyncio.ensure_future(running.run(stop))
    await running.caught_up.wait()
    took = time.perf_counter() - wall, time.process_time() - cpu
    stop.set()
    await task
    await nc.close()
    return took


async def host_once(settings: BusSettings, snapshot: Path) -> tuple[float, float]:
    """Wall and CPU seconds from start to caught up (the stream read and every event it
    forwarded folded); then stops (writing its snapshot)."""
    options = HostOptions(
        count=4, name_prefix="bench", personas=tuple(Persona), max_in_flight=2, seed=0,
        editable="recipe.py", target="bytelm", top_tier=1,
        groups=(BrainGroup("heuristic", 4),), snapshot_path=snapshot,
    )  # fmt: skip
    nc = await connect(settings, "agents")
    took: list[float] = []
    caught_up = host._caught_up

    async def timed(bridge: NatsBridge, history: History, stop: asyncio.Event) -> None:
        await caught_up(bridge, history, stop)
        took.extend((time.perf_counter() - wall, time.process_time() - cpu))
        stop.set()  # caught up: the bench is over before any researcher proposes

    host._caught_up = timed  # type: ignore[assignment]
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        await run_host(nc, options, asyncio.Event())
    finally:
        host._caught_up = caught_up
        await nc.close()
    return took[0], took[1]


async def measure(n: int) -> None:
    with tempfile.TemporaryDirectory(prefix="startup-") as tmp:
        folder = Path(tmp)
        t = time.perf_counter()
        events = history(n + n // 100, folder)
        made = time.perf_counter() - t
        server = EmbeddedNatsServer(folder / "run", folder / "jetstream", MAX_PAYLOAD)
        server.start()
        try:
            settings = BusSettings(server.url, token=server.token)
            t = time.perf_counter()
            await publish(settings, events[:n])
            published = time.perf_counter() - t
            snapshot, agents = folder / "ladder.snapshot", folder / "agents.snapshot"
            full = await start_once(settings, folder, snapshot)  # writes the snapshot at stop
            host_full = await host_once(settings, agents)
            size, host_size = snapshot.stat().st_size, agents.stat().st_size
            await publish(settings, events[n:])  # the tail after the snapshot
            tail = await start_once(settings, folder, snapshot)
            host_tail = await host_once(settings, agents)
        finally:
            server.stop()
    after = f"{n:>9,} events (+{len(events) - n:,} after the snapshot)"
    print(f"{after}: made in {made:.0f} s, published in {published:.0f} s", flush=True)
    for who, (a, b, mb) in {
        "ladder": (full, tail, size / 1e6),
        "agents host": (host_full, host_tail, host_size / 1e6),
    }.items():
        print(
            f"  {who:<11} full replay {a[0]:7.2f} s wall, {a[1]:7.2f} s CPU | from the snapshot "
            f"{b[0]:6.2f} s wall, {b[1]:6.2f} s CPU | snapshot {mb:6.1f} MB",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", default="10000,100000")
    args = parser.parse_args()
    for n in (int(x) for x in args.events.split(",")):
        asyncio.run(measure(n))


if __name__ == "__main__":
    main()
