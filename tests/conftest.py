"""Fixtures against real parts: a real nats-server per test (it starts in ~30 ms), DuckDB on
temp files, the real `swarm` CLI in subprocesses. The session ends by checking that no
nats-server or swarm process the tests started is left running."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from nats.aio.client import Client

from bus.embedded_server import EmbeddedNatsServer
from bus.messages import Idea, RunResult, RunStatus, new_id
from bus.nats_bus import BusSettings, connect
from bus.roles import Role
from bus.subjects import ensure_streams
from ledger.service import LedgerOptions, LedgerService
from swarm.workspace import Workspace

MAX_PAYLOAD = 8 * 1024 * 1024


def _our_processes(marker: str) -> set[int]:
    """Pids whose command line mentions `marker` (e.g. pytest's temp root)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # Any process on the machine may carry bytes that are not UTF-8 in its arguments.
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline and int(entry.name) != os.getpid():
            found.add(int(entry.name))
    return found


@pytest.fixture(scope="session", autouse=True)
def no_process_left_behind(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    root = str(tmp_path_factory.getbasetemp())
    yield
    deadline = time.monotonic() + 10
    while (left := _our_processes(root)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"processes left running after the tests: {sorted(left)}"


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[EmbeddedNatsServer]:
    server = EmbeddedNatsServer(tmp_path / "run", tmp_path / "jetstream", MAX_PAYLOAD)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def bus_settings(nats_server: EmbeddedNatsServer) -> BusSettings:
    return BusSettings(nats_server.url, token=nats_server.token)


@pytest.fixture
async def nc(bus_settings: BusSettings) -> AsyncIterator[Client]:
    client = await connect(bus_settings, "test")
    await ensure_streams(client.jetstream(), MAX_PAYLOAD)
    yield client
    await client.close()


def make_result(i: int = 0, **fields: object) -> RunResult:
    values: dict[str, object] = {
        "run_id": f"run-{i:07d}",
        "tier": i % 3,
        "seed": i % 5,
        "champion_version": 1,
        "status": RunStatus.OK,
        "idea_id": f"idea-{i % 100:03d}",
        "metric": 1.0 + (i % 997) / 1000,
        "steps": 100,
        "tokens": 6400,
        "train_seconds": 1.5,
    }
    values.update(fields)
    return RunResult(**values)  # type: ignore[arg-type]


def make_idea(i: int = 0) -> Idea:
    return Idea(
        idea_id=f"idea-{i:03d}",
        author=f"agent-{i % 4}",
        hypothesis=f"hypothesis {i}",
        patch="--- a/recipe.py\n+++ b/recipe.py\n@@ -1 +1 @@\n-LR = 1e-3\n+LR = 2e-3\n",
        champion_version=1,
        trace_id=new_id("trace"),
    )


def swarm_cmd(workspace: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "swarm", "--workspace", str(workspace), *args]


def run_swarm(workspace: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        swarm_cmd(workspace, *args), capture_output=True, text=True, timeout=timeout
    )


def wait_for(predicate: object, timeout: float = 30, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")


async def wait_for_async(predicate: object, timeout: float = 30, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await predicate():  # type: ignore[operator]
            return
        await asyncio.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")


class RunningSwarm:
    """`swarm start` in a subprocess on a temp workspace, stopped by SIGTERM at the end."""

    def __init__(self, workspace: Path, config: Path | None = None) -> None:
        self.workspace = Workspace(workspace)
        args = ["--config", str(config)] if config else []
        self.process = subprocess.Popen(
            [*swarm_cmd(workspace, *args), "start"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def wait_ready(self, timeout: float = 30, role: Role = Role.CLI) -> BusSettings:
        """Once the swarm answers; then how `role` reaches its bus (a test publishing results
        connects as a trainer: the embedded server refuses them from anyone else)."""

        def ready() -> bool:
            assert self.process.poll() is None, self.process.stdout.read()  # type: ignore[union-attr]
            if self.workspace.read_bus_settings() is None or not self.workspace.is_running():
                return False  # (a stopped workspace's file would answer `swarm sql` too)
            status = run_swarm(self.workspace.root, "status").stdout
            return "swarm: running" in status and "ledger:" not in status

        wait_for(ready, timeout, 0.2)
        settings = self.workspace.read_bus_settings(role)
        assert settings is not None
        return settings

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> str:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        output, _ = self.process.communicate(timeout=timeout)
        return output


@pytest.fixture
def swarm_config(tmp_path: Path) -> Path:
    """A config with fast status and snapshots, so tests see them quickly."""
    path = tmp_path / "swarm.toml"
    path.write_text(
        "[ledger]\nsnapshot_interval_s = 0.5\nrestart_delay_s = 0.2\n[status]\ninterval_s = 0.5\n"
        "[trainers]\ncount = 0\n[agents]\ncount = 0\n"
    )
    return path


@pytest.fixture
def running_swarm(tmp_path: Path, swarm_config: Path) -> Iterator[RunningSwarm]:
    swarm = RunningSwarm(tmp_path / "ws", swarm_config)
    swarm.wait_ready()
    yield swarm
    swarm.stop()


@pytest.fixture(scope="session")
def corpus_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("corpus")


@pytest.fixture(scope="session")
def corpus(corpus_dir: Path) -> object:
    from training.corpus import load_corpus

    return load_corpus(corpus_dir)


@pytest.fixture(scope="session")
def baseline(corpus: object, tmp_path_factory: pytest.TempPathFactory) -> float:
    """The champion's val_bpb at seed 7 through the real trainer (tests/training_helpers.run):
    what a cheat must not beat, and what a harmless change must give again."""
    from bus.messages import RunStatus
    from tests.training_helpers import run

    result = run(corpus, tmp_path_factory.mktemp("scratch"), seed=7)  # type: ignore[arg-type]
    assert result.status == RunStatus.OK, result.reason + result.log_tail
    assert result.metric is not None
    return result.metric


@pytest.fixture
async def ledger(nc: Client, tmp_path: Path) -> AsyncIterator[LedgerService]:
    """The ledger service in this process, on the test's nats-server, ready to answer."""
    options = LedgerOptions(
        db_path=tmp_path / "ledger.duckdb",
        snapshot_dir=tmp_path / "snapshots",
        batch_size=100,
        snapshot_interval_s=0.3,
        sql_row_cap=500,
        sql_timeout_s=2,
        max_message_bytes=64 * 1024,
    )
    # The streams' message limit is the ledger's, as `swarm start` sets it up (the ledger's own
    # NATS user may not change streams).
    await ensure_streams(nc.jetstream(), options.max_message_bytes)
    service = LedgerService(nc, options)
    stop = asyncio.Event()
    task = asyncio.create_task(service.run(stop))
    await asyncio.wait_for(service.ready.wait(), 10)
    yield service
    stop.set()
    await asyncio.wait_for(task, 10)
