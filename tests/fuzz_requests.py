"""Malformed requests for the fuzz test: to the ledger's SQL endpoint and the ladder's control
subject. Each comes with a regex its error reply must match. Every draw comes from the `rng` passed
in (the fuzzer's), so the same seed gives the same bytes.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

SQL_WORDS = ["select", "from", "where", "runs", "(", ")", "'", ";", "--", "*", "join", "1", "drop"]
FORBIDDEN_SQL = [
    "select 1; drop table runs",
    "delete from runs",
    "insert into runs (run_id) values ('x')",
    "update runs set metric = 0",
    "create table t (x int)",
    "drop table runs",
    "attach 'x.db'",
    "install httpfs",
    "load httpfs",
    "set threads = 1",
    "pragma enable_profiling",
    "call pragma_table_info('runs')",
    "copy runs to 'runs.csv'",
    "select * from read_csv('/etc/passwd')",
    "select * from read_text('/etc/passwd')",
    "select * from glob('/*')",
]


def sql_requests(rng: random.Random, count: int) -> list[tuple[bytes, str]]:
    """Bad requests to the SQL endpoint, each with a regex its error reply must match."""
    malformed = "malformed SQL request"
    refused = "cannot parse|only read-only|exactly one statement|file access|Error"

    def request(sql: Any, **extra: Any) -> bytes:
        return json.dumps({"sql": sql, **extra}).encode()

    makers: list[Callable[[], tuple[bytes, str]]] = [
        lambda: (rng.randbytes(rng.randint(1, 200)), malformed),
        lambda: (request("select 1")[: rng.randint(1, 15)], f"{malformed}: not JSON"),
        lambda: (json.dumps(rng.choice([[], 5, "select 1", None, True])).encode(), malformed),
        lambda: (b"{}", '"sql" must be a string, got nothing'),
        lambda: (request(rng.choice([5, None, [], {}, True])), '"sql" must be a string'),
        lambda: (request("select 1", max_row=5), "unknown keys"),
        lambda: (
            request("select 1", max_rows=rng.choice([0, -1, 1.5, "5", True, []])),
            "max_rows must be a positive integer",
        ),
        lambda: (b"", "empty body"),
        lambda: (request("select 1").replace(b":", b"\x00:", 1), f"{malformed}: not JSON"),
        lambda: (request("select 1").replace(b"sql", b"sq\xff"), f"{malformed}: not UTF-8"),
        lambda: (b"[" * 5000, f"{malformed}: not JSON"),
        lambda: (b'{"sql": "x", "max_rows": ' + b"9" * 5000 + b"}", f"{malformed}: not JSON"),
        lambda: (request("select '\ud800'"), "not Unicode text"),
        lambda: (request(" ".join(rng.choices(SQL_WORDS, k=rng.randint(1, 12)))), refused),
        lambda: (request(rng.choice(FORBIDDEN_SQL)), refused),
        lambda: (request("select " + "y" * rng.randint(50_000, 200_000)), "Binder Error"),
        lambda: (request(""), "empty query"),
    ]
    return [makers[i % len(makers)]() for i in range(count)]


def control_requests(rng: random.Random, count: int) -> list[tuple[bytes, str]]:
    """Bad requests to the ladder, each with a regex its `error` must match."""
    not_json = "not a JSON request"

    def request(**fields: Any) -> bytes:
        return json.dumps(fields).encode()

    makers: list[Callable[[], tuple[bytes, str]]] = [
        lambda: (rng.randbytes(rng.randint(1, 200)), f"{not_json}|JSON object|unknown action"),
        lambda: (request(action="approve", idea_id="x")[: rng.randint(1, 20)], not_json),
        lambda: (
            json.dumps(rng.choice([[], 5, "approve", None, True])).encode(),
            "JSON object",
        ),
        lambda: (
            request(action=rng.choice(["promote", "", "APPROVE", 5, None, []])),
            "unknown action",
        ),
        lambda: (request(idea_id="x"), "unknown action None"),
        lambda: (request(action="approve"), 'approve needs "idea_id" \\(str\\), got nothing'),
        lambda: (
            request(action="reject", idea_id=rng.choice([5, None, [], "", True])),
            'reject needs "idea_id"',
        ),
        lambda: (
            request(action=rng.choice(["approve", "reject"]), idea_id=f"fuzz-{rng.random()}"),
            "no idea fuzz-",
        ),
        lambda: (
            request(action="revert", version=rng.choice(["3", 3.0, True, None, [], {}])),
            'revert needs "version" \\(int\\)',
        ),
        lambda: (b'{"action": "revert", "version": 1e400}', 'revert needs "version"'),
        lambda: (
            request(action="revert", version=rng.choice([-1, 0, 10**6, 2**70])),
            "no champion v",
        ),
        lambda: (request(action="approve", idea_id="x", version=3), "unknown keys"),
        lambda: (
            request(action="approve", idea_id="x", who=rng.choice([5, [], {}])),
            '"who" must be a string',
        ),
        lambda: (request(action="approve", idea_id="x").replace(b"a", b"\xe9", 1), not_json),
        lambda: (
            request(action="approve", idea_id="x" * rng.randint(50_000, 200_000)),
            "no idea x",
        ),
        lambda: (b"[" * 5000, not_json),
        lambda: (b'{"action": "revert", "version": ' + b"7" * 5000 + b"}", not_json),
        lambda: (b"\x00" * rng.randint(1, 50), not_json),
    ]
    return [makers[i % len(makers)]() for i in range(count)]
