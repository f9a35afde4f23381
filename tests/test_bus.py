"""The embedded nats-server, stream setup, and joining an external server with credentials."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from nats.js.api import RetentionPolicy

from bus.embedded_server import EmbeddedNatsServer, find_nats_server
from bus.nats_bus import BusSettings, BusUnavailable, connect, publish_event
from bus.subjects import EVENTS_STREAM, JOBS_STREAM, ensure_ledger_consumer, ensure_streams
from tests.conftest import MAX_PAYLOAD, RunningSwarm, make_result, run_swarm, swarm_cmd, wait_for
from tests.helpers_process import alive, pids_matching, start_nats_server


async def test_token_is_required(nats_server: EmbeddedNatsServer) -> None:
    with pytest.raises(BusUnavailable, match="cannot reach the bus"):
        await connect(BusSettings(nats_server.url), "no-token", timeout_s=1)
    with pytest.raises(BusUnavailable):
        await connect(BusSettings(nats_server.url, token="wrong"), "bad-token", timeout_s=1)
    assert nats_server.url.startswith("nats://127.0.0.1:")
    assert oct((nats_server.run_dir / "nats-server.conf").stat().st_mode & 0o777) == "0o600"


async def test_stream_setup_is_idempotent_across_restarts(tmp_path: Path) -> None:
    server = EmbeddedNatsServer(tmp_path / "run", tmp_path / "js", MAX_PAYLOAD)
    server.start()
    nc = await connect(BusSettings(server.url, token=server.token), "t")
    js = nc.jetstream()
    for _ in range(3):
        await ensure_streams(js, MAX_PAYLOAD)
        await ensure_ledger_consumer(js)
    await publish_event(js, make_result(1))
    await nc.close()
    server.stop()
    # Same store, new server process, new port and token: everything is still there.
    server = EmbeddedNatsServer(tmp_path / "run", tmp_path / "js", MAX_PAYLOAD)
    server.start()
    nc = await connect(BusSettings(server.url, token=server.token), "t")
    js = nc.jetstream()
    await ensure_streams(js, MAX_PAYLOAD)
    await ensure_ledger_consumer(js)
    assert (await js.stream_info(EVENTS_STREAM)).state.messages == 1
    assert (await js.stream_info(JOBS_STREAM)).config.retention == RetentionPolicy.WORK_QUEUE
    await nc.close()
    server.stop()
    assert not server.pid_file.exists()


def test_stale_server_from_a_dead_swarm_is_stopped_at_next_start(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "nats-server.conf").write_text("listen: 127.0.0.1:-1\n")
    # A server started without parent-death handling: what a crashed older swarm could leave.
    stale = subprocess.Popen(
        [
            find_nats_server(),
            "-c",
            str(run_dir / "nats-server.conf"),
            "--ports_file_dir",
            str(run_dir),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    (run_dir / "nats-server.pid").write_text(f"{stale.pid}\n")
    wait_for((run_dir / f"nats-server_{stale.pid}.ports").exists, 10, 0.02)  # it is up
    server = EmbeddedNatsServer(run_dir, tmp_path / "js", MAX_PAYLOAD)
    try:
        server.start()
        assert stale.wait(5) is not None
    finally:
        server.stop()
        if stale.poll() is None:
            stale.kill()
            stale.wait()


async def test_nothing_starts_without_a_free_binary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("bus.embedded_server.find_nats_server", lambda: "/nonexistent/nats-server")
    server = EmbeddedNatsServer(tmp_path / "run", tmp_path / "js", MAX_PAYLOAD)
    with pytest.raises(FileNotFoundError):
        server.start()


def test_ctrl_c_stops_everything(tmp_path: Path, swarm_config: Path) -> None:
    swarm = RunningSwarm(tmp_path / "ws", swarm_config)
    swarm.wait_ready()
    root = str(swarm.workspace.root)
    children = pids_matching(root, "nats-server") + pids_matching(root, last_arg="ledger")
    output = swarm.stop(signal.SIGINT)
    assert swarm.process.returncode == 0, output
    assert "swarm: stopped" in output
    assert not any(alive(p) for p in children)
    assert not swarm.workspace.bus_file.exists()


def _user_password_server(tmp_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    store = json.dumps(str(tmp_path / "external" / "js"))
    return start_nats_server(
        "listen: 127.0.0.1:-1\n"
        'authorization { users = [ { user: "alice", password: "s3cret" } ] }\n'
        f"jetstream {{ store_dir: {store} }}\n",
        tmp_path / "external",
    )


def test_join_an_external_server_with_user_and_password(tmp_path: Path) -> None:
    server, url = _user_password_server(tmp_path)
    env = {**os.environ, "SWARM_NATS_PASSWORD": "s3cret"}
    start = swarm_cmd(
        tmp_path / "ws", "start", "--nats", url, "--nats-user", "alice", "--trainers", "0"
    )
    swarm = subprocess.Popen(start, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_for(
            lambda: (
                run_swarm(tmp_path / "ws", "sql", "select 42 as answer").stdout.count("42") == 1
            ),
            30,
            0.2,
        )
        assert not pids_matching(str(tmp_path / "ws"), "nats-server")  # none embedded
        settings = json.loads((tmp_path / "ws" / "run" / "bus.json").read_text())
        assert settings["user"] == "alice"
        assert oct((tmp_path / "ws" / "run" / "bus.json").stat().st_mode & 0o777) == "0o600"
    finally:
        swarm.send_signal(signal.SIGTERM)
        out, _ = swarm.communicate(timeout=30)
        server.terminate()
        server.wait(10)
    assert b"(external)" in out and b"s3cret" not in out


def test_wrong_credentials_fail_with_a_clear_error(tmp_path: Path) -> None:
    server, url = _user_password_server(tmp_path)
    try:
        env = {**os.environ, "SWARM_NATS_PASSWORD": "wrong"}
        done = subprocess.run(
            swarm_cmd(tmp_path / "ws", "start", "--nats", url, "--nats-user", "alice"),
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        server.terminate()
        server.wait(10)
    assert done.returncode == 2
    assert "cannot reach the bus at nats://127.0.0.1:" in done.stderr
    # The server's reason, or (when the reset beats it to the client) what the reset means.
    assert "Authorization Violation" in done.stderr or "are the credentials right?" in done.stderr
    assert "wrong" not in done.stderr


def test_a_missing_tls_file_and_a_server_list_are_handled(tmp_path: Path) -> None:
    env = {**os.environ, "SWARM_NATS_TOKEN": "t"}
    missing = swarm_cmd(tmp_path / "ws", "worker", "--nats", "tls://127.0.0.1:1",
                        "--tls-ca", str(tmp_path / "no-such-ca.pem"))  # fmt: skip
    done = subprocess.run(missing, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "cannot set up TLS for the bus" in done.stderr and "no-such-ca.pem" in done.stderr
    settings = BusSettings("nats://a:1, nats://user:secret@b:2")
    assert settings.redacted_url() == "nats://a:1,nats://b:2"
