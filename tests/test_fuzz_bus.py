"""Fuzzing every subject the swarm listens on, against a real running swarm.

Over 10,000 malformed messages, made by a seeded generator (`tests.fuzz_messages`,
`tests.fuzz_requests`; a failure replays exactly), go to the event stream (every message kind, and
kinds nobody knows), the trainers' job queues, the ledger's deliver subject, the SQL endpoint and
the ladder's control subject. Nothing may crash: every process keeps its pid (the supervisor would
hide a crash behind a restart). Every bad stream message becomes exactly one dead letter whose
reason names the problem; every bad request gets an error reply naming it. Afterwards the swarm
still ingests events and answers queries.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import MaxPayloadError
from nats.js.errors import BadRequestError

from agents.bridge import BRIDGED_KINDS
from bus.codec import encode
from bus.messages import (
    MESSAGE_TYPES,
    BudgetKind,
    ChampionChange,
    ChangeKind,
    Idea,
    Message,
    RunSpec,
)
from bus.nats_bus import connect, publish_event
from bus.replay import replay_events
from bus.subjects import (
    LADDER_CONTROL_SUBJECT,
    LEDGER_DELIVER_SUBJECT,
    SQL_SUBJECT,
    event_size_limit,
    job_subject,
)
from ledger.sql_protocol import STATUS
from scale_ladder.service import FOLDED_KINDS
from swarm.config import LadderConfig, SwarmConfig, TargetConfig
from swarm.ladder_process import make_ladder
from swarm.sql_client import ask_ledger
from tests.conftest import RunningSwarm, run_swarm, wait_for_async
from tests.fuzz_messages import MAX_PAYLOAD, Bad, Fuzzer, sample
from tests.fuzz_requests import control_requests, sql_requests
from tests.helpers_process import alive, pids_matching, start_nats_server

SEED = 20260707
TIERS = (0, 1, 2)  # configs/ladder.toml: the tiers the trainer serves
PER_EVENT_SUBJECT = 560  # x 15 event subjects
PER_JOB_SUBJECT = 120  # x 3 tiers (a trainer takes ~100 bad jobs/s, one at a time)
PER_REQUEST_SUBJECT = 600  # SQL, ladder control
TO_DELIVER_SUBJECT = 120  # half of them with forged acks
UNANSWERABLE = 25  # requests of each kind sent without a reply subject, to both subjects
WINDOW = 500  # publishes in flight at once
MAX_REASON_CHARS = 400

CONFIG = f"""
[bus]
max_payload_bytes = {MAX_PAYLOAD}
[ledger]
restart_delay_s = 0.2
[status]
interval_s = 1.0
[target]
kind = "synthetic"
[trainers]
count = 1
device = "cpu"
[agents]
count = 1
"""
TOKEN = "fuzz-token"
# The children `swarm start` runs, by the last word of their command line.
CHILDREN = ("ledger", "ladder", "worker", "--name=local")
UNKNOWN_EVENT_SUBJECTS = (
    "swarm.events.nonsense",
    "swarm.events.IDEA",
    "swarm.events.idea.extra",
    "swarm.events.x.run_result",
)
# Kinds that a replay (ladder, agents bridge) decodes by subject and acts on; see `_safe`.
REPLAYED = FOLDED_KINDS | BRIDGED_KINDS


# --- the swarm, and watching it ---------------------------------------------------------------


@pytest.fixture(scope="module")
def fuzz_swarm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSwarm]:
    """A swarm on a nats-server of the test's own with one shared token (the external-server
    set-up), so the fuzzer may publish on every subject: the embedded server's per-role users
    would refuse most of the garbage before any consumer saw it (tests/test_bus_permissions.py)."""
    root = tmp_path_factory.mktemp("fuzz")
    server, url = start_nats_server(
        f"listen: 127.0.0.1:-1\nmax_payload: {MAX_PAYLOAD}\n"
        f"authorization {{ token: {TOKEN} }}\n"
        f'jetstream {{ store_dir: "{root / "jetstream"}" }}\n',
        root / "nats",
    )
    config = root / "swarm.toml"
    config.write_text(CONFIG.replace("[bus]\n", f'[bus]\nurl = "{url}"\ntoken = "{TOKEN}"\n'))
    swarm = RunningSwarm(root / "ws", config)
    try:
        swarm.wait_ready(60)
        yield swarm
    finally:
        output = swarm.stop()
        server.terminate()
        server.wait(10)
    # The supervisor says so whenever it restarts a child: none may have died.
    assert "exited with code" not in output, output[-3000:]


def process_ids(root: Path) -> dict[str, list[int]]:
    found = {name: pids_matching(str(root), last_arg=name) for name in CHILDREN}
    found["nats-server"] = pids_matching(str(root.parent), "nats-server")  # beside the workspace
    return found


async def publish_stream(nc: Client, bads: list[Bad]) -> tuple[dict[int, Bad], list[BaseException]]:
    """Publish in windows (all sent, then all acks awaited). Returns the stream sequence of each
    message the stream took, and the errors of those the bus refused."""
    js = nc.jetstream()
    taken: dict[int, Bad] = {}
    refusals: list[BaseException] = []
    for start in range(0, len(bads), WINDOW):
        chunk = bads[start : start + WINDOW]
        acks = await asyncio.gather(
            *(js.publish(b.subject, b.raw, timeout=30) for b in chunk), return_exceptions=True
        )
        for bad, ack in zip(chunk, acks, strict=True):
            if isinstance(ack, BaseException):
                assert bad.family == "over_limit", f"{bad.family} on {bad.subject}: {ack!r}"
                assert isinstance(ack, MaxPayloadError | BadRequestError), repr(ack)
                refusals.append(ack)
            else:
                assert bad.family != "over_limit", "the bus took a message over its limit"
                taken[ack.seq] = bad
    return taken, refusals


async def ask_all(nc: Client, subject: str, raws: list[bytes], window: int = 100) -> list[Msg]:
    """Requests in windows; a request left unanswered fails the test (its timeout raises)."""
    replies: list[Msg] = []
    for start in range(0, len(raws), window):
        chunk = raws[start : start + window]
        replies += await asyncio.gather(*(nc.request(subject, raw, timeout=30) for raw in chunk))
    return replies


async def dead_letters(nc: Client, consumer: str) -> list[dict[str, Any]]:
    """Every dead letter a consumer recorded, read in pages that fit a bus message."""
    rows: list[dict[str, Any]] = []
    page = 2000
    while True:
        answer = await ask_ledger(
            nc,
            "select dead_letter_id, subject, left(reason, 300) as reason, "
            "length(reason) as reason_chars, raw_bytes "
            f"from dead_letters where consumer = '{consumer}' "
            f"order by dead_letter_id limit {page} offset {len(rows)}",
            30,
        )
        assert not answer.truncated
        rows += answer.table.to_pylist()
        if answer.table.num_rows < page:
            return rows


async def count(nc: Client, sql: str) -> int:
    return int((await ask_ledger(nc, sql, 30)).table.column(0)[0].as_py())


def check_letters(letters: list[dict[str, Any]], sent: dict[int, Bad], prefix: str) -> list[str]:
    """Exactly one dead letter per message sent (keyed `<prefix><stream seq>`), on its subject,
    of its size, with a reason that names its problem. Returns what is wrong."""
    by_id = {row["dead_letter_id"]: row for row in letters}
    wrong = []
    for seq, bad in sent.items():
        row = by_id.pop(f"{prefix}{seq}", None)
        if row is None:
            wrong.append(f"seq {seq} ({bad.family} on {bad.subject}): no dead letter")
        elif row["subject"] != bad.subject or row["raw_bytes"] != len(bad.raw):
            wrong.append(
                f"seq {seq} ({bad.family}): recorded as {row['subject']}, {row['raw_bytes']} B"
            )
        elif not re.search(bad.reason, row["reason"]):
            wrong.append(f"seq {seq} ({bad.family}): reason {row['reason']!r} !~ {bad.reason!r}")
        elif row["reason_chars"] > MAX_REASON_CHARS:  # a reason quotes, never copies, the input
            wrong.append(f"seq {seq} ({bad.family}): a reason of {row['reason_chars']} chars")
    wrong += [f"unexpected dead letter {key}: {row['reason']!r}" for key, row in by_id.items()]
    return wrong


# --- the tests ------------------------------------------------------------------------------


def stream_fuzz(fuzzer: Fuzzer) -> tuple[list[Bad], list[Bad]]:
    """Bad events for every kind's subject and some nobody knows; bad jobs for every tier."""
    events: list[Bad] = []
    misplaced = "a {other} message on subject {subject}"
    for kind in MESSAGE_TYPES:
        subject = f"swarm.events.{kind}"
        others = _safe(subject, [k for k in MESSAGE_TYPES if k != kind])
        events += fuzzer.stream(subject, kind, PER_EVENT_SUBJECT, others, misplaced)
        events += fuzzer.oversized(subject, kind, event_size_limit(MAX_PAYLOAD))
    for subject in UNKNOWN_EVENT_SUBJECTS:
        kind = fuzzer.rng.choice(sorted(MESSAGE_TYPES))
        others = _safe(subject, list(MESSAGE_TYPES))
        events += fuzzer.stream(subject, kind, PER_EVENT_SUBJECT, others, misplaced)
    jobs: list[Bad] = []
    not_jobs = [k for k in MESSAGE_TYPES if k != "run_spec"]
    for tier in TIERS:
        subject = job_subject(tier)
        jobs += fuzzer.stream(
            subject, "run_spec", PER_JOB_SUBJECT, not_jobs, "expected run_spec, got {other}"
        )
        jobs += fuzzer.oversized(subject, "run_spec")
        elsewhere = dataclasses.replace(fuzzer.valid("run_spec"), tier=tier + 1)  # type: ignore[type-var]
        reason = f"a tier {tier + 1} RunSpec on subject {subject}"
        jobs.append(Bad("wrong_tier", subject, encode(elsewhere), reason))
    return events, jobs


