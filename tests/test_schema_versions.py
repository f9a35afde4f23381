"""Upgrades keep the workspace: messages carry their schema version (major.minor), a newer
minor version's fields are kept, never a crash, and the ledger migrates its file in place.

The fixture `fixtures/workspace-72f6376.tgz` is a workspace written by the release before
schema versions (commit 72f6376), made with that commit's code:
`swarm --workspace W start --target synthetic --agents 2 --max-experiments 16`, then
`tar czf` of W without its logs, reports, snapshots, lock and server log.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import tarfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import duckdb
from nats.aio.client import Client

from bus.codec import decode, decode_versioned, encode
from bus.messages import SCHEMA_MINOR, SCHEMA_VERSION, Idea, Message
from bus.replay import replay_events
from ledger.duckdb_store import LedgerStore
from ledger.service import LedgerService
from swarm.sql_client import ask_ledger
from tests.conftest import make_idea, make_result, run_swarm, wait_for_async

FIXTURE = Path(__file__).parent / "fixtures" / "workspace-72f6376.tgz"


def as_newer(message: Message, **fields: Any) -> bytes:
    """`message` as a host one minor version ahead sends it: with fields this build lacks."""
    envelope = json.loads(encode(message))
    envelope["minor"] = SCHEMA_MINOR + 1
    envelope["data"].update(fields)
    return json.dumps(envelope).encode()


def test_a_newer_minor_versions_fields_are_set_aside_and_the_message_read() -> None:
    result = make_result(3)
    decoded = decode_versioned(as_newer(result, energy_joules=12.5, notes={"k": [1, 2]}))
    assert decoded.message == result
    assert decoded.minor == SCHEMA_MINOR + 1
    assert decoded.unknown == {"energy_joules": 12.5, "notes": {"k": [1, 2]}}
    assert decode(as_newer(result, energy_joules=12.5)) == result


def test_an_event_written_before_minor_versions_reads_as_minor_0() -> None:
    """The previous release wrote `{"kind", "v": 1, "data"}`: its events stay readable."""
    idea = make_idea(1)
    envelope = json.loads(encode(idea))
    del envelope["minor"]
    decoded = decode_versioned(json.dumps(envelope).encode())
    assert decoded.minor == 0 and decoded.message == idea and not decoded.unknown
    assert envelope["v"] == SCHEMA_VERSION


async def test_a_newer_hosts_events_are_stored_with_its_fields_and_replayed(
    nc: Client, ledger: LedgerService
) -> None:
    """A mixed-version swarm: one host sends a field the others do not know. The ledger stores
    the event and keeps the field (newer_fields); a replay (the ladder's, the agents') reads it."""
    js = nc.jetstream()
    idea = make_idea(7)
    await js.publish(
        "swarm.events.idea",
        as_newer(idea, energy_joules=3.0),
        headers={"Nats-Msg-Id": f"idea-{idea.event_id}"},
    )

    async def stored() -> bool:
        answer = await ask_ledger(nc, "select count(*) as n from newer_fields", 5)
        return bool(answer.table.column("n")[0].as_py())

    await wait_for_async(stored, 20)
    answer = await ask_ledger(
        nc, "select table_name, row_key, schema_minor, fields from newer_fields", 5
    )
    (row,) = answer.table.to_pylist()
    assert row["table_name"] == "ideas" and row["row_key"] == idea.idea_id
    assert row["schema_minor"] == SCHEMA_MINOR + 1
    assert json.loads(row["fields"]) == {"energy_joules": 3.0}
    ideas = await ask_ledger(nc, "select idea_id from ideas", 5)
    assert ideas.table.column("idea_id").to_pylist() == [idea.idea_id]
    dead = await ask_ledger(nc, "select count(*) as n from dead_letters", 5)
    assert dead.table.column("n")[0].as_py() == 0

    seen: list[Message | None] = []

    async def handle(message: Message | None, seq: int) -> None:
        seen.append(message)

    replay = await replay_events(js, frozenset({"idea"}), 1 << 20, handle)
    for _ in range(100):
        if seen:
            break
        await asyncio.sleep(0.05)
    await replay.subscription.unsubscribe()
    assert seen == [idea] and isinstance(seen[0], Idea)


def test_a_workspace_of_the_previous_release_resumes(tmp_path: Path) -> None:
    """Its ledger gains the tables and columns added since, says so in schema_migrations, keeps
    every row, and the swarm goes on where it stopped (its experiment count, its seeds)."""
    workspace = tmp_path / "workspace"
    with tarfile.open(FIXTURE) as archive:
        archive.extractall(workspace, filter="data")
    ledger = workspace / "ledger.duckdb"
    with duckdb.connect(str(ledger), read_only=True) as old:
        old_ideas = {r[0] for r in old.execute("select idea_id from ideas").fetchall()}
        (old_runs,) = old.execute("select count(*) from runs").fetchone() or (0,)
    assert old_runs == 16 and old_ideas
    audit = run_swarm(workspace, "audit", timeout=120)  # before any start has migrated it
    assert audit.returncode == 0 and "replay differences 0" in audit.stdout, audit.stderr[-2000:]

    done = run_swarm(
        workspace,
        "start", "--target", "synthetic", "--agents", "2", "--max-experiments", "24",
        timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    with duckdb.connect(str(ledger), read_only=True) as new:
        (runs,) = new.execute("select count(*) from runs").fetchone() or (0,)
        ideas = {r[0] for r in new.execute("select idea_id from ideas").fetchall()}
        applied = {r[0] for r in new.execute("select name from schema_migrations").fetchall()}
        dead = new.execute("select count(*) from dead_letters").fetchone()
    assert runs == 24  # 16 before, 8 more: the limit counts the workspace's experiments
    assert old_ideas <= ideas
    assert {"0001-newer-fields", "add column run_specs.corpus_hash"} <= applied
    assert dead == (0,)


def test_a_ledger_without_a_newer_field_gains_its_column_and_says_so(tmp_path: Path) -> None:
    """An older release's file lacks the columns of fields added since: opening it adds them
    (empty for its rows, which are kept) and records each in schema_migrations, once."""
    path = tmp_path / "ledger.duckdb"
    store = LedgerStore(path)
    store.write_batch([make_idea(1)])
    store.con.execute("ALTER TABLE ideas DROP COLUMN entry_tier")  # as the file was before it
    store.close()
    store = LedgerStore(path)
    store.write_batch([make_idea(2)])
    rows = store.con.execute("select idea_id, entry_tier from ideas order by idea_id").fetchall()
    names = [r[0] for r in store.con.execute("select name from schema_migrations").fetchall()]
    store.close()
    assert [r[0] for r in rows] == [make_idea(1).idea_id, make_idea(2).idea_id]
    assert rows[0][1] is None and rows[1][1] == 0
    assert names.count("add column ideas.entry_tier") == 1
    assert LedgerStore(path).con.execute("select count(*) from schema_migrations").fetchone() == (
        len(names),
    )


def test_a_copy_under_a_stored_events_id_adds_no_fields_to_it(tmp_path: Path) -> None:
    """Newer fields go with the row they came with: a later copy of an event (a redelivery,
    or another sender's under the same id) attaches nothing to the stored row."""
    store = LedgerStore(tmp_path / "ledger.duckdb")
    victim = make_idea(1)
    store.write_batch([victim])
    forged = dataclasses.replace(victim, author="mallory")
    store.write_batch([forged], newer={("idea", victim.event_id): (9, {"retracted": True})})
    first = make_idea(2)
    store.write_batch(
        [first, dataclasses.replace(first, author="mallory")],
        newer={("idea", first.event_id): (9, {"energy_joules": 1.0})},
    )
    rows = store.con.execute("select row_key, fields from newer_fields").fetchall()
    authors = dict(store.con.execute("select idea_id, author from ideas").fetchall())
    store.close()
    assert rows == [(first.idea_id, '{"energy_joules": 1.0}')]
    assert authors[victim.idea_id] == victim.author


async def test_of_two_copies_in_one_batch_the_first_ones_fields_are_kept(
    nc: Client, ledger: LedgerService
) -> None:
    """The ledger stores the first copy of an event in a batch, so it keeps that copy's newer
    fields too, not a later copy's (another sender's, under the same id)."""
    idea = make_idea(9)
    newer: dict[tuple[str, str], tuple[int, dict[str, Any]]] = {}
    for seq, fields in ((1, {"energy_joules": 1.0}), (2, {"owner": "mallory"})):
        copy = SimpleNamespace(subject="swarm.events.idea", data=as_newer(idea, **fields))
        ledger._decode_or_dead_letter(copy, seq, newer)  # type: ignore[arg-type]
    assert newer == {("idea", idea.event_id): (SCHEMA_MINOR + 1, {"energy_joules": 1.0})}
