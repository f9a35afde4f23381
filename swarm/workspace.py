"""The workspace folder: where the ledger, JetStream store, snapshots and run state live.

A running swarm holds an exclusive lock on `run/swarm.lock` (released by the kernel if the process
dies, even by SIGKILL) and writes `run/bus.json` (mode 0600: it may hold the bus token) so
`swarm sql`, `swarm status` and the ledger process find the bus.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from bus.embedded_server import write_private
from bus.nats_bus import BusSettings


@dataclass(frozen=True, slots=True)
class Workspace:
    root: Path

    @property
    def run_dir(self) -> Path:
        return self.root / "run"

    @property
    def jetstream_dir(self) -> Path:
        return self.root / "jetstream"

    @property
    def ledger_path(self) -> Path:
        return self.root / "ledger.duckdb"

    @property
    def snapshot_dir(self) -> Path:
        return self.root / "snapshots"

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    @property
    def bus_file(self) -> Path:
        return self.run_dir / "bus.json"

    @property
    def lock_file(self) -> Path:
        return self.run_dir / "swarm.lock"

    def create(self) -> None:
        for folder in (
            self.root,
            self.run_dir,
            self.jetstream_dir,
            self.snapshot_dir,
            self.logs_dir,
        ):
            folder.mkdir(parents=True, exist_ok=True)

    def write_bus_settings(self, settings: BusSettings) -> None:
        write_private(self.bus_file, json.dumps(dataclasses.asdict(settings)))

    def read_bus_settings(self) -> BusSettings | None:
        try:
            return BusSettings(**json.loads(self.bus_file.read_text()))
        except (FileNotFoundError, json.JSONDecodeError, TypeError):
            return None

    def clear_bus_settings(self) -> None:
        self.bus_file.unlink(missing_ok=True)

    def acquire_lock(self) -> IO[str] | None:
        """Take the swarm lock; None if another live swarm holds it. Keep the handle open."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        handle = open(self.lock_file, "a+")  # noqa: SIM115 - held for the swarm's lifetime
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            return None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        return handle

    def is_running(self) -> bool:
        """True while a live `swarm start` holds the lock on this workspace."""
        if not self.lock_file.exists():
            return False
        with open(self.lock_file) as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(handle, fcntl.LOCK_UN)
            return False