async def fuzz_requests(nc: Client, fuzzer: Fuzzer) -> tuple[int, list[str]]:
    """Bad requests to the SQL endpoint and the ladder: how many were answered, and what is
    wrong with the answers (each must be an error saying why, and short)."""
    sql = sql_requests(fuzzer.rng, PER_REQUEST_SUBJECT)
    control = control_requests(fuzzer.rng, PER_REQUEST_SUBJECT)
    sql_replies = await ask_all(nc, SQL_SUBJECT, [raw for raw, _ in sql])
    control_replies = await ask_all(nc, LADDER_CONTROL_SUBJECT, [raw for raw, _ in control])
    wrong = []
    for (raw, reason), reply in zip(sql, sql_replies, strict=True):
        text = reply.data.decode()
        if (reply.headers or {}).get(STATUS) != "error" or not re.search(reason, text):
            wrong.append(f"SQL {raw[:60]!r}: {text[:200]!r} !~ {reason!r}")
        elif len(reply.data) > 8192 or "ledger error" in text:  # "ledger error": our bug
            wrong.append(f"SQL {raw[:60]!r}: {len(reply.data)} B, {text[:200]!r}")
    for (raw, reason), reply in zip(control, control_replies, strict=True):
        answer = json.loads(reply.data)
        if answer.get("ok") is not False or not re.search(reason, answer.get("error", "")):
            wrong.append(f"control {raw[:60]!r}: {answer!r:.200} !~ {reason!r}")
        elif len(reply.data) > 2048:
            wrong.append(f"control {raw[:60]!r}: a {len(reply.data)} B reply")
    return len(sql_replies) + len(control_replies), wrong


