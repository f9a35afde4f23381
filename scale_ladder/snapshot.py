"""The ladder's folded state on disk, so a restart replays only the events after it.

A ladder's state is a fold over the event stream (ladder_state.py); rebuilding it replays every
event since the swarm began, a cost that grows with the swarm's age (~77 µs of CPU per event).
The ladder process writes its state, with the stream sequence it has folded up to, to one file
in the workspace's run folder from time to time and when it stops; at start it loads the file
and replays only the events after that sequence. What it holds:

- a header line (JSON): the snapshot format, the message schema version, the sequence, when
  the event stream was created (a stream made anew, its sequences restarting, is another
  history) and a digest of the seed secret (the secret itself stays in its own file);
- the pickled state, less the secret, and the service's own count of the RunSpecs in the
  stream.

It is a cache, never the record: the stream and the ledger are. So anything doubtful means a
full replay, with the reason logged: no file, an unreadable or truncated one, another format or
schema version, a ladder configured differently since (tiers, recipe, target, seed secret: the
state was folded under those), or another stream than the one it was folded from. The file
is written to a temporary name and renamed, so a kill leaves the old snapshot or the new one.
Pickle, because the state is many nested maps of messages and a snapshot is read only by the
process that wrote it: the file is the ladder's own (mode 0600: it holds every idea and
result, and a pickle someone else could write would run as the ladder), and it never travels
over the bus.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import pickle
from dataclasses import dataclass
from pathlib import Path

from bus.messages import SCHEMA_MINOR, SCHEMA_VERSION
from scale_ladder.ladder import Ladder

log = logging.getLogger(__name__)

FORMAT = 1
# What the state was folded under: a ladder configured otherwise decides otherwise.
CONFIG_FIELDS = (
    "tiers",
    "editable",
    "initial_source",
    "target",
    "lower_is_better",
    "require_approval",
    "near_duplicate_similarity",
    "fixed",
)


@dataclass(frozen=True, slots=True)
class Snapshot:
    ladder: Ladder
    seq: int  # the last stream sequence folded into it
    specs: frozenset[str]  # run ids of the RunSpecs in the stream (the experiment limit's count)
    stream: str  # when the event stream it was folded from was created


def save(path: Path, snapshot: Snapshot) -> None:
    header = {
        "format": FORMAT,
        "schema": f"{SCHEMA_VERSION}.{SCHEMA_MINOR}",
        "seq": snapshot.seq,
        "stream": snapshot.stream,
        "secret": _digest(snapshot.ladder.seed_secret),
    }
    # The seed secret stays in its own file: the snapshot names it by a digest only.
    state = dataclasses.replace(snapshot.ladder, seed_secret=b"")
    payload = pickle.dumps((state, snapshot.specs), protocol=pickle.HIGHEST_PROTOCOL)
    tmp = path.with_name(f".{path.name}.tmp")
    # Private: it holds the whole state, and a pickle someone else could write would run as us.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(json.dumps(header).encode() + b"\n")
        f.write(payload)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load(path: Path, configured: Ladder, stream: str, last_seq: int) -> Snapshot | None:
    """The snapshot at `path` if it can stand for a full replay of the stream created at
    `stream`, now at `last_seq`, under `configured`'s settings; else None, with the reason
    logged."""
    try:
        return _load(path, configured, stream, last_seq)
    except FileNotFoundError:
        return None
    except _Stale as why:
        log.warning("ladder snapshot %s not used, replaying the whole stream: %s", path, why)
        return None


class _Stale(Exception):
    pass


def _load(path: Path, configured: Ladder, stream: str, last_seq: int) -> Snapshot:
    try:
        with open(path, "rb") as f:
            header = json.loads(f.readline())
            if header.get("format") != FORMAT:
                raise _Stale(f"format {header.get('format')!r}, this build writes {FORMAT}")
            schema = f"{SCHEMA_VERSION}.{SCHEMA_MINOR}"
            if header.get("schema") != schema:
                raise _Stale(f"schema {header.get('schema')!r}, this build's is {schema}")
            ladder, specs = pickle.load(f)  # our own file, from a private folder: the docstring
        seq, made_from = int(header["seq"]), str(header.get("stream"))
        secret = header.get("secret")
    except (FileNotFoundError, _Stale):
        raise
    except Exception as exc:  # truncated, corrupt, from a build whose classes differ
        raise _Stale(f"unreadable ({type(exc).__name__}: {str(exc)[:200]})") from None
    if made_from != stream or seq > last_seq:
        raise _Stale(f"folded from another event stream (created {made_from})")
    if not isinstance(ladder, Ladder):
        raise _Stale(f"holds a {type(ladder).__name__}, not a ladder")
    changed = [f for f in CONFIG_FIELDS if getattr(ladder, f) != getattr(configured, f)]
    if secret != _digest(configured.seed_secret):
        changed.append("seed secret")
    if changed:
        raise _Stale(f"the ladder's {', '.join(changed)} changed since")
    ladder.seed_secret = configured.seed_secret
    return Snapshot(ladder, seq, frozenset(specs), stream)


def _digest(secret: bytes) -> str:
    return hashlib.sha256(b"research-swarm snapshot/" + secret).hexdigest()
