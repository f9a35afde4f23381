"""The event stream's retention: the ledger purges old events from SWARM_EVENTS once it holds them.

Without a limit the stream keeps every event since the swarm began, on disk and for every
reader that replays it. With `ledger.events_keep_days` (or `events_keep_gb`) set, the ledger
purges, every `PURGE_INTERVAL_S`, the events older than that (or the oldest beyond that size),
but never one it has not stored: only events up to its consumer's ack floor, below which every
event is committed to DuckDB (the ledger acks after its commit). A JetStream `max_age` on the
stream would drop events whatever the ledger had stored (a ledger down for longer than the limit
would lose them for good); this purge cannot.

Readers that need an event the stream no longer holds (a restart without a usable snapshot, a
new agents host) read it from the ledger instead (ledger/remote_events.py).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from datetime import datetime

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from bus.subjects import EVENTS_STREAM, EVENTS_SUBJECTS, LEDGER_CONSUMER

log = logging.getLogger(__name__)

PURGE_INTERVAL_S = 60.0


@dataclass(frozen=True, slots=True)
class Retention:
    keep_s: float = 0.0  # events younger than this are kept; 0: no age limit
    keep_bytes: int = 0  # the stream is cut to about this size; 0: no size limit

    @property
    def on(self) -> bool:
        return self.keep_s > 0 or self.keep_bytes > 0


async def purge_once(js: JetStreamContext, retention: Retention, now: float) -> int:
    """Purge what `retention` lets go of and the ledger holds; how many events went."""
    if not retention.on:
        return 0
    state = (await js.stream_info(EVENTS_STREAM)).state
    first, size, count = state.first_seq, state.bytes, state.messages
    stored = (await js.consumer_info(EVENTS_STREAM, LEDGER_CONSUMER)).ack_floor.stream_seq
    keep_from = first
    if retention.keep_s > 0:
        keep_from = max(keep_from, await _first_since(js, first, stored, now - retention.keep_s))
    if retention.keep_bytes > 0 and size > retention.keep_bytes and count:
        excess = math.ceil((size - retention.keep_bytes) / (size / count))  # events, about
        keep_from = max(keep_from, first + excess)
    keep_from = min(keep_from, stored + 1)  # never one the ledger has not stored
    if keep_from <= first:
        return 0
    await js.purge_stream(EVENTS_STREAM, seq=keep_from)  # every event below keep_from
    log.info("purged events %d..%d from the stream (the ledger holds them)", first, keep_from - 1)
    return int(keep_from - first)


async def _first_since(js: JetStreamContext, low: int, high: int, cutoff: float) -> int:
    """The first sequence in [low, high] of an event the server stored at or after `cutoff`
    (epoch seconds); high + 1 if every one is older. A binary search by the server's own
    timestamps (senders' clocks are not trusted); deleted events are stepped over."""
    lo, hi = low, high + 1
    while lo < hi:
        mid = (lo + hi) // 2
        at = await _time_at_or_after(js, mid)
        if at is None or at[0] > high or at[1] >= cutoff:  # the first such is at mid or before
            hi = mid
        else:
            lo = at[0] + 1
    return lo


async def _time_at_or_after(js: JetStreamContext, seq: int) -> tuple[int, float] | None:
    try:
        msg = await js.get_msg(EVENTS_STREAM, seq, subject=EVENTS_SUBJECTS, next=True)
    except NotFoundError:
        return None
    return msg.seq or seq, stored_at(msg.time or "")


def stored_at(stamp: str | datetime) -> float:
    """A JetStream timestamp (RFC 3339, nanoseconds) in epoch seconds."""
    if isinstance(stamp, datetime):
        return stamp.timestamp()
    head, _, rest = stamp.partition(".")
    fraction = rest.rstrip("Z")[:6]
    text = f"{head}.{fraction or '0'}+00:00" if not head.endswith("Z") else head[:-1] + "+00:00"
    return datetime.fromisoformat(text).timestamp()
