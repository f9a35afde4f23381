"""Hypotheses a person can read, written from the constants a proposal changes."""

from __future__ import annotations

from recipes.constants import Change, parse_value

HYPOTHESIS_LIMIT = 300  # characters


def ratio(old: float, new: float) -> str:
    if old == 0 or new == 0 or (old > 0) != (new > 0):
        return ""
    r = new / old
    return f"x{r:.3g}" if r >= 1 else f"/{1 / r:.3g}"


def short(change: Change) -> str:
    return f"{change.name} {change.old} -> {change.new}"


def step_text(change: Change) -> str:
    old, new = parse_value(change.old), parse_value(change.new)
    if isinstance(old, bool | tuple | str) or isinstance(new, bool | tuple | str):
        return f"{change.old} -> {change.new}"
    return ratio(old, new) or f"{change.old} -> {change.new}"


def describe(change: Change, comment: str) -> str:
    old, new = parse_value(change.old), parse_value(change.new)
    if isinstance(new, bool):
        text = f"Turn {change.name} {'on' if new else 'off'}"
    elif isinstance(old, bool | tuple | str) or isinstance(new, tuple | str):
        text = f"Change {change.name} from {change.old} to {change.new}"
    else:
        factor = ratio(old, new)
        verb = "Raise" if new > old else "Lower"
        text = f"{verb} {change.name} from {change.old} to {change.new}"
        text += f" ({factor})" if factor else ""
    return f"{text}: {comment}" if comment else text


def clip(text: str) -> str:
    return text if len(text) <= HYPOTHESIS_LIMIT else text[: HYPOTHESIS_LIMIT - 3] + "..."
