"""kill -9 of the ledger process mid-ingest, restarted by `swarm start`: every published event is
in the ledger exactly once."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from pathlib import Path

from bus.nats_bus import connect
from bus.roles import Role
from swarm.sql_client import LedgerUnavailable, ask_ledger
from swarm.workspace import Workspace
from tests.conftest import RunningSwarm, make_result, run_swarm, wait_for
from tests.helpers_process import alive, pids_matching, publish_all

EVENTS = 20_000
KILLS = 3


def ledger_count(workspace: Path) -> int | None:
    """Ask the running ledger over the bus (None between a kill and the restart)."""
    settings = Workspace(workspace).read_bus_settings()
    assert settings is not None

    async def ask() -> int | None:
        nc = await connect(settings, "test-count")
        try:
            answer = await ask_ledger(nc, "select count(*) as n from runs", 2)
        except LedgerUnavailable:
            return None
        finally:
            await nc.close()
        return int(answer.table.column("n")[0].as_py())

    return asyncio.run(ask())


def test_kill9_ledger_mid_ingest_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    config = tmp_path / "swarm.toml"
    # Small batches so ingest is slow enough to be killed in the middle of it.
    config.write_text("[ledger]\nbatch_size = 100\nrestart_delay_s = 0.2\n[trainers]\ncount = 0\n")
    swarm = RunningSwarm(tmp_path / "ws", config)
    try:
        settings = swarm.wait_ready(role=Role.TRAINER)
        messages = [make_result(i) for i in range(EVENTS)]
        publisher = threading.Thread(target=asyncio.run, args=(publish_all(settings, messages),))
        publisher.start()
        killed_at = []
        for _ in range(KILLS):
            seen = (killed_at[-1] if killed_at else 0) + 1000
            wait_for(lambda s=seen: (ledger_count(swarm.workspace.root) or 0) >= s, 60, 0.05)
            (pid,) = pids_matching(str(swarm.workspace.root), last_arg="ledger")
            killed_at.append(ledger_count(swarm.workspace.root) or 0)
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda p=pid: not alive(p), 10)
        publisher.join(120)
        assert not publisher.is_alive()
        assert all(0 < n < EVENTS for n in killed_at), f"kills were not mid-ingest: {killed_at}"
        wait_for(lambda: ledger_count(swarm.workspace.root) == EVENTS, 90, 0.2)
        done = run_swarm(
            swarm.workspace.root,
            "sql",
            "select count(*) as n, count(distinct run_id) as d, "
            "(select count(*) from dead_letters) as dl from runs",
            "--format",
            "csv",
        )
        assert done.stdout.splitlines()[1] == f"{EVENTS},{EVENTS},0"
    finally:
        output = swarm.stop()
    assert "ledger exited" in output and "restarting" in output
