"""Malformed bus messages for the fuzz test, made by a seeded generator: the same seed gives the
same bytes (valid messages carry fixed ids and times), so a failure replays exactly.

`Fuzzer.stream` makes these families, each paired with a regex the refusal's reason must match:
envelope-level (random bytes, truncated or invalid JSON, NUL bytes, non-UTF-8 and lone surrogates,
JSON that is no object, a wrong schema version, an unknown kind, a valid message of another kind,
non-finite numbers) and field-level (missing, unknown and mistyped fields, huge strings and
numbers). `Fuzzer.oversized` makes messages just under and over the bus's size limit. Bad requests
to the SQL endpoint and the ladder are in `tests.fuzz_requests`.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import random
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bus.codec import encode
from bus.messages import (
    MESSAGE_TYPES,
    AgentEvent,
    AgentEventKind,
    BudgetKind,
    ChampionChange,
    ChangeKind,
    DeadLetter,
    Decision,
    Idea,
    LlmCall,
    Message,
    PromptPrefix,
    RunResult,
    RunSpec,
    RunStatus,
    StrategyVersion,
    Trace,
    Verdict,
)

MAX_PAYLOAD = 1024 * 1024  # the swarm's bus.max_payload_bytes (NATS' default)


@dataclass(frozen=True, slots=True)
class Bad:
    """One malformed message for a stream subject, and what its refusal must say."""

    family: str
    subject: str
    raw: bytes
    reason: str  # a regex the refusal's reason must match


# --- valid messages, to corrupt --------------------------------------------------------------


def sample(kind: str, n: int) -> Message:
    """A valid message of `kind` whose ids say it came from the fuzzer."""
    makers: dict[str, Callable[[], Message]] = {
        "idea": lambda: Idea(f"fuzz-idea-{n}", "fuzzer", "h", "not a patch", 1),
        "run_spec": lambda: RunSpec(f"fuzz-run-{n}", 0, 1, 1, BudgetKind.TOKENS, 100.0),
        "run_result": lambda: RunResult(f"fuzz-run-{n}", 0, 1, 1, RunStatus.OK, metric=1.0),
        "decision": lambda: Decision(
            f"fuzz-decision-{n}", f"fuzz-idea-{n}", 0, Verdict.REJECT, 1, "fuzz"
        ),
        "champion_change": lambda: ChampionChange(10**6 + n, 1, ChangeKind.STACK, "sha"),
        "trace": lambda: Trace(f"fuzz-trace-{n}", "fuzzer", "fuzz", data={"n": n}),
        "agent_event": lambda: AgentEvent(f"fuzz-event-{n}", "fuzzer", AgentEventKind.NOTE),
        "dead_letter": lambda: DeadLetter(f"fuzz-dl-{n}", "s", "r", "raw", 3, "fuzzer"),
        "llm_call": lambda: LlmCall(
            f"fuzz-call-{n}", "fuzzer", "propose", "anthropic", "m", "ok", "a", "b", "", ""
        ),
        "prompt_prefix": lambda: PromptPrefix(f"fuzz-prefix-{n}", "text"),
        "strategy": lambda: StrategyVersion(
            f"fuzz-strategy-{n}", "fuzzer", 1, "text", "sha", "initial", "why"
        ),
    }
    assert makers.keys() == MESSAGE_TYPES.keys(), "a new message kind: add it to the fuzzer"
    # A fixed time: encoded lengths, and so every random draw after them, repeat exactly.
    stamp = "finished_at" if kind == "run_result" else "created_at"
    return dataclasses.replace(makers[kind](), **{stamp: 1_700_000_000.0 + n})  # type: ignore[type-var]


def _nested(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


def wrong_values(hint: Any) -> list[Any]:
    """JSON values that do not fit a field of type `hint`."""
    if typing.get_origin(hint) in (types.UnionType, typing.Union):  # float | None
        (inner,) = [a for a in typing.get_args(hint) if a is not type(None)]
        return [v for v in wrong_values(inner) if v is not None]
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return ["NOPE", 5, None, [], "ok"]
    origin = typing.get_origin(hint)
    if origin is tuple:
        return ["a", [1], {}, [None], 5]
    if origin is dict and typing.get_args(hint)[1] is int:
        return [[], "x", {"a": "b"}, {"a": 1.5}, {"a": True}, {"a": 2**64}]
    if origin is dict:
        return [[], "x", 5, None, {"deep": _nested(80)}]
    return {
        str: [5, 1.5, True, None, [], {}, ["a"]],
        int: ["5", 1.5, True, None, [], {}, 2**64, -(2**63) - 1],
        float: ["1.0", True, None, [], {}, 10**400],
        bool: [0, 1, "true", None, []],
    }[hint]


def _fields(kind: str) -> dict[str, tuple[Any, bool]]:
    """name -> (type hint, required) for a message kind."""
    cls = MESSAGE_TYPES[kind]
    hints = typing.get_type_hints(cls)
    return {
        f.name: (
            hints[f.name],
            f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
        )
        for f in dataclasses.fields(cls)
    }


# --- the generator -----------------------------------------------------------------------------


class Fuzzer:
    """Malformed messages, one family at a time, all from one seeded random generator (the
    request makers in `tests.fuzz_requests` draw from its `rng` too)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.n = 0

    def valid(self, kind: str) -> Message:
        self.n += 1
        return sample(kind, self.n)

    def envelope(self, kind: str) -> dict[str, Any]:
        return json.loads(encode(self.valid(kind)))  # type: ignore[no-any-return]

    def stream(
        self, subject: str, kind: str, count: int, safe: list[str], misplaced: str
    ) -> list[Bad]:
        """`count` bad messages for a stream subject that carries `kind`. `safe`: the kinds that
        may be sent whole on it (valid, but of the wrong kind), refused with the reason
        `misplaced` (a format string of `other`, the kind sent, and `subject`)."""
        families = self._families(subject, kind, safe, misplaced)
        names = sorted(families)
        out = []
        for i in range(count):
            family = names[i % len(names)]
            raw, reason = families[family]()
            out.append(Bad(family, subject, raw, reason))
        return out

    def _families(
        self, subject: str, kind: str, safe: list[str], misplaced: str
    ) -> dict[str, Callable[[], tuple[bytes, str]]]:
        rng = self.rng

        def dump(envelope: Any) -> bytes:
            return json.dumps(envelope).encode()

        def random_bytes() -> tuple[bytes, str]:
            raw = rng.randbytes(rng.randint(0, 300))
            return raw, "not UTF-8|not JSON|envelope must be|unknown message kind"

        def truncated() -> tuple[bytes, str]:
            raw = encode(self.valid(kind))
            return raw[: rng.randrange(len(raw))], "not JSON"

        def invalid_json() -> tuple[bytes, str]:
            raw = encode(self.valid(kind))
            broken = rng.choice(
                [
                    raw.replace(b'"', b"'", 1),
                    raw.replace(b":", b"", 1),
                    raw[:-1] + b",}",
                    raw + b"}",
                    raw.replace(b'"kind"', b"kind"),
                    b"{" * rng.randint(1, 5),
                    b"[" * 5000,
                ]
            )
            return broken, "not JSON"

        def wrong_type() -> tuple[bytes, str]:
            whole = encode(self.valid(kind)).decode()
            value = rng.choice([[1, 2], 5, 1.5, "idea", None, True, [], [whole], whole])
            return dump(value), "envelope must be a JSON object, got "

        def wrong_version() -> tuple[bytes, str]:
            envelope = self.envelope(kind)
            envelope["v"] = rng.choice([0, 2, 99, -1, "1", None, 1.0, True, [1]])
            return dump(envelope), "unsupported schema version"

        def unknown_kind() -> tuple[bytes, str]:
            envelope = self.envelope(kind)
            envelope["kind"] = rng.choice(["spaceship", "", kind.upper(), 5, None, [kind]])
            return dump(envelope), "unknown message kind"

        def wrong_kind() -> tuple[bytes, str]:
            other = rng.choice(safe)
            return encode(self.valid(other)), misplaced.format(other=other, subject=subject)

        def missing_field() -> tuple[bytes, str]:
            envelope = self.envelope(kind)
            required = [name for name, (_, req) in _fields(kind).items() if req]
            name = rng.choice(required)
            del envelope["data"][name]
            return dump(envelope), f"missing field '{name}'"

        def extra_field() -> tuple[bytes, str]:
            envelope = self.envelope(kind)
            if rng.random() < 0.5:
                envelope["data"][f"surprise_{rng.randrange(100)}"] = 1
                return dump(envelope), "unknown fields"
            envelope["extra"] = {"x": 1}
            return dump(envelope), "unknown envelope keys"

        def wrong_field_type() -> tuple[bytes, str]:
            envelope = self.envelope(kind)
            if rng.random() < 0.1:
                envelope["data"] = rng.choice([[], "data", 5, None])
                return dump(envelope), "data must be a JSON object"
            name, (hint, _) = rng.choice(list(_fields(kind).items()))
            envelope["data"][name] = rng.choice(wrong_values(hint))
            return dump(envelope), re.escape(f"{kind}.{name}")

        def not_finite() -> tuple[bytes, str]:
            raw = encode(self.valid(kind))  # (JSON has no NaN; Python's parser takes it)
            constant = rng.choice([b"NaN", b"Infinity", b"-Infinity"])
            return raw.replace(b'"v":1', b'"v":' + constant), "^non-finite number"

        def nul_bytes() -> tuple[bytes, str]:
            raw = bytearray(encode(self.valid(kind)))
            for _ in range(rng.randint(1, 3)):
                raw.insert(rng.randrange(len(raw) + 1), 0)
            return bytes(raw), "not JSON"

        def huge_strings() -> tuple[bytes, str]:
            size = rng.randint(20_000, 60_000)
            envelope = self.envelope(kind)
            choice = rng.randrange(4)
            if choice == 0:
                envelope["kind"] = "k" * size
                return dump(envelope), "unknown message kind"
            if choice == 1:
                envelope["data"]["f" * size] = 1
                return dump(envelope), "unknown fields"
            ints = [n for n, (h, _) in _fields(kind).items() if h is int]
            if choice == 2 and ints:
                envelope["data"][rng.choice(ints)] = "9" * size
                return dump(envelope), re.escape(f"{kind}.")
            digits = b"1" * rng.randint(4400, 6000)  # beyond Python's int parsing limit
            return b'{"kind":"' + kind.encode() + b'","v":' + digits + b"}", "not JSON"

        def non_utf8() -> tuple[bytes, str]:
            message = self.valid(kind)
            raw = encode(message)
            choice = rng.randrange(5)
            if choice == 0:
                at = rng.randrange(len(raw))
                return raw[:at] + b"\xff" + raw[at + 1 :], "not UTF-8"
            if choice == 1:
                return raw.replace(b'"v"', b'"v\xed\xa0\x80"', 1), "not UTF-8"
            if choice == 2:
                return raw.replace(b'"kind"', b'"kind\xc0\xaf"', 1), "not UTF-8"
            if choice == 3:
                return raw.decode().encode("utf-16"), "not UTF-8"
            # Valid JSON and valid UTF-8, but a JSON escape for half a surrogate pair.
            envelope = json.loads(raw)
            strings = [n for n, (h, _) in _fields(kind).items() if h is str]
            envelope["data"][rng.choice(strings)] = "half \ud800 of a pair"
            return dump(envelope), "lone surrogate"

        return {
            "random_bytes": random_bytes,
            "truncated": truncated,
            "invalid_json": invalid_json,
            "wrong_type": wrong_type,
            "wrong_version": wrong_version,
            "unknown_kind": unknown_kind,
            "wrong_kind": wrong_kind,
            "missing_field": missing_field,
            "extra_field": extra_field,
            "wrong_field_type": wrong_field_type,
            "not_finite": not_finite,
            "nul_bytes": nul_bytes,
            "huge_strings": huge_strings,
            "non_utf8": non_utf8,
        }

    def oversized(self, subject: str, kind: str, limit: int = MAX_PAYLOAD) -> list[Bad]:
        """Two just under the stream's limit (consumers refuse them), one over it (the bus
        does)."""
        head = b'{"kind":"' + kind.encode() + b'","v":1,"data":{"pad":"'
        under = head + b"x" * (limit - 64 - len(head)) + b'"}}'
        return [
            Bad("oversized", subject, under, "unknown fields"),
            Bad("oversized", subject, self.rng.randbytes(limit - 64), "not UTF-8|not JSON"),
            Bad("over_limit", subject, b"x" * (limit + 1), ""),
        ]
