"""The bus's floor: what the swarm's messages cost per run with no work done on them.

Measures, on a real embedded nats-server with the swarm's own streams and consumers, the CPU
(client process and nats-server, separately) of each messaging step a run goes through:

- publish: an event published to the event stream, acks awaited in windows (as the ladder does);
- replay: an event delivered to an ordered consumer and decoded (the ladder and every agents
  host read the whole stream this way);
- ledger: an event delivered to the ledger's durable push consumer, decoded and acked;
- job: a RunSpec put on a tier's work queue, then fetched in batches of 32 and acked (as an
  instant-target trainer does).

Then multiplies by how many of each one decided run needs, counted from a capacity run's
ledger (`--ledger`, from `python bench/capacity.py --keep DIR`) or the defaults below. The
result is the most runs per second these messages allow on this machine, before any
ladder, ledger, trainer or researcher logic runs.

    python bench/bus_floor.py --messages 20000 [--ledger /tmp/cap/ws/ledger.duckdb]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from bus.codec import decode, encode
from bus.embedded_server import EmbeddedNatsServer
from bus.messages import RunResult, RunStatus, new_id
from bus.nats_bus import BusSettings, connect, enqueue_job, publish_event
from bus.replay import replay_events
from bus.subjects import (
    JOBS_STREAM,
    LEDGER_DELIVER_SUBJECT,
    ensure_ledger_consumer,
    ensure_streams,
    ensure_trainer_consumer,
    trainer_consumer_name,
)
from scale_ladder.tiers import load_tiers
from swarm.event_loop import run

ROOT = Path(__file__).resolve().parents[1]
WINDOW = 100  # publishes in flight at once
BATCH = 32  # jobs per fetch
# Per decided run, from a 40 s capacity run (100 agents, synthetic target, 2026-11-23): events
# of every kind on the stream, and the ordered consumers reading all of them (ladder + agents).
EVENTS_PER_RUN = 4.7
REPLAYERS = 2


@dataclass
class Cost:
    client_us: float
    server_us: float


def server_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measure(server_pid: int, count: int, step: Callable[[], Awaitable[None]]) -> Cost:
    client, server = time.process_time(), server_cpu_s(server_pid)
    await step()
    client_s, server_s = time.process_time() - client, server_cpu_s(server_pid) - server
    return Cost(client_s / count * 1e6, server_s / count * 1e6)


def sample_result() -> RunResult:
    """A typical RunResult (the largest frequent event): about 600 bytes encoded."""
    return RunResult(
        run_id=new_id("run"),
        tier=0,
        seed=1,
        champion_version=3,
        status=RunStatus.OK,
        idea_id=new_id("idea"),
        trainer="trainer-host-0123abcd",
        metric=1.2345,
        metric_name="loss",
        train_seconds=0.001,
        device="cpu",
    )


async def publish_all(js: JetStreamContext, count: int) -> None:
    for start in range(0, count, WINDOW):
        batch = [sample_result() for _ in range(min(WINDOW, count - start))]
        await asyncio.gather(*(publish_event(js, message) for message in batch))


async def replay_all(js: JetStreamContext, count: int) -> None:
    seen = asyncio.Event()
    got = 0

    async def handle(message: object, seq: int) -> None:
        nonlocal got
        got += 1
        if got >= count:
            seen.set()

    replay = await replay_events(js, frozenset({"run_result"}), 1 << 20, handle)
    await seen.wait()
    await replay.subscription.unsubscribe()


async def ledger_all(nc: Client, js: JetStreamContext, count: int) -> None:
    """As the ledger reads: its push consumer's deliver subject, each event decoded and acked."""
    await ensure_ledger_consumer(js)
    seen = asyncio.Event()
    got = 0

    async def handle(msg: Msg) -> None:
        nonlocal got
        decode(msg.data, 1 << 20)
        await msg.ack()
        got += 1
        if got >= count:
            seen.set()

    sub = await nc.subscribe(
        LEDGER_DELIVER_SUBJECT, cb=handle, pending_msgs_limit=-1, pending_bytes_limit=-1
    )
    await seen.wait()
    await sub.unsubscribe()


