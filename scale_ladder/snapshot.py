"""The ladder's folded state on disk, so a restart replays only the events after it.

A ladder's state is a fold over the event stream (ladder_state.py); rebuilding it replays every
event since the swarm began, a cost that grows with the swarm's age. The ladder process writes
its state to one file in the workspace's run folder from time to time and when it stops; at
start it loads the file and replays only the events after the one it was folded up to (its
checkpoint). The file holds:

- a header line (JSON): the snapshot format, the message schema version, a digest of the state's
  classes (their fields: a build whose state differs cannot use it), the checkpoint's stream
  sequence and event (kind and id: the stream must still hold that event there, or it is another
  history, or one that lost its tail), when the event stream was created, and a digest of the
  seed secret (the secret itself stays in its own file);
- the pickled state, less the secret, and the service's set of the RunSpecs in the stream.

It is a cache, never the record: the stream and the ledger are. So anything doubtful means a
full replay, with the reason logged: no file, one not ours (another owner, readable or writable
by others, a link), an unreadable or truncated one, another format, schema or build, a ladder
configured differently since (tiers, recipe, target, seed secret: the state was folded under
those), or a stream that no longer holds the checkpoint. The header is checked before anything
is unpickled. The file is written under a fresh temporary name (O_EXCL, mode 0600) and renamed,
so a kill leaves the old snapshot or the new one. Pickle, because the state is many nested maps
of messages and a snapshot is read only by the process that wrote it, from its own file (a
pickle someone else could write would run as the ladder); it never travels over the bus.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import pickle
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bus.messages import MESSAGE_TYPES, SCHEMA_MINOR, SCHEMA_VERSION
from scale_ladder.ladder import Ladder
from scale_ladder.ladder_state import IdeaState
from scale_ladder.near_duplicates import PatchChange
from scale_ladder.noise_pool import NoisePool
from scale_ladder.rules import Noise, PromotionRule
from scale_ladder.spot_checks import Checks
from scale_ladder.tiers import Tier

log = logging.getLogger(__name__)

FORMAT = 2
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
# The classes a snapshot pickles: one from a build whose classes have other fields would load
# and fail later (a field missing from an old object).
STATE_CLASSES = (Ladder, IdeaState, Tier, PromotionRule, Noise, NoisePool, Checks, PatchChange)


@dataclass(frozen=True, slots=True)
class Snapshot:
    ladder: Ladder
    seq: int  # the checkpoint: the last stream sequence folded in with a known event
    event: str  # the checkpoint's event, as "<kind>-<event id>"
    specs: frozenset[str]  # run ids of the RunSpecs in the stream (the experiment limit's count)
    stream: str  # when the event stream it was folded from was created


class Stale(Exception):
    """Why a snapshot cannot stand for a full replay."""


def save(path: Path, snapshot: Snapshot) -> None:
    header = {
        "format": FORMAT,
        "schema": f"{SCHEMA_VERSION}.{SCHEMA_MINOR}",
        "classes": _classes_digest(),
        "seq": snapshot.seq,
        "event": snapshot.event,
        "stream": snapshot.stream,
        "secret": _digest(snapshot.ladder.seed_secret),
    }
    state = dataclasses.replace(snapshot.ladder, seed_secret=b"")
    payload = pickle.dumps((state, snapshot.specs), protocol=pickle.HIGHEST_PROTOCOL)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # O_EXCL, 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(json.dumps(header).encode() + b"\n")
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_header(path: Path) -> dict[str, Any] | None:
    """The snapshot's header, if there is a snapshot and it is ours; None if there is none.
    Raises Stale for one that is not ours or not readable."""
    try:
        with _open_own(path) as f:
            header = json.loads(f.readline())
    except FileNotFoundError:
        return None
    except Stale:
        raise
    except Exception as exc:  # truncated, not JSON
        raise Stale(f"unreadable header ({type(exc).__name__}: {str(exc)[:200]})") from None
    if not isinstance(header, dict):
        raise Stale("unreadable header")
    return header


def load(path: Path, configured: Ladder, stream: str, last_seq: int) -> Snapshot:
    """The snapshot at `path`, if it can stand for a full replay of the stream created at
    `stream`, now at `last_seq`, under `configured`'s settings; else Stale saying why (the
    caller checks that the stream still holds its checkpoint)."""
    header = read_header(path)
    if header is None:
        raise FileNotFoundError(path)
    if header.get("format") != FORMAT:
        raise Stale(f"format {header.get('format')!r}, this build writes {FORMAT}")
    schema = f"{SCHEMA_VERSION}.{SCHEMA_MINOR}"
    if header.get("schema") != schema or header.get("classes") != _classes_digest():
        raise Stale(f"written by another build (schema {header.get('schema')!r}, this is {schema})")
    if header.get("stream") != stream or not 0 < _int(header.get("seq")) <= last_seq:
        raise Stale(f"folded from another event stream (created {header.get('stream')!r})")
    if header.get("secret") != _digest(configured.seed_secret):
        raise Stale("the ladder's seed secret changed since")
    try:
        with _open_own(path) as f:
            f.readline()
            ladder, specs = pickle.load(f)  # our own file (_open_own): see the docstring
        if not isinstance(ladder, Ladder):
            raise Stale(f"holds a {type(ladder).__name__}, not a ladder")
        changed = [f for f in CONFIG_FIELDS if getattr(ladder, f) != getattr(configured, f)]
    except Stale:
        raise
    except Exception as exc:  # truncated, corrupt
        raise Stale(f"unreadable ({type(exc).__name__}: {str(exc)[:200]})") from None
    if changed:
        raise Stale(f"the ladder's {', '.join(changed)} changed since")
    ladder.seed_secret = configured.seed_secret
    return Snapshot(ladder, _int(header["seq"]), str(header.get("event")), frozenset(specs), stream)


def _open_own(path: Path) -> Any:
    """The file, opened without following a link, if this user owns it and no one else may
    read or write it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise Stale(f"cannot be opened as a plain file ({exc.strerror})") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
        os.close(fd)
        raise Stale("not a private file of this user (owner, mode or type)")
    return os.fdopen(fd, "rb")


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else -1


def _digest(secret: bytes) -> str:
    return hashlib.sha256(b"research-swarm snapshot/" + secret).hexdigest()


def _classes_digest() -> str:
    classes = (*STATE_CLASSES, *MESSAGE_TYPES.values())
    names = [(c.__qualname__, [f.name for f in dataclasses.fields(c)]) for c in classes]
    return hashlib.sha256(repr(names).encode()).hexdigest()[:16]