async def fuzz_unanswerable(nc: Client, fuzzer: Fuzzer) -> int:
    """Messages nobody can answer: bad requests without a reply subject, and bytes published
    straight to the ledger's deliver subject, around the stream. Returns how many reach the
    ledger (each must become a dead letter); `$JS.ACK.` replies are forged acks, which
    nats-server drops before any subscriber sees them."""
    unanswerable = sql_requests(fuzzer.rng, UNANSWERABLE)
    unanswerable += control_requests(fuzzer.rng, UNANSWERABLE)
    for raw, _ in unanswerable:
        await nc.publish(SQL_SUBJECT, raw)
        await nc.publish(LADDER_CONTROL_SUBJECT, raw)
    replies = ["", "fuzz.nobody", "$JS.ACK.x", "$JS.ACK.SWARM_EVENTS.ledger.1.2.3.4.5"]
    delivered = 0
    for i in range(TO_DELIVER_SUBJECT):
        reply = replies[i % len(replies)]
        await nc.publish(LEDGER_DELIVER_SUBJECT, fuzzer.rng.randbytes(i), reply=reply)
        delivered += not reply.startswith("$JS.ACK.")
    await nc.flush()
    return delivered


async def test_ten_thousand_malformed_messages_crash_nothing_and_lose_nothing(
    fuzz_swarm: RunningSwarm,
) -> None:
    root = fuzz_swarm.workspace.root
    settings = fuzz_swarm.workspace.read_bus_settings()
    assert settings is not None
    settings = dataclasses.replace(settings, token=TOKEN)  # the workspace keeps no token
    before = process_ids(root)
    assert all(len(pids) == 1 for pids in before.values()), repr(before)
    fuzzer = Fuzzer(SEED)
    events, jobs = stream_fuzz(fuzzer)

    started = time.monotonic()
    nc = await connect(settings, "fuzzer")
    try:
        event_seqs, event_refusals = await publish_stream(nc, events)
        job_seqs, job_refusals = await publish_stream(nc, jobs)
        delivered = await fuzz_unanswerable(nc, fuzzer)
        replies, wrong_replies = await fuzz_requests(nc, fuzzer)
        assert not wrong_replies, "\n".join(wrong_replies[:20])
        published = time.monotonic() - started

        async def all_recorded() -> bool:
            ledger = await count(nc, "select count(*) from dead_letters where consumer='ledger'")
            trainer = await count(nc, "select count(*) from dead_letters where consumer='trainer'")
            return ledger >= len(event_seqs) + delivered and trainer >= len(job_seqs)

        with contextlib.suppress(AssertionError):  # if some are missing, the checks say which
            await wait_for_async(all_recorded, 30, 0.5)
        recorded = time.monotonic() - started
        ledger_letters = await dead_letters(nc, "ledger")
        trainer_letters = await dead_letters(nc, "trainer")
        around = [r for r in ledger_letters if r["subject"] == LEDGER_DELIVER_SUBJECT]
        assert len(around) == delivered
        assert all("not a JetStream delivery" in r["reason"] for r in around)
        through = [r for r in ledger_letters if r["subject"] != LEDGER_DELIVER_SUBJECT]
        wrong = check_letters(through, event_seqs, "dl-ledger-seq")
        wrong += check_letters(trainer_letters, job_seqs, "dl-trainer-job")
        assert not wrong, f"{len(wrong)} wrong:\n" + "\n".join(wrong[:20])

        after = process_ids(root)
        assert after == before, f"a process was restarted: {before} -> {after}"
        assert all(alive(pid) for pids in after.values() for pid in pids)
        await still_works(nc, root)
    finally:
        await nc.close()

    unanswerable = 4 * UNANSWERABLE + TO_DELIVER_SUBJECT
    sent = len(events) + len(jobs) + 2 * PER_REQUEST_SUBJECT + unanswerable
    letters = len(ledger_letters) + len(trainer_letters)
    refused = len(event_refusals) + len(job_refusals)
    dropped = TO_DELIVER_SUBJECT - delivered
    assert sent >= 10_000
    assert letters + replies + refused + dropped + 4 * UNANSWERABLE == sent
    print(
        f"\nfuzz: sent={sent} dead_letters={letters} error_replies={replies} "
        f"refused_by_bus={refused} dropped_by_server={dropped} unanswered={4 * UNANSWERABLE} "
        f"crashes=0 restarts=0 | published in {published:.1f}s, all recorded in {recorded:.1f}s"
    )


