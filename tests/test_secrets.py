"""Secrets never reach the ledger, the logs or an experiment: a short swarm runs with a fake
Anthropic key, a NATS token in the environment and its generated role passwords, on a project
whose experiment prints its whole environment (so that environment lands in the run logs and
the ledger's log tails). Then every table of the ledger and every file of the workspace is
searched for each secret; only the files made to hold them may."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from tests.conftest import RunningSwarm, run_swarm, wait_for
from tests.test_swarm_e2e import swarm_project

RUN = """\
import os
for name, value in sorted(os.environ.items()):
    print(f"ENV {name}={value}")
from params import LEARNING_RATE
print(f"val_loss: {1.0 + abs(LEARNING_RATE - 0.1):.6f}")
"""

FAKE = {
    "ANTHROPIC_API_KEY": "sk-ant-api03-FAKE-never-anywhere-0c1d2e3f4a5b",
    "OPENAI_API_KEY": "sk-FAKE-openai-never-anywhere-9a8b7c",
    "SWARM_NATS_TOKEN": "FAKE-nats-token-never-anywhere-5e6f",
}
# Files made to hold secrets (mode 0600): the roles' passwords and the server's own config.
HOLDERS = ("run/creds/", "run/nats-server.conf")


def ledger_text(path: Path) -> str:
    """Every row of every table, as text."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        tables = [
            row[0] for row in con.execute("select table_name from duckdb_tables()").fetchall()
        ]
        return "\n".join(repr(con.execute(f'select * from "{t}"').fetchall()) for t in tables)
    finally:
        con.close()


@pytest.mark.timeout(120)
def test_secrets_reach_no_ledger_log_or_experiment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = swarm_project(tmp_path, agents=1)
    (tmp_path / "project" / "run.py").write_text(RUN)
    for name, value in FAKE.items():
        monkeypatch.setenv(name, value)  # RunningSwarm's process and its children inherit them
    ws = tmp_path / "ws"
    swarm = RunningSwarm(ws, config)
    try:
        swarm.wait_ready()
        passwords = [
            json.loads(f.read_text())["password"] for f in (ws / "run" / "creds").glob("*.json")
        ]
        assert len(passwords) == 6

        def runs() -> int:
            query = "select count(*) from runs where status = 'OK'"
            done = run_swarm(ws, "sql", query, "--format", "csv")
            return int(done.stdout.splitlines()[1]) if done.returncode == 0 else 0

        wait_for(lambda: runs() >= 4, 60, 0.5)
    finally:
        output = swarm.stop()
    assert "experiments run:" in output
    secrets = [*FAKE.values(), *passwords]

    ledger = ledger_text(ws / "ledger.duckdb")
    assert "ENV PATH=" in ledger  # the experiments' environment is in the ledger's log tails...
    assert "ENV SWARM_SEED=" in ledger
    for secret in secrets:
        assert secret not in ledger
    for name in FAKE:
        assert f"ENV {name}=" not in ledger  # ...and none of the secrets' variables is in it

    searched = 0
    for path in sorted(p for p in ws.rglob("*") if p.is_file()):
        relative = path.relative_to(ws).as_posix()
        if relative.startswith(HOLDERS):
            assert oct(path.stat().st_mode & 0o777) == "0o600", relative
            continue
        data = path.read_bytes()
        searched += 1
        for secret in secrets:
            assert secret.encode() not in data, f"a secret is in {relative}"
    assert searched > 20  # process logs, the server's log, the JetStream store, snapshots, reports
    for secret in secrets:
        assert secret not in output