async def enqueue_all(js: JetStreamContext, count: int) -> None:
    tier = load_tiers(ROOT / "configs/ladder.toml")[0]
    for start in range(0, count, WINDOW):
        specs = [tier.run_spec(new_id("run"), 1) for _ in range(min(WINDOW, count - start))]
        await asyncio.gather(*(enqueue_job(js, spec) for spec in specs))


async def take_all(js: JetStreamContext, count: int) -> None:
    await ensure_trainer_consumer(js, 0)
    sub = await js.pull_subscribe_bind(trainer_consumer_name(0), stream=JOBS_STREAM)
    taken = 0
    while taken < count:
        for msg in await sub.fetch(BATCH, timeout=1.0):
            decode(msg.data, 1 << 20)
            await msg.ack()
            taken += 1
    await sub.unsubscribe()


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="bus-floor-") as tmp:
        server = EmbeddedNatsServer(Path(tmp) / "run", Path(tmp) / "js", 8 << 20)
        url = server.start()
        try:
            nc = await connect(BusSettings(url, token=server.token), "bus-floor")
            js = nc.jetstream()
            await ensure_streams(js, 8 << 20)
            pid, n = server.pid or 0, args.messages
            costs = {
                "publish (event stream, acked)": await measure(pid, n, lambda: publish_all(js, n)),
                "replay (ordered consumer, decoded)": await measure(
                    pid, n, lambda: replay_all(js, n)
                ),
                "ledger (push consumer, decoded, acked)": await measure(
                    pid, n, lambda: ledger_all(nc, js, n)
                ),
                "job put (work queue, acked)": await measure(pid, n, lambda: enqueue_all(js, n)),
                "job take (fetch 32, decoded, acked)": await measure(
                    pid, n, lambda: take_all(js, n)
                ),
            }
            await nc.close()
        finally:
            server.stop()
    report(costs, args, len(encode(sample_result())))


def events_per_run(ledger: Path | None) -> float:
    """Events per decided run, from a capacity run's ledger if given (each run is one job)."""
    if ledger is None:
        return EVENTS_PER_RUN
    import duckdb

    con = duckdb.connect(str(ledger), read_only=True)
    try:
        tables = [
            "ideas", "traces", "run_specs", "runs", "decisions", "champions", "agent_events",
            "llm_calls", "dead_letters",
        ]  # fmt: skip
        events = sum(con.execute(f"select count(*) from {t}").fetchone()[0] for t in tables)  # type: ignore[index]
        runs = con.execute("select count(*) from runs").fetchone()[0]  # type: ignore[index]
    finally:
        con.close()
    return float(events / runs)


def report(costs: dict[str, Cost], args: argparse.Namespace, size: int) -> None:
    print(f"bus floor: {args.messages} messages of {size} bytes per step, {os.cpu_count()} cores")
    print(f"  {'step':40s} {'client µs':>10s} {'server µs':>10s}")
    for name, cost in costs.items():
        print(f"  {name:40s} {cost.client_us:10.1f} {cost.server_us:10.1f}")
    events = events_per_run(args.ledger)
    c = list(costs.values())
    per_event = c[0].client_us + c[0].server_us + c[2].client_us + c[2].server_us
    per_event += REPLAYERS * (c[1].client_us + c[1].server_us)
    per_job = sum(x.client_us + x.server_us for x in c[3:])
    per_run = events * per_event + per_job
    cores = os.cpu_count() or 1
    print(
        f"  per run: {events:.2f} events x {per_event:.0f} µs (publish, ledger, {REPLAYERS} "
        f"replays) + 1 job x {per_job:.0f} µs = {per_run / 1e3:.2f} ms of CPU"
    )
    print(f"  floor: at most {cores * 1e6 / per_run:,.0f} runs/s on {cores} cores, with no logic")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--ledger", type=Path, help="a capacity run's ledger, for the counts")
    run(main(parser.parse_args()))
