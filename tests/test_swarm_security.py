"""Security of a whole swarm, through real processes: every process connects as its own role
and nothing is refused; a trainer on another "host" joins the embedded server where
`bus.listen` says, with the trainer role's password; the listener can require mutual TLS."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from bus.nats_bus import BusSettings, BusUnavailable, connect
from bus.roles import Role
from tests.conftest import RunningSwarm, run_swarm, swarm_cmd, wait_for
from tests.test_bus_tls import make_certificates


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def sql_value(workspace: Path, query: str) -> str:
    done = run_swarm(workspace, "sql", query, "--format", "csv")
    return done.stdout.splitlines()[1] if done.returncode == 0 else ""


def violations(workspace: Path) -> list[str]:
    log = (workspace / "run" / "nats-server.log").read_text()
    return [line for line in log.splitlines() if "Violation" in line]


@pytest.mark.timeout(120)
def test_a_swarm_of_role_users_runs_and_a_remote_trainer_joins(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "swarm.toml"
    config.write_text(
        f'[bus]\nlisten = "0.0.0.0:{port}"\n'
        "[ledger]\nsnapshot_interval_s = 0.5\nrestart_delay_s = 0.2\n[status]\ninterval_s = 0.5\n"
        '[trainers]\ncount = 1\n[agents]\ncount = 2\n[target]\nkind = "synthetic"\n'
    )
    ws = tmp_path / "ws"
    swarm = RunningSwarm(ws, config)
    worker = None
    try:
        swarm.wait_ready()
        bus_file = json.loads((ws / "run" / "bus.json").read_text())
        assert not (bus_file["token"] or bus_file["password"])  # secrets live in run/creds
        creds = json.loads((ws / "run" / "creds" / "trainer.json").read_text())
        assert oct((ws / "run" / "creds" / "trainer.json").stat().st_mode & 0o777) == "0o600"
        # Another host: its own folder, the URL, the trainer user, the password from the env.
        worker = subprocess.Popen(
            [
                *swarm_cmd(tmp_path / "remote", "worker"),
                *("--nats", f"nats://127.0.0.1:{port}", "--nats-user", "trainer"),
                *("--target", "synthetic"),
            ],
            env={**os.environ, "SWARM_NATS_PASSWORD": creds["password"]},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        trainers = "select count(distinct trainer) from runs where status = 'OK'"
        wait_for(lambda: sql_value(ws, trainers) == "2", 60, 0.5)  # ours and the remote one
        assert int(sql_value(ws, "select count(*) from decisions")) > 0
        assert "swarm: running" in run_swarm(ws, "status").stdout
        assert run_swarm(ws, "champion", "show").returncode == 0
    finally:
        if worker is not None:
            worker.send_signal(signal.SIGTERM)
            worker_out, _ = worker.communicate(timeout=30)
        output = swarm.stop()
    assert worker.returncode == 0, worker_out
    assert "beyond this machine without TLS" in output  # the warning, in the supervisor's log
    assert violations(ws) == []
    assert "experiments run:" in output


async def connect_and_close(settings: BusSettings) -> None:
    nc = await connect(settings, "outsider", timeout_s=2)
    await nc.close()


def make_client_certificate(folder: Path) -> tuple[Path, Path]:
    """A client certificate signed by the CA make_certificates made in `folder`."""

    def openssl(command: str) -> None:  # file names only: `folder` is the working directory
        subprocess.run(["openssl", *command.split()], cwd=folder, check=True, capture_output=True)

    openssl("req -newkey rsa:2048 -nodes -subj /CN=swarm-host -keyout client.key -out client.csr")
    openssl(
        "x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 -out client.pem"
    )
    return folder / "client.pem", folder / "client.key"


@pytest.mark.timeout(90)
def test_the_embedded_listener_can_require_mutual_tls(tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    certs.mkdir()
    ca, cert, key = make_certificates(certs)
    client_cert, client_key = make_client_certificate(certs)
    port = free_port()
    config = tmp_path / "swarm.toml"
    config.write_text(
        f'[bus]\nlisten = "127.0.0.1:{port}"\nserver_tls_cert = "{cert}"\n'
        f'server_tls_key = "{key}"\nserver_tls_client_ca = "{ca}"\ntls_ca = "{ca}"\n'
        f'tls_cert = "{client_cert}"\ntls_key = "{client_key}"\n'
        "[trainers]\ncount = 0\n[agents]\ncount = 0\n[status]\ninterval_s = 0.5\n"
    )
    ws = tmp_path / "ws"
    swarm = RunningSwarm(ws, config)
    try:
        swarm.wait_ready()  # the ledger and `swarm status` connect over TLS with the client cert
        assert sql_value(ws, "select 42") == "42"
        settings = swarm.workspace.read_bus_settings(Role.CLI)
        assert settings is not None
        url = f"tls://127.0.0.1:{port}"
        good = BusSettings(url, user="cli", password=settings.password, tls_ca=str(ca))
        refused = [
            BusSettings(url, user="cli", password=settings.password),  # server not trusted
            good,  # no client certificate
        ]
        for attempt in refused:
            with pytest.raises(BusUnavailable):
                asyncio.run(connect_and_close(attempt))
        asyncio.run(
            connect_and_close(replace(good, tls_cert=str(client_cert), tls_key=str(client_key)))
        )
    finally:
        output = swarm.stop()
    assert "swarm: stopped" in output and "without TLS" not in output
