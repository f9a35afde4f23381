"""Control requests to the ladder (approve, reject, revert on `swarm.ladder.control`): what a
request must be, read strictly, and how long an error quoted back may be."""

from __future__ import annotations

import json

from scale_ladder.idea_state import LadderRefusal

# What each control action names besides "action" and "who".
CONTROL_TARGETS = {"approve": "idea_id", "reject": "idea_id", "revert": "version"}
MAX_ERROR_CHARS = 300


def parse_control(raw: bytes) -> tuple[str, str, str | int]:
    """(action, who, idea id or version) from a control request, or LadderRefusal naming what
    is wrong with it. Types are exact: a version is an integer, never "3", 3.0 or true."""
    try:
        request = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # not UTF-8, not JSON, nested too deeply
        raise LadderRefusal(f"not a JSON request: {shorten(str(exc))}") from None
    if not isinstance(request, dict):
        raise LadderRefusal(f"a request must be a JSON object, got {type(request).__name__}")
    action = request.get("action")
    if not isinstance(action, str) or action not in CONTROL_TARGETS:
        raise LadderRefusal(
            f"unknown action {shorten(repr(action))}; known: {', '.join(CONTROL_TARGETS)}"
        )
    key = CONTROL_TARGETS[action]
    unknown = sorted(set(request) - {"action", "who", key})
    if unknown:
        raise LadderRefusal(f"{action}: unknown keys {shorten(repr(unknown))}")
    who = request.get("who")
    if who is not None and not isinstance(who, str):
        raise LadderRefusal(f'{action}: "who" must be a string, got {type(who).__name__}')
    subject = request.get(key)
    wanted = int if key == "version" else str
    if type(subject) is not wanted or subject == "":
        got = "nothing" if subject is None else shorten(repr(subject))
        raise LadderRefusal(f'{action} needs "{key}" ({wanted.__name__}), got {got}')
    return action, (who or "someone")[:100], subject


def shorten(text: str) -> str:
    return text if len(text) <= MAX_ERROR_CHARS else f"{text[:MAX_ERROR_CHARS]}…"