def _safe(subject: str, kinds: list[str]) -> list[str]:
    """The kinds that may be sent whole on `subject` without a replay acting on them: a replay
    (the ladder, the agents' bridge) decodes by the subject's last word and does not check the
    message's kind against it (see test_replay_hands_on_only_the_subjects_kind)."""
    if subject.rpartition(".")[2] in REPLAYED:
        return [k for k in kinds if k not in REPLAYED]
    return kinds


async def still_works(nc: Client, root: Path) -> None:
    """After the fuzz: a valid event is ingested, a valid job is run, `swarm sql` answers."""
    js = nc.jetstream()
    idea = Idea("after-fuzz-idea", "tester", "still alive", "not a patch", 1)
    await publish_event(js, idea)
    spec = RunSpec("after-fuzz-run", 0, 1, 1, BudgetKind.TOKENS, 100.0, target="synthetic")
    await js.publish(job_subject(0), encode(spec), timeout=10)

    async def done() -> bool:
        ideas = await count(nc, "select count(*) from ideas where idea_id = 'after-fuzz-idea'")
        runs = await count(nc, "select count(*) from runs where run_id = 'after-fuzz-run'")
        return ideas == 1 and runs == 1

    await wait_for_async(done, 30, 0.3)
    answer = await asyncio.to_thread(run_swarm, root, "sql", "select count(*) as n from ideas")
    assert answer.returncode == 0, answer.stderr
    assert answer.stdout.splitlines()[0].split() == ["n"]


