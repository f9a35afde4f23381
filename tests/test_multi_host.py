"""A swarm across three hosts: Linux network namespaces on this machine, joined by a bridge.

hub (10.213.7.1): a real nats-server (token, JetStream) on the hub's own IP, and `swarm start
--nats ...` with no trainers and no agents (the ledger and the ladder). hosta (.2): `swarm
worker`. hostb (.3): `swarm agents --count 2`. Each host has its own network stack and host name
and reaches only the hub. The ledger then shows that host A ran every experiment, host B's
researchers proposed every idea, and the ladder decided and promoted; the server's connection
list shows each process joined from its own host's IP. A host with a wrong token is refused, and
the default (`swarm start` with no --nats: an embedded server on loopback) cannot be reached
from another host at all. docs/multi-host.md uses these commands as its worked example.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from ipaddress import ip_address
from pathlib import Path
from typing import Any

import pytest

from bus.embedded_server import find_nats_server, write_private
from tests.netns import Lab, LabUnavailable

ROOT = Path(__file__).resolve().parents[1]  # each host runs from a checkout, as a real one would
PORT = 4222  # the hub has a network stack of its own: the standard port is free there
MONITOR_PORT = 8222

# Two tiers with a lenient rule, so an idea climbs past tier 0 within seconds on the synthetic
# target (the default ladder's gates are sized for real training noise).
LADDER = "".join(
    f"""
[[tier]]
name = "t{i}"
depth = {i + 1}
width = 32
context = 16
budget_kind = "tokens"
budget = 1000
time_limit_s = 30
eval_tokens = 64
seeds = 2
max_seeds = 2
min_improvement = 0.001
sigmas = 1.0
"""
    for i in range(2)
)

# What the hub's ledger says about who did what; one statement, polled until the swarm got there.
PROGRESS_SQL = """
select
  (select count(*) from runs) as runs,
  (select count(*) from runs where trainer like 'trainer-hosta-%') as runs_on_hosta,
  (select count(*) from runs where tier >= 1) as runs_above_tier0,
  (select count(*) from ideas) as ideas,
  (select count(*) from ideas where author like 'hostb-%') as ideas_from_hostb,
  (select count(distinct author) from ideas) as authors,
  (select count(*) from decisions) as decisions,
  (select count(*) from decisions where verdict = 'PROMOTE' and tier = 0) as promoted_at_tier0,
  (select count(*) from lineage where kind = 'STACK' and author like 'hostb-%') as stacked
