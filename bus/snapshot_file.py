"""A process's folded state on disk, so a restart replays only the events after it.

The ladder and every agents host fold the event stream into their state; rebuilding it replays
every event since the swarm began, a cost that grows with the swarm's age. Each writes its state
to one file in the workspace's run folder from time to time and when it stops; at start it loads
the file and replays only the events after the one it was folded up to (its checkpoint). What
the state is, and what else must match, is the owner's (scale_ladder/snapshot.py,
agents/host_snapshot.py); the file and the checks every snapshot needs are here:

- a header line (JSON), checked before anything is unpickled: the owner's format, the message
  schema version, a digest of the state's classes (their fields: a build whose state differs
  cannot use it), the checkpoint's stream sequence and event (kind and id), and when the event
  stream was created (another stream is another history), plus the owner's own keys;
- the pickled state.

It is a cache, never the record: the stream and the ledger are. So anything doubtful means a
full replay, with the reason logged: no file, one not ours (another owner, readable or writable
by others, a link), an unreadable or truncated one, another format, schema or build, or a stream
that no longer holds the checkpoint. The file is written under a fresh temporary name (O_EXCL,
mode 0600) and renamed, so a kill leaves the old snapshot or the new one. Pickle, because the
states are many nested maps of messages and a snapshot is read only by the process that wrote
it, from its own private file (a pickle someone else could write would run as its reader); it
never travels over the bus.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import hashlib
import json
import os
import pickle
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from nats.js import JetStreamContext

from bus.codec import decode
from bus.messages import MESSAGE_TYPES, SCHEMA_MINOR, SCHEMA_VERSION, event_key
from bus.subjects import EVENTS_STREAM

SCHEMA = f"{SCHEMA_VERSION}.{SCHEMA_MINOR}"
# A snapshot is written in the event loop and holds it meanwhile (3 s for a 1M-event ladder):
# the next one waits at least this many times as long as the last one took, so writing them
# never takes more than a tenth of a process's time, whatever the interval.
COST_SHARE = 10.0


class Stale(Exception):
    """Why a snapshot cannot stand for a full replay."""


@dataclasses.dataclass(frozen=True, slots=True)
class Checkpoint:
    seq: int  # the last stream sequence folded in with a known event
    event: str  # that event, as "<kind>-<event id>" (bus.messages.event_key)
    stream: str  # when the event stream it was folded from was created


def save(path: Path, header: dict[str, Any], state: object) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # O_EXCL, 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(json.dumps(header).encode() + b"\n")
            with _collector_paused():
                pickle.dump(state, f, protocol=pickle.HIGHEST_PROTOCOL)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def header_of(format_: int, classes: Iterable[type], checkpoint: Checkpoint) -> dict[str, Any]:
    """The keys every snapshot's header has."""
    return {
        "format": format_,
        "schema": SCHEMA,
        "classes": classes_digest(classes),
        "seq": checkpoint.seq,
        "event": checkpoint.event,
        "stream": checkpoint.stream,
    }


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


def check_header(
    header: dict[str, Any], format_: int, classes: Iterable[type], stream: str, last_seq: int
) -> Checkpoint:
    """The header's checkpoint, if it was written by this build from the stream created at
    `stream`, now at `last_seq`; else Stale saying why (the caller checks that the stream still
    holds the checkpoint's event: `event_at`)."""
    if header.get("format") != format_:
        raise Stale(f"format {header.get('format')!r}, this build writes {format_}")
    if header.get("schema") != SCHEMA or header.get("classes") != classes_digest(classes):
        raise Stale(f"written by another build (schema {header.get('schema')!r}, this is {SCHEMA})")
    seq = header.get("seq")
    in_range = isinstance(seq, int) and not isinstance(seq, bool) and 0 < seq <= last_seq
    if header.get("stream") != stream or not in_range:
        raise Stale(f"folded from another event stream (created {header.get('stream')!r})")
    return Checkpoint(int(seq), str(header.get("event")), stream)  # type: ignore[arg-type]


def load_state(path: Path) -> Any:
    """The pickled state after the header: call only once the header was checked."""
    try:
        with _open_own(path) as f:
            f.readline()
            with _collector_paused():
                state = pickle.load(f)  # our own private file (_open_own): see the docstring
                # Long-lived from here on: left young, the next collections would walk all of
                # them, again and again (2.5 s of a 1M-event ladder's first second of folds).
                gc.freeze()
                return state
    except Stale:
        raise
    except Exception as exc:  # truncated, corrupt
        raise Stale(f"unreadable ({type(exc).__name__}: {str(exc)[:200]})") from None


async def stream_created(js: JetStreamContext) -> tuple[str, int]:
    """When the event stream was created (its identity across restarts), and its last seq."""
    info = await js.stream_info(EVENTS_STREAM)
    return str(info.created), info.state.last_seq


async def checkpoint_stands(js: JetStreamContext, checkpoint: Checkpoint, max_bytes: int) -> bool:
    """The stream holds the checkpoint's event at its sequence, or let it go: it starts after
    it (retention purged it, and the stream's identity stands for it then). Another event
    there is another history."""
    first = (await js.stream_info(EVENTS_STREAM)).state.first_seq
    held = checkpoint.seq >= first
    return not held or await event_at(js, checkpoint.seq, max_bytes) == checkpoint.event


async def event_at(js: JetStreamContext, seq: int, max_bytes: int) -> str:
    """The kind and id of the event at `seq` in the stream; "" if it holds none there."""
    try:
        raw = await js.get_msg(EVENTS_STREAM, seq)
        message = decode(raw.data or b"", max_bytes)
    except Exception:  # gone, or unreadable: not the snapshot's event
        return ""
    return event_key(message.KIND, message.event_id)


def classes_digest(classes: Iterable[type]) -> str:
    every = (*classes, *MESSAGE_TYPES.values())
    names = [(c.__qualname__, _fields(c)) for c in every]
    return hashlib.sha256(repr(names).encode()).hexdigest()[:16]


def _fields(cls: type) -> list[str]:
    if dataclasses.is_dataclass(cls):
        return [f.name for f in dataclasses.fields(cls)]
    # A plain class sets its fields in __init__: the names its code uses stand for them (any
    # change there counts as another build, which only ever costs a full replay).
    init = vars(cls).get("__init__")
    return sorted(init.__code__.co_names) if init is not None else []


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused: loading a state of millions of small objects
    set it off again and again, and it took 3/4 of the load's time (0.72 s of a 100k-event
    ladder's snapshot with it, 0.19 s without)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


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
