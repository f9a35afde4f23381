"""Finding and publishing to the processes of a running swarm, for process-level tests."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path

from bus.embedded_server import find_nats_server
from bus.messages import Message
from bus.nats_bus import BusSettings, connect, publish_event


def pids_matching(*needles: str, last_arg: str = "") -> list[int]:
    """Pids whose command line contains every needle (and ends with `last_arg`, if given)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode().split("\0")[:-1]
        except OSError:
            continue
        cmdline = " ".join(argv)
        if argv and all(n in cmdline for n in needles) and argv[-1].endswith(last_arg):
            found.append(int(entry.name))
    return found


def descendants(root: int) -> list[int]:
    """Pids of every process below `root` (children, grandchildren, ...)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [], [root]
    while frontier:
        children = [pid for pid, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is dead


async def publish_all(settings: BusSettings, messages: list[Message], window: int = 500) -> None:
    """Publish with `window` acks in flight (JetStream acks each; ~5x faster than one by one)."""
    nc = await connect(settings, "test-publisher")
    js = nc.jetstream()
    try:
        for start in range(0, len(messages), window):
            chunk = messages[start : start + window]
            await asyncio.gather(*(publish_event(js, m, timeout=30) for m in chunk))
    finally:
        await nc.close()


def start_nats_server(config: str, run_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A nats-server of the test's own (an "external" one): its process and client URL."""
    run_dir.mkdir(parents=True, exist_ok=True)
    conf = run_dir / "server.conf"
    conf.write_text(config)
    process = subprocess.Popen(
        [find_nats_server(), "-c", str(conf), "--ports_file_dir", str(run_dir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    ports = run_dir / f"nats-server_{process.pid}.ports"
    deadline = time.monotonic() + 10
    while not (ports.exists() and ports.read_text().strip()):
        if time.monotonic() > deadline or process.poll() is not None:
            process.kill()
            raise RuntimeError(f"nats-server with {conf} did not start")
        time.sleep(0.02)
    return process, json.loads(ports.read_text())["nats"][0]
