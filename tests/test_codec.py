"""The codec round-trips every message type and refuses anything malformed, with a reason."""

from __future__ import annotations

import dataclasses
import enum
import json
import types
import typing
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bus.codec import CodecError, decode, decode_as, encode
from bus.messages import (
    MESSAGE_TYPES,
    SCHEMA_MINOR,
    SCHEMA_VERSION,
    BudgetKind,
    Idea,
    Message,
    RunResult,
    RunSpec,
    RunStatus,
)
from tests.conftest import make_idea, make_result

TEXT = st.text(max_size=50)
FINITE = st.floats(allow_nan=False, allow_infinity=False)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | FINITE | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=10,
)


def _strategy(hint: Any) -> st.SearchStrategy[Any]:
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        return st.one_of(*[_strategy(a) for a in typing.get_args(hint)])
    if hint is type(None):
        return st.none()
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return st.sampled_from(list(hint))
    if origin is tuple:
        return st.lists(TEXT, max_size=3).map(tuple)
    if origin is dict:
        value = typing.get_args(hint)[1]
        return st.dictionaries(TEXT, JSON_VALUES if value is Any else _strategy(value), max_size=3)
    return {str: TEXT, int: st.integers(-(2**62), 2**62), float: FINITE, bool: st.booleans()}[hint]


def message_strategy(cls: type[Message]) -> st.SearchStrategy[Message]:
    hints = typing.get_type_hints(cls)
    fields = {f.name: _strategy(hints[f.name]) for f in dataclasses.fields(cls)}
    return st.builds(cls, **fields)


ANY_MESSAGE = st.one_of(*[message_strategy(cls) for cls in MESSAGE_TYPES.values()])


@settings(max_examples=300, deadline=None)
@given(ANY_MESSAGE)
def test_every_message_round_trips(message: Message) -> None:
    assert decode(encode(message)) == message


def test_decode_as_checks_the_kind() -> None:
    raw = encode(make_idea())
    assert isinstance(decode_as(raw, Idea), Idea)
    with pytest.raises(CodecError, match="expected run_result, got idea"):
        decode_as(raw, RunResult)


def _envelope(message: Message | None = None, /, **changes: Any) -> bytes:
    """`message` (a RunResult unless given) as an envelope, with `changes` made to it."""
    envelope = json.loads(encode(message or make_result()))
    for key, value in changes.items():
        if key.startswith("data."):
            field = key.removeprefix("data.")
            if value is dataclasses.MISSING:
                del envelope["data"][field]
            else:
                envelope["data"][field] = value
        else:
            envelope[key] = value
    return json.dumps(envelope).encode()


REFUSALS = [
    (b"", "not JSON"),
    (b"{not json", "not JSON"),
    (b"\xff\xfe\x00garbage", "not UTF-8|not JSON"),
    (b"[1, 2, 3]", "envelope must be a JSON object"),
    (b'"just a string"', "envelope must be a JSON object"),
    (b"[" * 100_000, "nested too deeply|not JSON"),
    (_envelope(kind="nonsense"), "unknown message kind 'nonsense'"),
    (
        _envelope(v=SCHEMA_VERSION + 1),
        rf"is v{SCHEMA_VERSION + 1}\.{SCHEMA_MINOR} and this build reads "
        rf"v{SCHEMA_VERSION}\.{SCHEMA_MINOR}",
    ),
    (_envelope(minor=-1), "unsupported schema version"),
    (_envelope(minor=2**31), "unsupported schema version"),  # beyond the ledger's column
    (_envelope(v=10**400), r"is v\d+… \(\d+ chars\)|is v\d{1,40}…"),  # quoted short
    (_envelope(minor="1"), "unsupported schema version"),
    (_envelope(v="1"), "unsupported schema version '1'"),
    (_envelope(extra=1), "unknown envelope keys"),
    (_envelope(data=[1]), "data must be a JSON object"),
    (_envelope(**{"data.run_id": dataclasses.MISSING}), "missing field 'run_id'"),
    (_envelope(**{"data.surprise": 1}), r"unknown fields \['surprise'\]"),
    (_envelope(**{"data.tier": "zero"}), "run_result.tier: expected int"),
    (_envelope(**{"data.tier": True}), "run_result.tier: expected int"),
    (_envelope(**{"data.tier": 1.5}), "run_result.tier: expected int"),
    (_envelope(**{"data.metric": "low"}), "run_result.metric"),
    (_envelope(**{"data.status": "FINE"}), r"run_result.status: 'FINE' is not one of"),
    (_envelope(**{"data.run_id": None}), "run_result.run_id: expected str"),
    (b'{"kind":"run_result","v":1,"data":{"metric":NaN}}', "non-finite number NaN"),
    (b'{"kind":"run_result","v":1,"data":{"metric":Infinity}}', "non-finite number Infinity"),
    (
        b'{"kind":"run_result","v":1,"data":{"tier":' + b"9" * 5000 + b"}}",
        r"not JSON: Exceeds the limit \(\d+ digits\)",
    ),
    (_envelope(kind=["x"]), r"unknown message kind \['x'\]"),
    (_envelope(v=True), "unsupported schema version True"),
    (
        _envelope(RunSpec("run-1", 0, 1, 1, BudgetKind.TOKENS, 1.0), **{"data.dials": "x"}),
        "run_spec.dials: expected dict, got str 'x'",
    ),
    (_envelope(**{"data.run_id": "\ud800"}), r"run_result: not Unicode text: a lone surrogate"),
]


@pytest.mark.parametrize(("raw", "reason"), REFUSALS)
def test_malformed_messages_are_refused_with_a_reason(raw: bytes, reason: str) -> None:
    with pytest.raises(CodecError, match=reason):
        decode(raw)


def test_oversized_message_is_refused_before_parsing() -> None:
    big = make_idea()
    raw = encode(dataclasses.replace(big, hypothesis="x" * 5000))
    with pytest.raises(CodecError, match=r"exceeds the limit of 1000 bytes"):
        decode(raw, max_bytes=1000)


def test_enum_values_travel_as_their_names() -> None:
    data = json.loads(encode(make_result(status=RunStatus.TIMEOUT)))
    assert data["data"]["status"] == "TIMEOUT"
    assert data["v"] == SCHEMA_VERSION


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300) | JSON_VALUES.map(lambda v: json.dumps(v).encode()))
def test_arbitrary_bytes_never_raise_anything_but_codec_error(raw: bytes) -> None:
    try:
        decode(raw)
    except CodecError as exc:
        assert exc.reason
