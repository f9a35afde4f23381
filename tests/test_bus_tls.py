"""Joining an external nats-server over TLS, verifying it with a CA the test makes."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from tests.conftest import run_swarm, swarm_cmd, wait_for
from tests.helpers_process import start_nats_server

pytestmark = pytest.mark.skipif(
    shutil.which("openssl") is None, reason="needs the openssl command to make certificates"
)


def make_certificates(folder: Path) -> tuple[Path, Path, Path]:
    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)

    openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=test-ca",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    )
    openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    )
    (folder / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl(
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        "san.ext",
        "-out",
        "server.pem",
    )
    return folder / "ca.pem", folder / "server.pem", folder / "server.key"


def test_join_an_external_server_over_tls(tmp_path: Path) -> None:
    ca, cert, key = make_certificates(tmp_path)
    server, plain_url = start_nats_server(
        "listen: 127.0.0.1:-1\n"
        f"tls {{ cert_file: {json.dumps(str(cert))}, key_file: {json.dumps(str(key))} }}\n"
        f"jetstream {{ store_dir: {json.dumps(str(tmp_path / 'js'))} }}\n",
        tmp_path / "server",
    )
    swarm = None
    try:
        port = plain_url.rsplit(":", 1)[1]
        url = f"tls://127.0.0.1:{port}"
        ws = tmp_path / "ws"
        swarm = subprocess.Popen(
            swarm_cmd(ws, "start", "--nats", url, "--tls-ca", str(ca), "--trainers", "0"),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        wait_for(lambda: "42" in run_swarm(ws, "sql", "select 42 as answer").stdout, 30, 0.3)
        assert "swarm: running" in run_swarm(ws, "status").stdout
        # Without the CA the server's certificate is not trusted: a clear refusal.
        refused = run_swarm(tmp_path / "other", "start", "--nats", url, "--trainers", "0")
        assert refused.returncode == 2 and "cannot reach the bus" in refused.stderr
    finally:
        if swarm is not None:
            swarm.send_signal(signal.SIGTERM)
            swarm.communicate(timeout=30)
        server.terminate()
        server.wait(10)