async def test_replay_hands_on_only_the_subjects_kind(nc: Client) -> None:
    js = nc.jetstream()
    misplaced = [
        ("swarm.events.idea", ChampionChange(99, 1, ChangeKind.STACK, "sha", source="x = 1")),
        ("swarm.events.x.idea", sample("idea", 1)),
    ]
    for subject, message in misplaced:
        await js.publish(subject, encode(message))
    handed: list[tuple[int, Message | None]] = []
    done = asyncio.Event()

    async def handle(message: Message | None, seq: int) -> None:
        handed.append((seq, message))
        done.set()

    replay = await replay_events(js, FOLDED_KINDS, MAX_PAYLOAD, handle)
    try:
        await asyncio.wait_for(done.wait(), 10)
        await asyncio.sleep(0.3)
    finally:
        await replay.subscription.unsubscribe()
    # The idea subject's event is no idea: handed on as nothing. The other subject is no
    # kind's: the server never sends it to a reader of the folded kinds.
    assert handed == [(1, None)]


def test_a_result_for_an_unknown_idea_does_not_stop_the_ladder() -> None:
    ladder_toml = Path(__file__).parents[1] / "configs" / "ladder.toml"
    config = SwarmConfig(
        target=TargetConfig(kind="synthetic"), ladder=LadderConfig(str(ladder_toml))
    )
    ladder = make_ladder(config)
    ladder.act()  # the first champion and its baselines
    stray = dataclasses.replace(sample("run_result", 1), idea_id="fuzz-idea-nobody-proposed")  # type: ignore[type-var]
    ladder.observe(stray)
    ladder.act()


def test_the_fuzz_replays_exactly() -> None:
    """Same seed, same bytes: a failure above names messages one can make again."""

    def made(seed: int) -> list[bytes]:
        fuzzer = Fuzzer(seed)
        bads = []
        for kind in MESSAGE_TYPES:  # each family twice for every kind
            bads += fuzzer.stream(f"swarm.events.{kind}", kind, 28, ["trace"], "")
        requests = sql_requests(fuzzer.rng, 34) + control_requests(fuzzer.rng, 36)
        return [b.raw for b in bads] + [raw for raw, _ in requests]

    assert made(SEED) == made(SEED)
    assert made(SEED) != made(SEED + 1)
