"""Turning a refused message into a DeadLetter: the reason, who refused it, the raw bytes."""

from __future__ import annotations

from bus.messages import DeadLetter, new_id

RAW_KEEP_BYTES = 4096


def letter_id(consumer: str, key: str) -> str:
    """The id of `consumer`'s dead letter for `key`: the same key, the same letter."""
    return f"dl-{consumer}-{key}"


def dead_letter(subject: str, raw: bytes, reason: str, consumer: str, key: str = "") -> DeadLetter:
    """`key` makes the record idempotent (e.g. the stream sequence); else a fresh id."""
    shown = raw[:RAW_KEEP_BYTES].decode("utf-8", errors="backslashreplace")
    if len(raw) > RAW_KEEP_BYTES:
        shown += f"… [{len(raw) - RAW_KEEP_BYTES} more bytes]"
    return DeadLetter(
        dead_letter_id=letter_id(consumer, key) if key else new_id(f"dl-{consumer}"),
        subject=subject,
        reason=reason,
        raw=shown,
        raw_bytes=len(raw),
        consumer=consumer,
    )
