"""Who may do what on the embedded bus: one NATS user per role, each with allow lists.

Experiments run code an agent wrote, and hosts on other machines join the bus, so no process
gets more than its job needs. What each role must never do:
- a trainer takes jobs and publishes results; it cannot propose ideas, decide, or answer SQL;
- a researcher publishes ideas, traces and LLM calls; it cannot publish results or decisions,
  take jobs, or answer SQL;
- only the ledger answers SQL (subscribes to `swarm.sql`) and receives the ledger's deliveries;
- only the ladder makes jobs, decisions and champion versions (and writes the champion and
  recipe buckets);
- people (`cli`) ask the ledger and the ladder, and read stream state; they publish no events;
- the supervisor (`swarm start`) creates the streams and the buckets and asks for status.

Every role subscribes to `_INBOX.>`: JetStream API replies, pull deliveries and the pushes of
an ordered consumer arrive there. Subjects were found by running a real swarm under these users
and reading nats-server's "Permissions Violation" lines (tests/test_bus_permissions.py).
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass

from bus.champion_store import BUCKET
from bus.subjects import (
    EVENTS_STREAM,
    JOBS_STREAM,
    JOBS_SUBJECTS,
    LADDER_CONTROL_SUBJECT,
    LEDGER_CONSUMER,
    LEDGER_DELIVER_SUBJECT,
    PREFIX,
    SQL_SUBJECT,
)
from recipes.store import BUCKET as RECIPES_BUCKET


class Role(enum.StrEnum):
    SUPERVISOR = "supervisor"
    LEDGER = "ledger"
    LADDER = "ladder"
    TRAINER = "trainer"
    RESEARCHER = "researcher"
    CLI = "cli"


@dataclass(frozen=True, slots=True)
class Permissions:
    publish: tuple[str, ...]
    subscribe: tuple[str, ...]
    responses: bool = False  # may answer a request it received (once, on its reply subject)


API = "$JS.API"
INBOX = "_INBOX.>"
KV_STREAM = f"KV_{BUCKET}"
RECIPES_STREAM = f"KV_{RECIPES_BUCKET}"


def events(*kinds: str) -> tuple[str, ...]:
    return tuple(f"{PREFIX}.events.{kind}" for kind in kinds)


# Reading the whole event stream from the start (bus/replay.py): an ordered consumer, which is
# ephemeral (created without a name, re-created the same way after a gap) and flow-controlled.
REPLAY = (
    f"{API}.STREAM.INFO.{EVENTS_STREAM}",
    f"{API}.CONSUMER.CREATE.{EVENTS_STREAM}",
    f"$JS.FC.{EVENTS_STREAM}.>",
)
# Reading champion versions from the key-value bucket (made without direct gets: a get is a
# JetStream API request).
CHAMPION_READ = (
    f"{API}.STREAM.INFO.{KV_STREAM}",
    f"{API}.STREAM.MSG.GET.{KV_STREAM}",
)
# Reading recipes by their content address (recipes/store.py), as a trainer does for each job.
RECIPE_READ = (
    f"{API}.STREAM.INFO.{RECIPES_STREAM}",
    f"{API}.STREAM.MSG.GET.{RECIPES_STREAM}",
)
# Reading which jobs are on the work queue, by message (a restarted ladder puts back lost ones:
# scale_ladder/service.py), and how many a tier's trainers hold (a capped tier's jobs are sent
# as its queue has room: scale_ladder/work_queue.py).
JOBS_READ = (
    f"{API}.STREAM.INFO.{JOBS_STREAM}",
    f"{API}.STREAM.MSG.GET.{JOBS_STREAM}",
    f"{API}.CONSUMER.INFO.{JOBS_STREAM}.*",
)
# Stream and consumer state, read-only (status lines, the live view).
STATE_READ = (
    f"{API}.INFO",
    f"{API}.STREAM.INFO.*",
    f"{API}.CONSUMER.INFO.*.*",
    f"{API}.CONSUMER.LIST.*",
)

PERMISSIONS: dict[Role, Permissions] = {
    Role.SUPERVISOR: Permissions(
        publish=(
            *STATE_READ,
            f"{API}.STREAM.CREATE.*",
            f"{API}.STREAM.UPDATE.*",
            SQL_SUBJECT,
        ),
        subscribe=(INBOX,),
    ),
    Role.LEDGER: Permissions(
        publish=(
            f"{API}.CONSUMER.INFO.{EVENTS_STREAM}.{LEDGER_CONSUMER}",
            f"{API}.CONSUMER.DURABLE.CREATE.{EVENTS_STREAM}.{LEDGER_CONSUMER}",
            f"$JS.ACK.{EVENTS_STREAM}.{LEDGER_CONSUMER}.>",
            # retention: the stream's state, events' times, the purge (ledger/retention.py)
            f"{API}.STREAM.INFO.{EVENTS_STREAM}",
            f"{API}.STREAM.MSG.GET.{EVENTS_STREAM}",
            f"{API}.STREAM.PURGE.{EVENTS_STREAM}",
        ),
        subscribe=(SQL_SUBJECT, LEDGER_DELIVER_SUBJECT, INBOX),
        responses=True,
    ),
    Role.LADDER: Permissions(
        publish=(
            JOBS_SUBJECTS,
            *events("run_spec", "decision", "champion_change", "agent_event"),
            f"$KV.{BUCKET}.>",
            f"$KV.{RECIPES_BUCKET}.>",  # the recipe of every RunSpec, before its job
            *RECIPE_READ,
            *REPLAY,
            # the event its snapshot was folded up to (scale_ladder/snapshot.py)
            f"{API}.STREAM.MSG.GET.{EVENTS_STREAM}",
            # events the stream no longer holds, from the ledger (ledger/remote_events.py)
            SQL_SUBJECT,
            *CHAMPION_READ,
            *JOBS_READ,
        ),
        subscribe=(LADDER_CONTROL_SUBJECT, INBOX),
        responses=True,
    ),
    Role.TRAINER: Permissions(
        publish=(
            *events("run_result", "dead_letter", "agent_event"),
            f"{API}.CONSUMER.INFO.{JOBS_STREAM}.*",
            f"{API}.CONSUMER.DURABLE.CREATE.{JOBS_STREAM}.*",
            f"{API}.CONSUMER.MSG.NEXT.{JOBS_STREAM}.*",
            f"$JS.ACK.{JOBS_STREAM}.>",
            *CHAMPION_READ,
            *RECIPE_READ,
        ),
        subscribe=(INBOX,),
    ),
    Role.RESEARCHER: Permissions(
        publish=(
            *events("idea", "trace", "llm_call", "prompt_prefix", "strategy", "agent_event"),
            *REPLAY,
            # the event its snapshot was folded up to (agents/host_snapshot.py)
            f"{API}.STREAM.MSG.GET.{EVENTS_STREAM}",
            # events the stream no longer holds, from the ledger (ledger/remote_events.py)
            SQL_SUBJECT,
        ),
        subscribe=(INBOX,),
    ),
    Role.CLI: Permissions(
        publish=(*STATE_READ, SQL_SUBJECT, LADDER_CONTROL_SUBJECT),
        subscribe=(INBOX,),
    ),
}


def authorization_block(passwords: dict[Role, str]) -> str:
    """The nats-server `authorization` section: one user per role, named after it."""
    users = []
    for role, password in passwords.items():
        p = PERMISSIONS[role]
        permissions = {
            "publish": {"allow": list(p.publish)},
            "subscribe": {"allow": list(p.subscribe)},
            **({"allow_responses": True} if p.responses else {}),
        }
        # JSON is valid NATS config, and quoting keeps `$JS...` from reading as a variable.
        user = {"user": role.value, "password": password, "permissions": permissions}
        users.append(json.dumps(user))
    return "authorization {\n  users = [\n    " + ",\n    ".join(users) + "\n  ]\n}"
