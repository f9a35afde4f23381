"""Which brain each researcher gets: `tpe`, or groups such as `anthropic:6,tpe:2`.

Offline brains: `tpe` (the default: Optuna's TPE over the recipe's constants,
agents/model_brain.py), `gp` (Optuna's Gaussian process instead) and `heuristic` (the
hand-written personas); `portfolio` asks TPE or a heuristic persona for each idea, whichever
has done better (agents/portfolio_brain.py). A group
without a count takes the researchers the others leave (at most one may), so
`--agents 8 --brain anthropic:6,tpe` is 6 Claude researchers and 2 offline ones.
"""

from __future__ import annotations

from dataclasses import dataclass

BRAINS = ("tpe", "gp", "heuristic", "portfolio", "anthropic", "openai")
MODEL_BRAINS = ("tpe", "gp")  # model-based: one shared study per host (agents/model_brain.py)
LLM_BRAINS = ("anthropic", "openai")


class BrainSpecError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class BrainGroup:
    brain: str
    count: int


def parse_brain_groups(spec: str, total: int) -> tuple[BrainGroup, ...]:
    """The groups `spec` names for `total` researchers; BrainSpecError says what is wrong."""
    parts = [p.strip() for p in spec.split(",")]
    if not spec.strip() or not all(parts):
        raise BrainSpecError(f"empty brain in {spec!r}; use e.g. 'anthropic:6,heuristic:2'")
    named: list[tuple[str, int | None]] = []
    for part in parts:
        brain, _, count = part.partition(":")
        brain = brain.strip()
        if brain not in BRAINS:
            raise BrainSpecError(f"unknown brain {brain!r} in {spec!r}; choose from {BRAINS}")
        if any(b == brain for b, _ in named):
            raise BrainSpecError(f"brain {brain!r} named twice in {spec!r}")
        if not count:
            named.append((brain, None))
            continue
        if not count.strip().isdigit():
            raise BrainSpecError(f"count of {brain!r} in {spec!r} must be a whole number")
        if int(count) == 0:  # (`--agents 0` is how to run no researchers)
            raise BrainSpecError(f"count of {brain!r} in {spec!r} must be 1 or more")
        named.append((brain, int(count)))
    open_groups = [b for b, n in named if n is None]
    counted = sum(n for _, n in named if n is not None)
    if len(open_groups) > 1:
        raise BrainSpecError(
            f"{spec!r}: only one brain may go without a count (it takes the rest of the agents)"
        )
    if open_groups:
        if counted > total:
            raise BrainSpecError(f"{spec!r} names {counted} researchers, more than {total}")
        rest = total - counted
        groups = [BrainGroup(b, rest if n is None else n) for b, n in named]
    else:
        if counted != total:
            raise BrainSpecError(
                f"{spec!r} names {counted} researchers but the swarm has {total}; "
                "give --agents the same total or leave one brain without a count"
            )
        groups = [BrainGroup(b, n or 0) for b, n in named]
    return tuple(g for g in groups if g.count > 0)


def total_of(spec: str) -> int | None:
    """The number of researchers a fully counted spec names (None if a group has no count)."""
    total = 0
    for part in spec.split(","):
        _, _, count = part.partition(":")
        if not count.strip().isdigit():
            return None
        total += int(count)
    return total
