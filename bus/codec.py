"""JSON codec for bus messages: an envelope `{"kind", "v", "data"}` checked field by field.

Decoding never trusts the sender. Anything wrong — not JSON, too big, unknown kind or schema
version, a missing, unknown or mistyped field — raises `CodecError` with a reason a person can
read; consumers turn that into a dead letter instead of crashing.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import types
import typing
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from bus.messages import MESSAGE_TYPES, SCHEMA_VERSION, Message

DEFAULT_MAX_BYTES = 1024 * 1024
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
    envelope = {"kind": message.KIND, "v": SCHEMA_VERSION, "data": data}
    return json.dumps(envelope, separators=(",", ":"), allow_nan=False).encode()


def decode(raw: bytes, max_bytes: int = DEFAULT_MAX_BYTES) -> Message:
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
    if not isinstance(envelope, dict):
        raise CodecError(f"envelope must be a JSON object, got {type(envelope).__name__}")
    extra = set(envelope) - {"kind", "v", "data"}
    if extra:
        raise CodecError(f"unknown envelope keys: {sorted(extra)}")
    kind, version, data = envelope.get("kind"), envelope.get("v"), envelope.get("data")
    if kind not in MESSAGE_TYPES:
        raise CodecError(f"unknown message kind {kind!r}; known: {sorted(MESSAGE_TYPES)}")
    if version != SCHEMA_VERSION:
        raise CodecError(
            f"unsupported schema version {version!r} for {kind}; this build reads v{SCHEMA_VERSION}"
        )
    if not isinstance(data, dict):
        raise CodecError(f"{kind}.data must be a JSON object, got {type(data).__name__}")
    return _build(MESSAGE_TYPES[kind], data)


def decode_as(raw: bytes, expected: type[M], max_bytes: int = DEFAULT_MAX_BYTES) -> M:
    """Decode and insist on one message type (a subject carries one kind)."""
    message = decode(raw, max_bytes)
    if not isinstance(message, expected):
        raise CodecError(f"expected {expected.KIND}, got {message.KIND}")
    return message


def _refuse_constant(name: str) -> float:
    raise CodecError(f"non-finite number {name} is not allowed")


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
        # A float|None field is exact for floats too: None and ints take the slow path.
        plain = next((a for a in typing.get_args(hint) if a is not type(None)), hint)
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
        raise CodecError(f"{cls.KIND}: unknown fields {sorted(set(data) - _NAMES[cls.KIND])}")
    kwargs: dict[str, Any] = {}
    for spec in _SPECS[cls.KIND]:
        if spec.name not in data:
            if spec.required:
                raise CodecError(f"{cls.KIND}: missing field {spec.name!r}")
            continue
        value: Any = data[spec.name]
        if type(value) is spec.exact and (
            spec.exact is not float or math.isfinite(cast(float, value))
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
        return value
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return hint(value)
        except ValueError:
            choices = [m.value for m in hint]
            raise CodecError(f"{where}: {value!r} is not one of {choices}") from None
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
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


def _describe(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:40]}{'…' if len(text) > 40 else ''}"
