"""The tiers of the scale ladder, from `configs/ladder.toml`, validated at load.

A tier names few dials (depth, width, context) and derives the rest in the recipe, a budget in
tokens or seconds, the hard wall-clock limit of one experiment, how many held-out bytes the
evaluator scores, and its promotion rule (see rules.py; keys default to PromotionRule's).
Two top-level keys apply to the whole ladder: require_approval and near_duplicate_similarity
(see near_duplicates.py).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bus.messages import BudgetKind, RunSpec
from scale_ladder.rules import PromotionRule

DEFAULT_LADDER = Path("configs/ladder.toml")
NEAR_DUPLICATE_SIMILARITY = 0.9


class LadderConfigError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Tier:
    index: int
    name: str
    depth: int
    width: int
    context: int
    budget_kind: BudgetKind
    budget: float
    time_limit_s: float
    eval_tokens: int
    seeds: int
    rule: PromotionRule
    max_concurrent: int = 0  # experiments of this tier running at once, swarm-wide; 0 = any

    @property
    def dials(self) -> dict[str, int]:
        return {"depth": self.depth, "width": self.width, "context": self.context}

    def run_spec(
        self,
        run_id: str,
        seed: int,
        champion_version: int = 1,
        idea_id: str = "",
        patch: str = "",
        target: str = "bytelm",
    ) -> RunSpec:
        """One experiment at this tier: its budget, dials and limits."""
        return RunSpec(
            run_id=run_id,
            tier=self.index,
            seed=seed,
            champion_version=champion_version,
            budget_kind=self.budget_kind,
            budget=self.budget,
            idea_id=idea_id,
            patch=patch,
            target=target,
            dials=self.dials,
            time_limit_s=self.time_limit_s,
            eval_tokens=self.eval_tokens,
        )


_FIELDS: dict[str, type] = {
    "name": str,
    "depth": int,
    "width": int,
    "context": int,
    "budget_kind": str,
    "budget": float,
    "time_limit_s": float,
    "eval_tokens": int,
    "seeds": int,
}


# Promotion keys are optional; their defaults are PromotionRule's.
_RULE_FIELDS: dict[str, type] = {
    "min_improvement": float,
    "sigmas": float,
    "top_fraction": float,
    "cold_start": int,
    "max_seeds": int,
}
_OPTIONAL_FIELDS: dict[str, type] = {"max_concurrent": int}


@dataclass(frozen=True, slots=True)
class LadderConfig:
    tiers: list[Tier]
    require_approval: bool = False  # a person approves every change before it is stacked
    # an idea this similar to one tried on the same champion is refused (1.0: identical only)
    near_duplicate_similarity: float = NEAR_DUPLICATE_SIMILARITY


def load_ladder(path: Path | None = None) -> LadderConfig:
    path = path or DEFAULT_LADDER
    data = _read(path)
    unknown = set(data) - {"tier", "require_approval", "near_duplicate_similarity"}
    if unknown:
        raise LadderConfigError(
            f"{path}: unknown key {sorted(unknown)[0]}; "
            "expected require_approval, near_duplicate_similarity and [[tier]] tables"
        )
    approval = data.get("require_approval", False)
    if not isinstance(approval, bool):
        raise LadderConfigError(f"{path}: require_approval must be true or false")
    similarity = data.get("near_duplicate_similarity", NEAR_DUPLICATE_SIMILARITY)
    if (
        not isinstance(similarity, int | float)
        or isinstance(similarity, bool)
        or not 0 < similarity <= 1
    ):
        raise LadderConfigError(
            f"{path}: near_duplicate_similarity must be a number in (0, 1], got {similarity!r}"
        )
    tiers = data.get("tier")
    if not isinstance(tiers, list) or not tiers:
        raise LadderConfigError(f"{path}: no [[tier]] tables")
    return LadderConfig(
        [_tier(i, raw, path) for i, raw in enumerate(tiers)], approval, float(similarity)
    )


def load_tiers(path: Path | None = None) -> list[Tier]:
    return load_ladder(path).tiers


def _read(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise LadderConfigError(f"ladder config not found: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise LadderConfigError(f"{path}: not valid TOML: {exc}") from None


def _tier(index: int, raw: Any, path: Path) -> Tier:
    where = f"{path}: tier[{index}]"
    if not isinstance(raw, dict):
        raise LadderConfigError(f"{where} must be a table")
    for key in raw:
        if key not in _FIELDS and key not in _RULE_FIELDS and key not in _OPTIONAL_FIELDS:
            known = ", ".join([*_FIELDS, *_RULE_FIELDS, *_OPTIONAL_FIELDS])
            raise LadderConfigError(f"{where}: unknown key {key}; known: {known}")
    values: dict[str, Any] = {}
    for key, kind in _FIELDS.items():
        if key not in raw:
            raise LadderConfigError(f"{where}: missing key {key}")
        values[key] = _value(where, key, kind, raw[key], positive=True)
    rule_values = {
        key: _value(where, key, kind, raw[key], positive=key not in ("top_fraction",))
        for key, kind in _RULE_FIELDS.items()
        if key in raw
    }
    rule = PromotionRule(seeds=values["seeds"], **rule_values)
    if "max_concurrent" in raw:
        values["max_concurrent"] = _value(where, "max_concurrent", int, raw["max_concurrent"], True)
    if rule.max_seeds < rule.seeds:
        raise LadderConfigError(
            f"{where}.max_seeds ({rule.max_seeds}) is below seeds ({rule.seeds})"
        )
    if not 0 <= rule.top_fraction < 1:
        raise LadderConfigError(f"{where}.top_fraction must be in [0, 1), got {rule.top_fraction}")
    try:
        values["budget_kind"] = BudgetKind(values["budget_kind"])
    except ValueError:
        raise LadderConfigError(f"{where}.budget_kind must be 'tokens' or 'seconds'") from None
    if values["width"] % 32:
        raise LadderConfigError(f"{where}.width must be a multiple of 32 (the head size)")
    return Tier(index=index, rule=rule, **values)


def _value(where: str, key: str, kind: type, value: Any, positive: bool) -> Any:
    ok = isinstance(value, kind) or (kind is float and isinstance(value, int))
    if not ok or isinstance(value, bool):
        raise LadderConfigError(f"{where}.{key} must be {kind.__name__}, got {value!r}")
    if positive and kind in (int, float) and value <= 0:
        raise LadderConfigError(f"{where}.{key} must be positive, got {value!r}")
    return float(value) if kind is float else value
