"""Soak: a long swarm, watching every process's memory and open file descriptors for leaks.

Runs `swarm start` with N agents for M minutes and samples, every `--every` seconds, each
process's resident memory (VmRSS) and open descriptors (/proc/<pid>/fd), with the ledger's run
count. Prints a table per process: first and last sample after the warm-up, the growth, and the
growth per 1,000 runs; a process that was restarted shows its restarts. Some growth is by
design: the ladder and every researcher hold the swarm's history (ideas, results, decisions), so
their memory grows with the runs; a leak is growth that keeps going without them, or descriptors
that climb.

    python bench/soak.py --minutes 30 --agents 16                      # synthetic target
    python bench/soak.py --minutes 30 --agents 16 --target bytelm      # real training
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script, from anywhere

from bench.faults import Swarm, children, role_of


@dataclass
class Sample:
    at: float
    runs: int
    rss_mib: dict[str, float]
    fds: dict[str, int]
    pids: dict[str, int]


def sample(swarm: Swarm, started: float) -> Sample:
    assert swarm.process is not None
    names: dict[int, str] = {}
    for pid, argv in children(swarm.process.pid):
        role = role_of(argv) or Path(argv[0]).name
        n = sum(1 for name in names.values() if name.startswith(role))
        names[pid] = f"{role}-{n}" if role == "worker" else role
    names[swarm.process.pid] = "start"
    server = swarm.server_pid()
    if server:
        names[server] = "nats-server"
    rss, fds, pids = {}, {}, {}
    for pid, name in names.items():
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            kib = next(int(line.split()[1]) for line in status.splitlines() if line[:6] == "VmRSS:")
            rss[name], fds[name], pids[name] = (
                kib / 1024,
                len(list(Path(f"/proc/{pid}/fd").iterdir())),
                pid,
            )
        except (OSError, StopIteration):
            continue  # exited between the listing and the read
    return Sample(time.monotonic() - started, swarm.runs(), rss, fds, pids)


def progress(s: Sample) -> str:
    shown = "  ".join(f"{n} {s.rss_mib[n]:.0f}Mi/{s.fds[n]}fd" for n in sorted(s.rss_mib))
    return f"{s.at / 60:5.1f} min  runs {s.runs}  {shown}"


def report(first: Sample, last: Sample) -> str:
    runs = max(1, last.runs - first.runs)
    lines = [
        f"samples from {first.at / 60:.1f} to {last.at / 60:.1f} min; runs {first.runs} -> "
        f"{last.runs}",
        f"{'process':<12} {'RSS start':>10} {'RSS end':>9} {'growth':>8} {'/1k runs':>9} "
        f"{'fds start':>9} {'fds end':>8}  note",
    ]  # fmt: skip
    for name in sorted(first.rss_mib):
        if name not in last.rss_mib:
            continue
        a, b = first.rss_mib[name], last.rss_mib[name]
        note = "restarted" if first.pids[name] != last.pids[name] else ""
        lines.append(
            f"{name:<12} {a:>8.1f}Mi {b:>7.1f}Mi {b - a:>+7.1f}M {(b - a) / runs * 1000:>+8.2f}M "
            f"{first.fds[name]:>9} {last.fds[name]:>8}  {note}"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--agents", type=int, default=16)
    parser.add_argument("--target", default="synthetic", choices=["synthetic", "bytelm"])
    parser.add_argument("--warmup", type=float, default=60, help="seconds before the first sample")
    parser.add_argument("--every", type=float, default=30, help="seconds between samples")
    parser.add_argument("--keep", type=Path, help="keep the workspace here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="swarm-soak-") as tmp:
        root = args.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        config = root / "swarm.toml"
        config.write_text(f'[target]\nkind = "{args.target}"\n[trainers]\ncount = 2\n')
        swarm = Swarm(root / "ws", config, args.agents)
        started = time.monotonic()
        swarm.start()
        samples: list[Sample] = []
        try:
            time.sleep(args.warmup)
            while time.monotonic() - started < args.minutes * 60:
                samples.append(sample(swarm, started))
                print(progress(samples[-1]), flush=True)
                time.sleep(args.every)
        finally:
            swarm.stop(timeout=120)
        restarts = subprocess.run(["grep", "-c", "restarting", str(root / "start.log")],
                                  capture_output=True, text=True).stdout.strip()  # fmt: skip
    print(report(samples[0], samples[-1]))
    print(f"process restarts during the soak: {restarts or 0}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
