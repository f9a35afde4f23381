"""Fault injection: kill -9 parts of a running swarm at random moments, then prove nothing was
lost or duplicated.

A real swarm (`swarm start` on the synthetic target, whose experiments cost nothing, so faults
land in the machinery, not in training) runs while, every few seconds, one of these is killed
with SIGKILL: a trainer, the ledger, the ladder, the agents host, the embedded nats-server, or
the whole `swarm start` process (which is then started again on the same workspace). Then the
swarm is stopped, drained (restarted with no agents until every RunSpec has its result) and
`swarm audit --drained` checks the ledger: every RunSpec has exactly one RunResult, no
experiment or decision is duplicated, the champion's lineage is whole, and a ladder replaying
the ledger holds the same champion and finds nothing left to do.

    python bench/faults.py --seconds 600          # the long form (10 minutes of faults)
    python bench/faults.py --seconds 40 --seed 3  # what the test suite runs

Prints the faults injected by kind and the audit's counts (lost, duplicated); exits 1 on any
problem. tests/test_fault_injection.py runs the short form.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

VICTIMS = ("trainer", "ledger", "ladder", "agents", "nats-server", "swarm")
ROLES = {"trainer": "worker", "ledger": "ledger", "ladder": "ladder", "agents": "agents"}


@dataclass
class FaultReport:
    faults: Counter[str] = field(default_factory=Counter)
    starts: int = 0
    audit_output: str = ""
    audit_code: int = -1

    def line(self) -> str:
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(self.faults.items()))
        total = sum(self.faults.values())
        return f"faults injected {total} ({kinds}); swarm starts {self.starts}"


class Swarm:
    """`swarm start` on one workspace, restartable; its output appended to start.log."""

    def __init__(self, workspace: Path, config: Path, agents: int) -> None:
        self.workspace = workspace
        self.config = config
        self.agents = agents
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self, agents: int | None = None) -> None:
        count = self.agents if agents is None else agents
        with open(self.workspace.parent / "start.log", "ab") as log:
            self.process = subprocess.Popen(
                [*self.command("start"), f"--agents={count}"],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a kill -9 here must not take the caller's group along
            )
        self.starts += 1
        wait_for(lambda: len(self.pids()) >= 4, 60, "the swarm's processes to start")

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "swarm", "--workspace", str(self.workspace),
                "--config", str(self.config), *args]  # fmt: skip

    def pids(self, role: str = "") -> list[int]:
        """The swarm's child processes (of one role, if given)."""
        assert self.process is not None
        return [
            pid for pid, argv in children(self.process.pid) if not role or role_of(argv) == role
        ]

    def server_pid(self) -> int | None:
        try:
            return int((self.workspace / "run" / "nats-server.pid").read_text())
        except (OSError, ValueError):
            return None

    def stop(self, timeout: float = 60) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            self.process.wait(timeout)

    def runs(self) -> int:
        answer = self.sql("select count(*) from runs").strip().splitlines()[-1:]
        return int(answer[0]) if answer and answer[0].isdigit() else 0

    def sql(self, query: str) -> str:
        """The answer as CSV; empty if the ledger did not answer (restarting, or a busy host)."""
        try:
            done = subprocess.run([*self.command("sql", query, "--format", "csv")],
                                  capture_output=True, text=True, timeout=60)  # fmt: skip
        except subprocess.TimeoutExpired:
            return ""
        return done.stdout if done.returncode == 0 else ""