"""


class Processes:
    """Every process a test starts on the lab's hosts, each logging to a file of its own."""

    def __init__(self, lab: Lab, log_dir: Path) -> None:
        self.lab = lab
        self.log_dir = log_dir
        self.running: dict[str, subprocess.Popen[bytes]] = {}
        log_dir.mkdir(parents=True, exist_ok=True)

    def start(
        self, name: str, host: str, argv: list[str], env: dict[str, str] | None = None
    ) -> None:
        with open(self.log_dir / f"{name}.log", "wb") as log:
            self.running[name] = subprocess.Popen(
                self.lab.command(host, argv),
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def log(self, name: str) -> str:
        return (self.log_dir / f"{name}.log").read_text(errors="replace")

    def stop(self, *names: str, grace_s: float = 15.0) -> None:
        """SIGTERM (each process's one shutdown path), then SIGKILL the ones that linger."""
        stopping = [self.running.pop(n) for n in names if n in self.running]
        for process in stopping:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for process in stopping:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()

    def stop_all(self) -> None:
        # The bus last: the swarm's processes stop faster while they can still reach it.
        self.stop(*(n for n in self.running if n != "nats-server"))
        self.stop("nats-server")


@pytest.fixture
def lab() -> Iterator[Lab]:
    lab = Lab(("hosta", "hostb"))
    try:
        try:
            lab.create()
        except LabUnavailable as exc:
            pytest.skip(f"multi-host test needs Linux network namespaces: {exc}")
        yield lab
    finally:
        lab.destroy()  # also kills anything still running inside, whatever happened above


@pytest.fixture
def processes(lab: Lab, tmp_path: Path) -> Iterator[Processes]:
    running = Processes(lab, tmp_path / "logs")
    try:
        yield running
    finally:
        running.stop_all()


def swarm(workspace: Path, config: Path, *args: str) -> list[str]:
    return [
        *(sys.executable, "-m", "swarm", "--workspace", str(workspace), "--config", str(config)),
        *args,
    ]


def write_config(tmp_path: Path) -> Path:
    (tmp_path / "ladder.toml").write_text(LADDER)
    config = tmp_path / "swarm.toml"
    config.write_text(
        "[bus]\nconnect_timeout_s = 2.0\n"  # a refused host says so sooner
        "[ledger]\nrestart_delay_s = 0.2\n[status]\ninterval_s = 1.0\n"
        f"[ladder]\npath = {json.dumps(str(tmp_path / 'ladder.toml'))}\n"
    )
    return config


def wait_for_text(processes: Processes, name: str, text: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while text not in processes.log(name):
        assert processes.running[name].poll() is None, f"{name} exited:\n{processes.log(name)}"
        assert time.monotonic() < deadline, (
            f"{name}: no {text!r} in {timeout}s:\n{processes.log(name)}"
        )
        time.sleep(0.1)


def run_on(
    lab: Lab, host: str, argv: list[str], env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        lab.command(host, argv), cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


def start_hub_bus(lab: Lab, processes: Processes, tmp_path: Path, token: str) -> str:
    """A nats-server of our own on the hub's IP (what an operator would run), and its URL."""
    conf = tmp_path / "hub-nats" / "server.conf"
    conf.parent.mkdir()
    write_private(  # the token sits in a file only its owner reads, never on a command line
        conf,
        f"listen: {lab.hub_ip}:{PORT}\n"
        f"http: {lab.hub_ip}:{MONITOR_PORT}\n"  # /connz: who is connected, from which IP
        f"authorization {{ token: {json.dumps(token)} }}\n"
        f"jetstream {{ store_dir: {json.dumps(str(tmp_path / 'hub-nats' / 'js'))} }}\n",
    )
    processes.start("nats-server", "hub", [find_nats_server(), "-c", str(conf)])
    wait_for_text(processes, "nats-server", "Server is ready")
    return f"nats://{lab.hub_ip}:{PORT}"


def test_a_swarm_across_three_hosts(lab: Lab, processes: Processes, tmp_path: Path) -> None:
    token = secrets.token_urlsafe(24)
    config = write_config(tmp_path)
    url = start_hub_bus(lab, processes, tmp_path, token)
    joined = {**os.environ, "SWARM_NATS_TOKEN": token}  # the secret travels in the environment
    synthetic = ("--nats", url, "--target", "synthetic")
    hub_ws = tmp_path / "hub-ws"
    hub = ("start", *synthetic, "--agents", "0", "--trainers", "0")  # the ledger and the ladder
    processes.start("hub", "hub", swarm(hub_ws, config, *hub), joined)
    wait_for_text(processes, "hub", "(external)")  # the streams exist once it says so
    worker = ("worker", *synthetic, "--device", "cpu")
    processes.start("worker", "hosta", swarm(tmp_path / "hosta-ws", config, *worker), joined)
    agents = ("agents", *synthetic, "--count", "2")
    processes.start("agents", "hostb", swarm(tmp_path / "hostb-ws", config, *agents), joined)

    # A host with a wrong token is refused: the server turns it away (its log names the host's
    # address), the command fails, and the token it tried is not echoed.
    wrong = f"not-the-token-{secrets.token_hex(4)}"
    intruder = {**os.environ, "SWARM_NATS_TOKEN": wrong}
    refused = run_on(lab, "hosta", swarm(tmp_path / "intruder-ws", config, *worker), intruder)
    assert refused.returncode == 2, refused.stderr
    assert f"swarm: error: cannot reach the bus at {url}" in refused.stderr
    assert wrong not in refused.stdout + refused.stderr
    server_log = processes.log("nats-server").splitlines()
    assert any(
        f"{lab.ip('hosta')}:" in line and "authentication error" in line for line in server_log
    )

    # The hub's ledger: host A ran every experiment, host B's two researchers proposed every
    # idea, the ladder decided, promoted past tier 0 and stacked a change into the champion.
    progress = wait_for_progress(lab, hub_ws, config, processes)
    assert progress["runs"] > 0 and progress["runs_on_hosta"] == progress["runs"], progress
    assert progress["ideas"] > 0 and progress["ideas_from_hostb"] == progress["ideas"], progress
    assert progress["authors"] == 2, progress
    assert progress["decisions"] > 0 and progress["promoted_at_tier0"] > 0, progress
    assert progress["runs_above_tier0"] > 0 and progress["stacked"] > 0, progress

    # The server's view: each process joined from its own host's address.
    connections = monitor(lab, "/connz?limit=1024")["connections"]
    roles = {(c.get("name", "").split("-")[0], c["ip"]) for c in connections}
    assert {ip for role, ip in roles if role == "trainer"} == {lab.ip("hosta")}, connections
    assert {ip for role, ip in roles if role == "agents"} == {lab.ip("hostb")}, connections


def test_the_default_bus_is_reachable_from_no_other_host(
    lab: Lab, processes: Processes, tmp_path: Path
) -> None:
    """`swarm start` with no --nats: its embedded server listens on the hub's loopback only, so
    another host finds nothing listening, at the hub's address or anywhere else."""
    config = write_config(tmp_path)
    ws = tmp_path / "default-ws"
    default = ("start", "--target", "synthetic", "--agents", "0", "--trainers", "0")
    processes.start("hub", "hub", swarm(ws, config, *default))
    wait_for_text(processes, "hub", "(embedded)")
    bus = json.loads((ws / "run" / "bus.json").read_text())
    port = int(bus["url"].rsplit(":", 1)[1])
    assert bus["url"] == f"nats://127.0.0.1:{port}"
    listeners = listening(lab, "hub")
    assert ("127.0.0.1", port) in listeners
    assert all(ip_address(ip).is_loopback for ip, _ in listeners), listeners  # none beyond lo
    assert probe(lab, "hub", "127.0.0.1", port) == "open"  # (so the probe does see a server)
    for host in ("hosta", "hostb"):
        assert probe(lab, host, lab.hub_ip, port) == "ConnectionRefusedError"
        assert probe(lab, host, "127.0.0.1", port) == "ConnectionRefusedError"


def ledger_query(lab: Lab, workspace: Path, config: Path, sql: str) -> list[dict[str, Any]]:
    """`swarm sql` on the hub: it finds the bus (and its token) in the hub's workspace."""
    done = run_on(lab, "hub", swarm(workspace, config, "sql", sql, "--format", "json"))
    assert done.returncode == 0, done.stderr
    rows: list[dict[str, Any]] = json.loads(done.stdout)
    return rows


def wait_for_progress(
    lab: Lab, workspace: Path, config: Path, processes: Processes, timeout: float = 45
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        progress = ledger_query(lab, workspace, config, PROGRESS_SQL)[0]
        if progress["stacked"] and progress["runs_above_tier0"] and progress["authors"] == 2:
            return progress
        if time.monotonic() > deadline:
            logs = "\n".join(
                f"--- {n}\n{processes.log(n)[-2000:]}" for n in ("hub", "worker", "agents")
            )
            raise AssertionError(f"no change stacked within {timeout}s: {progress}\n{logs}")
        time.sleep(1)


def monitor(lab: Lab, path: str) -> dict[str, Any]:
    """The hub server's monitoring endpoint, asked from the hub (nothing else reaches it)."""
    done = run_on(
        lab, "hub", [sys.executable, "-c", FETCH, f"http://{lab.hub_ip}:{MONITOR_PORT}{path}"]
    )
    assert done.returncode == 0, done.stderr
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


FETCH = """
import sys, urllib.request
sys.stdout.buffer.write(urllib.request.urlopen(sys.argv[1], timeout=5).read())
"""


PROBE = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2).close()
    print("open")
except OSError as exc:
    print(type(exc).__name__)
"""


def probe(lab: Lab, host: str, address: str, port: int) -> str:
    """From `host`, try a TCP connection: "open", or the error's name."""
    done = run_on(lab, host, [sys.executable, "-c", PROBE, address, str(port)])
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def listening(lab: Lab, host: str) -> set[tuple[str, int]]:
    """The TCP sockets listening in `host`'s network namespace, from its /proc/net/tcp{,6}."""
    done = run_on(lab, host, ["cat", "/proc/net/tcp", "/proc/net/tcp6"])
    found = set()
    for line in done.stdout.splitlines():
        fields = line.split()
        if len(fields) < 4 or fields[3] != "0A":  # 0A: LISTEN (also skips the header lines)
            continue
        address, port = fields[1].split(":")
        raw = bytes.fromhex(address)  # 32-bit words, each in the host's byte order
        step = -1 if sys.byteorder == "little" else 1
        words = b"".join(raw[i : i + 4][::step] for i in range(0, len(raw), 4))
        family = socket.AF_INET if len(raw) == 4 else socket.AF_INET6
        found.add((socket.inet_ntop(family, words), int(port, 16)))
    return found
