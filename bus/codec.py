"""JSON codec for bus messages: an envelope `{"kind", "v", "minor", "data"}` checked field by
field.

Schema versions (bus/messages.py): `v` is the major version, `minor` the minor one (absent in
events written before minor versions existed: 0). A message of a newer minor version may carry
fields this build does not know: they are left out of the message and returned beside it
(`decode_versioned`), so a reader keeps working and the ledger keeps them. A different major
version is refused, naming both versions. A message of this minor version or an older one
with a field this build does not know is malformed.

Decoding never trusts the sender. Anything wrong — not JSON, too big, unknown kind or schema
version, a missing, unknown or mistyped field, an integer beyond 64 bits (the ledger's BIGINT), a
lone surrogate (not Unicode: no store or file can hold it), nesting deeper than MAX_NESTING —
raises `CodecError` with a reason a person can read (and short, whatever the sender sent);
consumers turn that into a dead letter instead of crashing.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import sys
import types
import typing
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from bus.messages import MESSAGE_TYPES, SCHEMA_MINOR, SCHEMA_VERSION, Message

DEFAULT_MAX_BYTES = 1024 * 1024
# Free-form values (`dict[str, Any]` fields) nest at most this deep: deeper JSON parses, but
# re-encoding it (the ledger stores it as JSON text) can hit Python's recursion limit.
MAX_NESTING = 64
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAX_MINOR = 2**31 - 1  # a minor version fits the ledger's INTEGER column
# How much of a sender's value a reason quotes.
QUOTE_CHARS = 40
M = TypeVar("M", bound=Message)


class CodecError(ValueError):
    """A message that cannot be accepted; `reason` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def encode(message: Message) -> bytes:
    data = {spec.name: getattr(message, spec.name) for spec in _SPECS[message.KIND]}
    for name in _CONVERTED[message.KIND]:
        data[name] = _to_json(data[name])
    envelope = {"kind": message.KIND, "v": SCHEMA_VERSION, "minor": SCHEMA_MINOR, "data": data}
    return json.dumps(envelope, separators=(",", ":"), allow_nan=False).encode()


@dataclass(frozen=True, slots=True)
class Decoded:
    message: Message
    minor: int  # the sender's minor schema version
    # fields of a newer minor version this build does not know, by name (JSON values)
    unknown: dict[str, Any]


def decode(raw: bytes, max_bytes: int = DEFAULT_MAX_BYTES) -> Message:
    return decode_versioned(raw, max_bytes).message


