"""Ledger benchmark: publish N RunResults through the bus to a real `swarm start`, then time
leaderboard queries the way `swarm sql` runs them.

    python bench/ledger_bench.py                   # 1M results (a few minutes on 2 cores)
    python bench/ledger_bench.py --events 100000   # the short form `make bench` runs

Prints: publish rate, ingest rate (first publish → last row committed), drain rate (ledger
alone, catching up on a backlog), and leaderboard query latency p50/p99 through the bus and
through the `swarm sql` command. Targets (issue 2): ingest >= 10k results/s, query p50 <= 50 ms.
Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bus.messages import RunResult, RunStatus  # noqa: E402
from bus.nats_bus import BusSettings, connect, publish_event  # noqa: E402
from bus.roles import Role  # noqa: E402
from swarm.sql_client import LedgerUnavailable, ask_ledger  # noqa: E402
from swarm.workspace import Workspace  # noqa: E402

LEADERBOARD = "select * from leaderboard order by tier desc, mean_metric limit 20"
COUNT = "select count(*) as n from runs"


def result(i: int) -> RunResult:
    return RunResult(
        run_id=f"bench-{i:08d}",
        tier=i % 3,
        seed=i % 5,
        champion_version=1 + i // 200_000,
        status=RunStatus.OK if i % 50 else RunStatus.CRASH,
        idea_id=f"idea-{i % 5000:05d}",
        metric=1.2 + (i * 7919 % 1000) / 2000 if i % 50 else None,
        steps=400,
        tokens=400 * 16 * 64,
        train_seconds=15.0,
        flops=1.2e12,
        device="cpu",
        trainer="bench",
    )


async def count_rows(settings: BusSettings) -> int:
    nc = await connect(settings, "bench-count")
    try:
        answer = await ask_ledger(nc, COUNT, 30)
        return int(answer.table.column("n")[0].as_py())
    except LedgerUnavailable:
        return -1
    finally:
        await nc.close()


async def publish(settings: BusSettings, n: int, window: int) -> float:
    nc = await connect(settings, "bench-publisher")
    js = nc.jetstream()
    start = time.perf_counter()
    for first in range(0, n, window):
        batch = [result(i) for i in range(first, min(n, first + window))]
        await asyncio.gather(*(publish_event(js, m, timeout=60) for m in batch))
    elapsed = time.perf_counter() - start
    await nc.close()
    return elapsed


async def wait_for_rows(settings: BusSettings, n: int) -> float:
    while (rows := await count_rows(settings)) < n:
        print(f"  ledger rows: {rows:,}", end="\r", file=sys.stderr, flush=True)
        await asyncio.sleep(0.5)
    return time.perf_counter()


async def query_latencies(settings: BusSettings, repeats: int) -> list[float]:
    nc = await connect(settings, "bench-sql")
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        await ask_ledger(nc, LEADERBOARD, 30)
        times.append(time.perf_counter() - start)
    await nc.close()
    return times


def cli_latencies(workspace: Path, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "swarm", "--workspace", str(workspace), "sql", LEADERBOARD],
            check=True,
            capture_output=True,
        )
        times.append(time.perf_counter() - start)
    return times


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--window", type=int, default=1000, help="publishes in flight")
    parser.add_argument("--queries", type=int, default=50)
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="ledger-bench-")) / "ws"
    config = root.parent / "bench.toml"
    config.write_text(
        "[status]\ninterval_s = 3600\n[ledger]\nsnapshot_interval_s = 3600\n[trainers]\ncount = 0\n"
    )
    swarm = subprocess.Popen(
        [sys.executable, "-m", "swarm", "--workspace", str(root), "--config", str(config), "start"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        workspace = Workspace(root)
        while (settings := workspace.read_bus_settings()) is None or await count_rows(settings) < 0:
            await asyncio.sleep(0.2)
        print(f"ledger bench: {args.events:,} RunResults, workspace {root}")
        # Results come from the trainer role: the embedded server refuses them from the CLI's.
        trainer = workspace.read_bus_settings(Role.TRAINER)
        assert trainer is not None

        start = time.perf_counter()
        publish_s = await publish(trainer, args.events, args.window)
        done = await wait_for_rows(settings, args.events)
        ingest_s = done - start
        print(f"publish rate      {args.events / publish_s:10,.0f} results/s ({publish_s:.1f} s)")
        print(
            f"ingest rate       {args.events / ingest_s:10,.0f} results/s "
            "(first publish -> last row committed, publisher running alongside)"
        )

        # Drain: pause the ledger (SIGSTOP), publish a backlog, resume it and time how fast it
        # catches up alone. The backlog stays small enough to publish within the consumer's
        # ack_wait, so paused deliveries are not redelivered mid-measurement.
        (ledger_pid,) = [
            int(p.name)
            for p in Path("/proc").iterdir()
            if p.name.isdigit() and _cmd(p).endswith(" ledger") and str(root) in _cmd(p)
        ]
        backlog = min(args.events, 40_000)
        base = args.events
        signal_ledger(ledger_pid, signal.SIGSTOP)
        nc = await connect(trainer, "bench-backlog")
        js = nc.jetstream()
        for first in range(base, base + backlog, args.window):
            msgs = [result(i) for i in range(first, min(base + backlog, first + args.window))]
            await asyncio.gather(*(publish_event(js, m, timeout=60) for m in msgs))
        await nc.close()
        signal_ledger(ledger_pid, signal.SIGCONT)
        start = time.perf_counter()
        done = await wait_for_rows(settings, base + backlog)
        print(
            f"drain rate        {backlog / (done - start):10,.0f} results/s "
            f"(ledger alone catching up on {backlog:,})"
        )

        bus_times = await query_latencies(settings, args.queries)
        print(
            f"leaderboard query p50 {pct(bus_times, 0.5):6.1f} ms  "
            f"p99 {pct(bus_times, 0.99):6.1f} ms"
            f"  (through the bus, as `swarm sql` asks; {base + backlog:,} rows)"
        )
        cli_times = cli_latencies(root, 10)
        print(
            f"`swarm sql` command p50 {pct(cli_times, 0.5):6.1f} ms "
            "(whole process: Python start-up, imports, connect, query, print)"
        )
    finally:
        swarm.send_signal(signal.SIGTERM)
        swarm.wait(60)


def _cmd(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def signal_ledger(pid: int, sig: int) -> None:
    os.kill(pid, sig)


if __name__ == "__main__":
    import uvloop

    uvloop.run(main())
