"""What `swarm status` and the live line of `swarm start` show."""

from __future__ import annotations

from dataclasses import dataclass, field

from nats.aio.client import Client
from nats.js.errors import NotFoundError

from bus.subjects import EVENTS_STREAM, JOBS_STREAM, LEDGER_CONSUMER
from swarm.sql_client import Answer, LedgerUnavailable, ask_ledger

# Whole tables `swarm status` counts, and the researchers as the live view lists them (the
# agents table also holds trainers, the ladder and people).
TABLES = ("ideas", "run_specs", "runs", "decisions", "champions", "traces", "dead_letters")
COUNTS = {
    "researchers": "SELECT count(*) FROM agents WHERE role = 'researcher'",
    **{table: f"SELECT count(*) FROM {table}" for table in TABLES},
    # runs with no result: running, on the work queue (jobs_queued), or a capped tier's waiting
    # their turn in the ladder (scale_ladder/dispatch.py), which no queue shows
    "unfinished": "SELECT count(*) FROM unfinished_runs",
}
COUNTED = tuple(COUNTS)
COUNTS_SQL = "SELECT " + ", ".join(f"({sql}) AS {name}" for name, sql in COUNTS.items())


@dataclass(frozen=True, slots=True)
class Status:
    events_in_stream: int = 0
    ledger_lag: int = 0  # events published but not yet committed by the ledger
    jobs_queued: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    ledger_error: str = ""

    def line(self) -> str:
        if self.ledger_error:
            tables = f"ledger: {self.ledger_error}"
        else:
            tables = " ".join(f"{name}={n}" for name, n in self.counts.items())
        return (
            f"events={self.events_in_stream} ledger_lag={self.ledger_lag} "
            f"jobs_queued={self.jobs_queued} | {tables}"
        )


def counts_from(answer: Answer) -> dict[str, int]:
    row = answer.table.to_pylist()[0]
    return {name: int(row[name]) for name in COUNTED}


async def live_status(nc: Client, timeout_s: float = 5.0) -> Status:
    js = nc.jetstream()
    try:
        events = (await js.stream_info(EVENTS_STREAM)).state.messages
        jobs = (await js.stream_info(JOBS_STREAM)).state.messages
    except NotFoundError:
        events = jobs = 0
    try:
        consumer = await js.consumer_info(EVENTS_STREAM, LEDGER_CONSUMER)
        lag = (consumer.num_pending or 0) + (consumer.num_ack_pending or 0)
    except NotFoundError:
        lag = events
    try:
        counts = counts_from(await ask_ledger(nc, COUNTS_SQL, timeout_s))
    except LedgerUnavailable as exc:
        return Status(events, lag, jobs, ledger_error=str(exc))
    return Status(events, lag, jobs, counts)