def inject(swarm: Swarm, victim: str) -> bool:
    """kill -9 one process of the kind; False if none was running (e.g. mid-restart)."""
    if victim == "swarm":
        assert swarm.process is not None
        orphans = [*swarm.pids(), swarm.server_pid() or 0]
        swarm.process.kill()
        swarm.process.wait()
        # Its children get SIGTERM from the kernel (parent-death signal) and stop by themselves.
        wait_for(lambda: not any(map(alive, orphans)), 60, "the dead swarm's processes to exit")
        swarm.start()
        return True
    if victim == "nats-server":
        pid = swarm.server_pid()
        pids = [pid] if pid else []
    else:
        pids = swarm.pids(ROLES[victim])
    if not pids:
        return False
    try:
        os.kill(random.choice(pids), signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


def drain(swarm: Swarm, quiet_s: float = 3.0, timeout: float = 120) -> None:
    """Restart with no agents (so no new ideas) until every RunSpec has its result and nothing
    has changed for `quiet_s`."""
    swarm.start(agents=0)
    query = "select (select count(*) from run_specs), (select count(*) from runs)"
    last, since = "", time.monotonic()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.5)
        counts = swarm.sql(query).strip().splitlines()[-1:]
        if counts != [last]:
            last, since = (counts or [""])[0], time.monotonic()
            continue
        specs, _, results = last.partition(",")
        if specs == results and time.monotonic() - since >= quiet_s:
            break
    swarm.stop()


def run_faults(root: Path, seconds: float, seed: int, agents: int = 6,
               every: tuple[float, float] = (1.5, 4.0)) -> FaultReport:  # fmt: skip
    rng = random.Random(seed)
    config = root / "swarm.toml"
    config.write_text(
        '[target]\nkind = "synthetic"\n[trainers]\ncount = 2\n'
        "[ledger]\nrestart_delay_s = 0.2\nsnapshot_interval_s = 1.0\n[status]\ninterval_s = 1.0\n"
        # a killed ladder restarts from its snapshot, written every second: that path is hit
        "[ladder]\nsnapshot_interval_s = 1.0\n"
    )
    swarm = Swarm(root / "ws", config, agents)
    report = FaultReport()
    try:
        swarm.start()
        # Faults start once the swarm works (on a busy machine, start-up alone can take 20 s).
        wait_for(lambda: swarm.runs() >= 10, 120, "the swarm's first results")
        started = time.monotonic()
        deadline = started + seconds
        order: list[str] = []
        # Every kind of fault at least once, even when a slow restart on a loaded machine eats
        # the window: a whole-swarm kill waits for its orphans and a fresh start, which took
        # over 30 s on a loaded CI runner, so a short window gets at least 120 s for the rest.
        overtime = started + max(4 * seconds, 120)
        while time.monotonic() < deadline or (
            set(report.faults) != set(VICTIMS) and time.monotonic() < overtime
        ):
            time.sleep(rng.uniform(*every))
            order = order or rng.sample(VICTIMS, len(VICTIMS))  # every kind, in random order
            victim = order.pop()
            if inject(swarm, victim):
                report.faults[victim] += 1
        swarm.stop()
        drain(swarm)
    finally:
        if swarm.process is not None and swarm.process.poll() is None:
            left = [*swarm.pids(), swarm.server_pid() or 0]
            swarm.process.kill()
            wait_for(lambda: not any(map(alive, left)), 60, "every process to exit")
    report.starts = swarm.starts
    audit = subprocess.run([*swarm.command("audit", "--drained")],
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    report.audit_output, report.audit_code = audit.stdout + audit.stderr, audit.returncode
    return report


def children(root: int) -> list[tuple[int, list[str]]]:
    """(pid, argv) of every live process whose parent is `root`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
        except OSError:
            continue
        if int(stat[1]) == root and stat[0] != "Z":
            found.append((int(entry.name), argv))
    return found


def role_of(argv: list[str]) -> str:
    """`python -m swarm --workspace W --config C <role> ...` -> role."""
    at = argv.index("--config") + 2 if "--config" in argv else len(argv)
    return argv[at] if at < len(argv) else ""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return pid > 0 and state != "Z"


def wait_for(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=600, help="how long to inject faults")
    parser.add_argument("--seed", type=int, default=0, help="which faults, when")
    parser.add_argument("--agents", type=int, default=6)
    parser.add_argument("--keep", type=Path, help="keep the workspace here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="swarm-faults-") as tmp:
        root = args.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        report = run_faults(root, args.seconds, args.seed, args.agents)
    print(report.line())
    print(report.audit_output, end="")
    return report.audit_code


if __name__ == "__main__":
    sys.exit(main())