def decode_versioned(raw: bytes, max_bytes: int = DEFAULT_MAX_BYTES) -> Decoded:
    if len(raw) > max_bytes:
        raise CodecError(f"message of {len(raw)} bytes exceeds the limit of {max_bytes} bytes")
    try:
        envelope = _JSON.decode(raw.decode())
    except UnicodeDecodeError as exc:
        raise CodecError(f"not UTF-8: {exc.reason} at byte {exc.start}") from None
    except json.JSONDecodeError as exc:
        raise CodecError(f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise CodecError("not JSON: nested too deeply") from None
    except CodecError:  # NaN or Infinity (`_refuse_constant`)
        raise
    except ValueError as exc:  # a number of more than 4300 digits (Python's int parsing limit)
        raise CodecError(f"not JSON: {str(exc).split(';')[0]}") from None
    if not isinstance(envelope, dict):
        raise CodecError(f"envelope must be a JSON object, got {type(envelope).__name__}")
    extra = set(envelope) - {"kind", "v", "minor", "data"}
    if extra:
        raise CodecError(f"unknown envelope keys: {_names(extra)}")
    kind, version, data = envelope.get("kind"), envelope.get("v"), envelope.get("data")
    minor = envelope.get("minor", 0)
    if not isinstance(kind, str) or kind not in MESSAGE_TYPES:
        raise CodecError(f"unknown message kind {_quote(kind)}; known: {sorted(MESSAGE_TYPES)}")
    if type(version) is not int or type(minor) is not int or not 0 <= minor <= MAX_MINOR:
        raise CodecError(  # not 1.0, not true, not a number no store column can hold
            f"unsupported schema version {_quote(version)}.{_quote(minor)} for {kind}; "
            f"this build reads v{SCHEMA_VERSION}.{SCHEMA_MINOR}"
        )
    if version != SCHEMA_VERSION:
        raise CodecError(
            f"unsupported schema version: {kind} is v{_quote(version)}.{minor} and this build "
            f"reads v{SCHEMA_VERSION}.{SCHEMA_MINOR}; a major version changes what fields mean, so "
            "every host of a swarm must run the same major version"
        )
    if not isinstance(data, dict):
        raise CodecError(f"{kind}.data must be a JSON object, got {type(data).__name__}")
    if b"\\ud" in raw or b"\\uD" in raw:  # a surrogate escape: an emoji's pair, or a lone one
        _refuse_lone_surrogates(kind, data)
    cls = MESSAGE_TYPES[kind]
    unknown: dict[str, Any] = {}
    if minor > SCHEMA_MINOR:  # a newer host's fields: set aside, checked only as JSON values
        unknown = {k: v for k, v in data.items() if k not in _NAMES[kind]}
        data = {k: v for k, v in data.items() if k in _NAMES[kind]}
        if _too_deep(unknown, MAX_NESTING):
            raise CodecError(f"{kind}: fields of v{version}.{minor} nested too deeply")
    return Decoded(_build(cls, data), minor, unknown)


def decode_as(raw: bytes, expected: type[M], max_bytes: int = DEFAULT_MAX_BYTES) -> M:
    """Decode and insist on one message type (a subject carries one kind)."""
    message = decode(raw, max_bytes)
    if not isinstance(message, expected):
        raise CodecError(f"expected {expected.KIND}, got {message.KIND}")
    return message


def _refuse_constant(name: str) -> float:
    raise CodecError(f"non-finite number {name} is not allowed")


def _refuse_lone_surrogates(kind: str, data: dict[str, Any]) -> None:
    try:
        json.dumps(data, ensure_ascii=False).encode()
    except UnicodeEncodeError as exc:
        where = exc.object[max(0, exc.start - 20) : exc.start]
        raise CodecError(
            f"{kind}: not Unicode text: a lone surrogate {exc.object[exc.start]!r} after {where!r}"
        ) from None
    except RecursionError:  # pragma: no cover - the parser refuses deeper nesting first
        raise CodecError(f"{kind}: nested too deeply") from None


_JSON = json.JSONDecoder(parse_constant=_refuse_constant)


def _to_json(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return list(value)
    return value


@dataclass(frozen=True, slots=True)
class _FieldSpec:
    name: str
    hint: Any
    required: bool
    exact: type | None  # values of exactly this type pass unchecked (the common, fast case)


def _field_specs(cls: type[Message]) -> tuple[_FieldSpec, ...]:
    hints = typing.get_type_hints(cls)
    specs = []
    for f in dataclasses.fields(cls):
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        hint = hints[f.name]
        # A float|None field is exact for floats too: None and ints take the slow path. Only a
        # union's arguments count: dict[str, int]'s are its key and value types, and a plain
        # string is no dict.
        plain = hint
        if typing.get_origin(hint) in (types.UnionType, typing.Union):
            plain = next(a for a in typing.get_args(hint) if a is not type(None))
        exact = plain if plain in (str, int, bool, float) else None
        specs.append(_FieldSpec(f.name, hint, required, exact))
    return tuple(specs)


_SPECS = {kind: _field_specs(cls) for kind, cls in MESSAGE_TYPES.items()}
_NAMES = {kind: frozenset(spec.name for spec in specs) for kind, specs in _SPECS.items()}
# Fields whose values are not JSON as they are (enums, tuples), converted on encode.
_CONVERTED = {
    kind: tuple(s.name for s in specs if s.exact is None and s.hint is not Any)
    for kind, specs in _SPECS.items()
}


def _build(cls: type[Message], data: dict[str, Any]) -> Message:
    if not data.keys() <= _NAMES[cls.KIND]:
        raise CodecError(f"{cls.KIND}: unknown fields {_names(set(data) - _NAMES[cls.KIND])}")
    kwargs: dict[str, Any] = {}
    for spec in _SPECS[cls.KIND]:
        if spec.name not in data:
            if spec.required:
                raise CodecError(f"{cls.KIND}: missing field {spec.name!r}")
            continue
        value: Any = data[spec.name]
        exact = spec.exact
        if type(value) is exact and (
            exact is str
            or exact is bool
            or (
                INT64_MIN <= cast(int, value) <= INT64_MAX
                if exact is int
                else math.isfinite(cast(float, value))
            )
        ):
            kwargs[spec.name] = value
        else:
            kwargs[spec.name] = _check(f"{cls.KIND}.{spec.name}", spec.hint, value)
    return cls(**kwargs)


def _check(where: str, hint: Any, value: Any) -> Any:
    """Return `value` converted to `hint`, or raise CodecError naming the field."""
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        for option in typing.get_args(hint):
            try:
                return _check(where, option, value)
            except CodecError:
                continue
        raise CodecError(f"{where}: {_describe(value)} does not match {hint}")
    if hint is type(None):
        if value is None:
            return None
        raise CodecError(f"{where}: expected null, got {_describe(value)}")
    if hint is Any:
        if _too_deep(value, MAX_NESTING):
            raise CodecError(f"{where}: nested deeper than {MAX_NESTING} levels")
        return value
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return hint(value)
        except ValueError:
            choices = [m.value for m in hint]
            raise CodecError(f"{where}: {_quote(value)} is not one of {choices}") from None
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            if INT64_MIN <= value <= INT64_MAX:
                return value
            raise CodecError(f"{where}: {_describe(value)} is beyond 64 bits")
    elif hint is float:
        if isinstance(value, int) and not isinstance(value, bool):
            if abs(value) <= _FLOAT_INT_MAX:  # larger ints do not convert to a float
                return float(value)
            raise CodecError(f"{where}: {_describe(value)} is beyond a float's range")
        if isinstance(value, float) and math.isfinite(value):
            return value
    elif hint is str:
        if isinstance(value, str):
            return value
    elif origin is tuple:
        (item,) = typing.get_args(hint)[:1]
        if isinstance(value, list):
            return tuple(_check(f"{where}[{i}]", item, v) for i, v in enumerate(value))
    elif origin is dict:
        _, value_hint = typing.get_args(hint)
        if isinstance(value, dict):
            return {k: _check(f"{where}.{k}", value_hint, v) for k, v in value.items()}
    else:  # pragma: no cover - a message type declared a field type this codec does not know
        raise TypeError(f"{where}: unsupported field type {hint}")
    raise CodecError(f"{where}: expected {getattr(hint, '__name__', hint)}, got {_describe(value)}")


_FLOAT_INT_MAX = int(sys.float_info.max)


def _too_deep(value: Any, levels: int) -> bool:
    if isinstance(value, dict):
        children: Any = value.values()
    elif isinstance(value, list):
        children = value
    else:
        return False
    return levels <= 0 or any(_too_deep(child, levels - 1) for child in children)


def _quote(value: Any) -> str:
    """A sender's value for a reason: its start only, whatever its size."""
    if isinstance(value, str) and len(value) > QUOTE_CHARS:
        return f"{value[:QUOTE_CHARS]!r}… ({len(value)} chars)"
    text = repr(value)
    return text if len(text) <= QUOTE_CHARS else f"{text[:QUOTE_CHARS]}…"


def _names(names: set[str]) -> str:
    shown = [_quote(name) for name in sorted(names)[:10]]
    return "[" + ", ".join(shown) + (", …" if len(names) > 10 else "") + "]"


def _describe(value: Any) -> str:
    return f"{type(value).__name__} {_quote(value)}"
