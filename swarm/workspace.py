"""The workspace folder: where the ledger, JetStream store, snapshots and run state live.

A running swarm holds an exclusive lock on `run/swarm.lock` (released by the kernel if the process
dies, even by SIGKILL) and writes `run/bus.json` (mode 0600: it may hold the bus token) so
`swarm sql`, `swarm status` and the ledger process find the bus.

With the embedded server, each role has its own NATS user: `run/creds/<role>.json` (mode 0600,
made once and kept, so a remote worker's password survives a restart of the swarm) holds its
user and password, and `bus.json` holds no secret. A process reads the file of its own role.

`run/seed_secret` (mode 0600, made once and kept) keys the tiers' seeds (scale_ladder/seeds.py):
only the ladder reads it, so no recipe knows its seeds before it runs, and a restarted swarm
asks for the same ones. Losing it changes the seeds of every run still to come, nothing else.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from bus.embedded_server import write_private
from bus.nats_bus import BusSettings
from bus.roles import Role
from training import secret_language

PER_ROLE = "per_role"  # in bus.json: each role connects with its own file in run/creds
SEED_SECRET_BYTES = 32


class SeedSecretError(ValueError):
    """The workspace's seed secret is there but unreadable: the swarm would change its seeds."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(
            f"{path}: {why}; restore it, or delete it to run every future experiment on new seeds"
        )
        self.path = path


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
    def corpus_dir(self) -> Path:
        """The bytelm corpora's cache (training/corpus.py)."""
        return self.root / "corpus"

    def language_key(self) -> bytes:
        """The secret language's key: this swarm's, from its seed secret."""
        return secret_language.key_from(self.seed_secret())

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
    def web_url_file(self) -> Path:
        """Where the running swarm's web view listens (written by `swarm web`)."""
        return self.run_dir / "web.url"

    @property
    def creds_dir(self) -> Path:
        return self.run_dir / "creds"

    def creds_file(self, role: Role) -> Path:
        return self.creds_dir / f"{role.value}.json"

    @property
    def seed_secret_file(self) -> Path:
        return self.run_dir / "seed_secret"

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
        # The run folder holds the seed secret, the bus credentials and the ladder's snapshot
        # (a pickle it loads): its own user's alone.
        os.chmod(self.run_dir, 0o700)

    def write_bus_settings(self, settings: BusSettings, per_role: bool = False) -> None:
        write_private(
            self.bus_file, json.dumps({**dataclasses.asdict(settings), PER_ROLE: per_role})
        )

    def read_bus_settings(self, role: Role = Role.CLI) -> BusSettings | None:
        """How `role` reaches the running swarm's bus: the shared settings, plus the role's
        own user and password where the swarm runs the embedded server."""
        try:
            data = json.loads(self.bus_file.read_text())
            per_role = data.pop(PER_ROLE, False)
            settings = BusSettings(**data)
            if per_role:
                creds = json.loads(self.creds_file(role).read_text())
                settings = dataclasses.replace(
                    settings, user=creds["user"], password=creds["password"]
                )
        except (FileNotFoundError, json.JSONDecodeError, TypeError, KeyError):
            return None
        return settings

    def role_passwords(self) -> dict[Role, str]:
        """Every role's password, made the first time (random, each in a 0600 file)."""
        self.creds_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.creds_dir, 0o700)
        passwords = {}
        for role in Role:
            try:
                creds = json.loads(self.creds_file(role).read_text())
                passwords[role] = str(creds["password"])
            except (FileNotFoundError, json.JSONDecodeError, KeyError, TypeError):
                passwords[role] = secrets.token_urlsafe(24)
                creds = {"user": role.value, "password": passwords[role]}
                write_private(self.creds_file(role), json.dumps(creds))
        return passwords

    def seed_secret(self) -> bytes:
        """The key of this swarm's seeds, made the first time (random, hex in a 0600 file)."""
        path = self.seed_secret_file
        if not path.exists():
            self.run_dir.mkdir(parents=True, exist_ok=True)
            made = path.with_name(f".{path.name}.{os.getpid()}")
            write_private(made, secrets.token_hex(SEED_SECRET_BYTES) + "\n")
            try:
                os.link(made, path)  # all or nothing; if another process made one, theirs
            except FileExistsError:
                pass
            finally:
                made.unlink()
        if path.stat().st_mode & 0o077:
            os.chmod(path, 0o600)
        try:
            secret = bytes.fromhex(path.read_text())
        except (ValueError, UnicodeDecodeError):
            raise SeedSecretError(path, "not hexadecimal") from None
        if len(secret) < SEED_SECRET_BYTES // 2:
            raise SeedSecretError(path, f"{len(secret)} bytes, too short to be a seed secret")
        return secret

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
