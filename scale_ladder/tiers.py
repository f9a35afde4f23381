"""The tiers of the scale ladder, from `ladder.toml`, validated at load.

A tier names its dials, a budget, the hard wall-clock limit of one experiment and its promotion
rule (see rules.py; keys default to PromotionRule's). For the built-in bytelm (and synthetic)
target the dials are depth, width and context (the recipe derives the rest), the budget is in
tokens or seconds, and eval_tokens says how many held-out bytes the evaluator scores. A command
target's tier takes free-form dials (`[tier.dials] n_layer = 4`) and a budget in the command's
own unit (budget_kind "units", the default there) or in tokens or seconds.
Two top-level keys apply to the whole ladder: require_approval and near_duplicate_similarity
(see near_duplicates.py).
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bus.messages import BudgetKind, Dial, RunSpec
from scale_ladder.rules import PromotionRule

DEFAULT_LADDER = Path(__file__).resolve().parents[1] / "configs" / "ladder.toml"
NEAR_DUPLICATE_SIMILARITY = 0.9
BYTELM_DIALS = ("depth", "width", "context")
DIAL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# A command's placeholders the tier itself fills: a dial may not take their names.
RESERVED_DIALS = ("seed", "tier", "budget")


class LadderConfigError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Tier:
    index: int
    name: str
    budget_kind: BudgetKind
    budget: float
    time_limit_s: float
    seeds: int
    rule: PromotionRule
    dials: Mapping[str, Dial] = field(default_factory=dict)
    eval_tokens: int = 0  # bytelm: held-out bytes the evaluator scores
    max_concurrent: int = 0  # experiments of this tier running at once, swarm-wide; 0 = any

    @property
    def depth(self) -> int:
        return int(self.dials["depth"])

    @property
    def width(self) -> int:
        return int(self.dials["width"])

    @property
    def context(self) -> int:
        return int(self.dials["context"])

    def run_spec(
        self,
        run_id: str,
        seed: int,
        champion_version: int = 1,
        idea_id: str = "",
        patch: str = "",
        target: str = "bytelm",
        corpus_hash: str = "",
        recipe_sha: str = "",
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
            dials=dict(self.dials),
            time_limit_s=self.time_limit_s,
            eval_tokens=self.eval_tokens,
            corpus_hash=corpus_hash,
            recipe_sha=recipe_sha,
        )


_FIELDS: dict[str, type] = {
    "name": str,
    "budget": float,
    "time_limit_s": float,
    "seeds": int,
}
# The built-in targets' tiers need these too; a command target's tiers may not have them.
_BYTELM_FIELDS: dict[str, type] = {
    "depth": int,
    "width": int,
    "context": int,
    "budget_kind": str,
    "eval_tokens": int,
}


# Promotion keys are optional; their defaults are PromotionRule's.
_RULE_FIELDS: dict[str, type] = {
    "min_improvement": float,
    "sigmas": float,
    "top_fraction": float,
    "cold_start": int,
    "max_seeds": int,
    "spot_checks": float,
    "direct_entries": float,
}
_OPTIONAL_FIELDS: dict[str, type] = {"max_concurrent": int, "deterministic": bool}
_COMMAND_FIELDS: dict[str, type] = {"budget_kind": str, "dials": dict}


@dataclass(frozen=True, slots=True)
class LadderConfig:
    tiers: list[Tier]
    require_approval: bool = False  # a person approves every change before it is stacked
    # an idea this similar to one tried on the same champion is refused (1.0: identical only)
    near_duplicate_similarity: float = NEAR_DUPLICATE_SIMILARITY


# Rule keys that may be 0: the rank gate, spot checks and direct entries off, and a screening
# tier (sigmas = 0, rules.py); the rest must be positive.
_MAY_BE_ZERO = ("top_fraction", "spot_checks", "sigmas", "direct_entries")


def load_ladder(path: Path | None = None, target: str = "bytelm") -> LadderConfig:
    """The ladder in `path` for `target` (bytelm, synthetic or command)."""
    path = path or DEFAULT_LADDER
    return ladder_from(read_ladder_file(path), str(path), target)


def ladder_from(data: dict[str, Any], path: str, target: str = "bytelm") -> LadderConfig:
    """The ladder a ladder file's parsed TOML describes, checked as a file is (errors name
    `path`): what `swarm whatif --sweep` builds its variants with."""
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
    built = [_tier(i, raw, path, target) for i, raw in enumerate(tiers)]
    if built[0].rule.direct_entries:
        raise LadderConfigError(
            f"{path}: {_named(0, built[0].name)}.direct_entries must be 0: every idea enters "
            "tier 0 unless a tier above sends it straight there (set it on the tiers above)"
        )
    top = built[-1]
    if not top.rule.deterministic:
        top = built[-1] = replace(top, rule=replace(top.rule, top=True))
        if top.rule.sigmas < 1:
            raise LadderConfigError(
                f"{path}: {_named(top.index, top.name)}.sigmas must be at least 1, got "
                f"{top.rule.sigmas}: the top tier's noise gate is what guards the champion "
                "(sigmas = 0 makes a screening tier, for the tiers below it)"
            )
        if any(t.rule.sigmas == 0 for t in built[:-1]):  # the top is the one gate: rules.py
            built[-1] = replace(top, rule=replace(top.rule, stacks=True))
    return LadderConfig(built, approval, float(similarity))


def load_tiers(path: Path | None = None, target: str = "bytelm") -> list[Tier]:
    return load_ladder(path, target).tiers


def read_ladder_file(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise LadderConfigError(f"ladder config not found: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise LadderConfigError(f"{path}: not valid TOML: {exc}") from None
    except (UnicodeDecodeError, IsADirectoryError, PermissionError) as exc:
        raise LadderConfigError(f"ladder config {path}: cannot be read: {exc}") from None


def _named(index: int, name: object) -> str:
    """How an error names a tier: its place (from 0, as RunSpecs and the ledger count tiers)
    and, where it has one, its name, so that the table in the file is found at a glance."""
    return f'tier[{index}] ("{name}")' if isinstance(name, str) and name else f"tier[{index}]"


def _tier(index: int, raw: Any, path: str, target: str) -> Tier:
    where = f"{path}: {_named(index, raw.get('name') if isinstance(raw, dict) else None)}"
    if not isinstance(raw, dict):
        raise LadderConfigError(f"{where} must be a table")
    command = target == "command"
    # A command target's tier may still name bytelm's keys (ladders written before free-form
    # dials): depth, width and context are dials like any other there, and nothing is required.
    own = _COMMAND_FIELDS | _BYTELM_FIELDS if command else _BYTELM_FIELDS
    for key in raw:
        if key == "dials" and not command:
            raise LadderConfigError(
                f"{where}: [tier.dials] is for a command target's tiers; {target}'s tiers name "
                "depth, width and context (is target.kind right?)"
            )
        if key not in {**_FIELDS, **own, **_RULE_FIELDS, **_OPTIONAL_FIELDS}:
            known = ", ".join([*_FIELDS, *own, *_RULE_FIELDS, *_OPTIONAL_FIELDS])
            raise LadderConfigError(f"{where}: unknown key {key}; known: {known}")
    required = _FIELDS if command else {"name": str, **_BYTELM_FIELDS, **_FIELDS}
    deterministic = raw.get("deterministic", False)
    if not isinstance(deterministic, bool):
        raise LadderConfigError(
            f"{where}.deterministic must be true or false, got {deterministic!r}"
        )
    if deterministic:  # one run per recipe: another seed would give the same number again
        for key in ("seeds", "max_seeds"):
            if raw.get(key, 1) != 1:
                raise LadderConfigError(
                    f"{where}: a deterministic tier runs each recipe once: {key} must be 1 "
                    f"(or left out), got {raw[key]!r}"
                )
        raw = {**raw, "seeds": 1}
    values: dict[str, Any] = {}
    for key, kind in required.items():
        if key not in raw:
            raise LadderConfigError(f"{where}: missing key {key}")
        values[key] = _value(where, key, kind, raw[key], positive=True)
    rule_values = {
        key: _value(where, key, kind, raw[key], positive=key not in _MAY_BE_ZERO)
        for key, kind in _RULE_FIELDS.items()
        if key in raw
    }
    if deterministic:
        rule_values["max_seeds"] = 1
    # Only the first tier confirms a one-seed win on a second seed (rules.PromotionRule).
    rule = PromotionRule(
        seeds=values["seeds"],
        confirm_wins=index == 0 and not deterministic,
        deterministic=deterministic,
        **rule_values,
    )
    if "max_concurrent" in raw:
        values["max_concurrent"] = _value(where, "max_concurrent", int, raw["max_concurrent"], True)
    if rule.max_seeds < rule.seeds:
        raise LadderConfigError(
            f"{where}.max_seeds ({rule.max_seeds}) is below seeds ({rule.seeds})"
        )
    if rule.sigmas < 0:
        raise LadderConfigError(
            f"{where}.sigmas must be positive (or 0 for a screening tier below the top), got "
            f"{rule.sigmas}"
        )
    if rule.max_seeds < 2 and not deterministic:  # no pair spread, no pooled σ: all rejected
        raise LadderConfigError(
            f"{where}.max_seeds must be at least 2: one seed gives no noise estimate, so no idea "
            "could pass; if the metric does not depend on the seed, say deterministic = true"
        )
    if not 0 <= rule.top_fraction < 1:
        raise LadderConfigError(f"{where}.top_fraction must be in [0, 1), got {rule.top_fraction}")
    if not 0 <= rule.spot_checks <= 1:
        raise LadderConfigError(f"{where}.spot_checks must be in [0, 1], got {rule.spot_checks}")
    if not 0 <= rule.direct_entries <= 1:
        raise LadderConfigError(
            f"{where}.direct_entries must be in [0, 1], got {rule.direct_entries}"
        )
    kinds = ("tokens", "seconds", "units") if command else ("tokens", "seconds")
    kind = raw.get("budget_kind", "units")
    if kind not in kinds:
        raise LadderConfigError(f"{where}.budget_kind must be {' or '.join(map(repr, kinds))}")
    values["budget_kind"] = BudgetKind(kind)
    if command:
        values["dials"] = _free_dials(where, raw.get("dials", {}))
        for name in BYTELM_DIALS:
            if name in raw:
                if name in values["dials"]:
                    raise LadderConfigError(f"{where}: {name} is given twice (and in dials)")
                values["dials"][name] = _value(where, name, int, raw[name], positive=True)
        if "eval_tokens" in raw:
            values["eval_tokens"] = _value(where, "eval_tokens", int, raw["eval_tokens"], True)
        return Tier(index=index, rule=rule, **values)
    if values["width"] % 32:
        raise LadderConfigError(f"{where}.width must be a multiple of 32 (the head size)")
    if values["budget_kind"] is BudgetKind.TOKENS and values["budget"] < values["context"]:
        # No batch fits: every run would end untrained, OK, and be judged (a newcomer's typo)
        raise LadderConfigError(
            f"{where}.budget ({values['budget']:g} tokens) is less than one row of the tier's "
            f"context ({values['context']} tokens): no run could train on a single batch"
        )
    values["dials"] = {name: values.pop(name) for name in BYTELM_DIALS}
    return Tier(index=index, rule=rule, **values)


def _free_dials(where: str, table: Any) -> dict[str, Dial]:
    """A command target's `[tier.dials]`: names a command can take as {name} and SWARM_DIAL_*,
    and plain values (numbers, true/false, strings)."""
    if not isinstance(table, dict):
        raise LadderConfigError(f"{where}.dials must be a table, e.g. [tier.dials] n_layer = 4")
    for name, value in table.items():
        if not DIAL_NAME.fullmatch(name) or name in RESERVED_DIALS:
            raise LadderConfigError(
                f"{where}.dials: {name!r} cannot be a dial name (letters, digits and _, not "
                f"{', '.join(RESERVED_DIALS)})"
            )
        if not isinstance(value, bool | int | float | str):
            raise LadderConfigError(
                f"{where}.dials.{name} must be a number, true/false or a string, got {value!r}"
            )
        if isinstance(value, float) and not math.isfinite(value):
            raise LadderConfigError(f"{where}.dials.{name} must be a finite number, got {value}")
        if isinstance(value, str) and not value.isprintable():  # it goes into a command line
            raise LadderConfigError(f"{where}.dials.{name}: control characters in {value!r}")
    return dict(table)


def _value(where: str, key: str, kind: type, value: Any, positive: bool) -> Any:
    ok = isinstance(value, kind) or (kind is float and isinstance(value, int))
    if not ok or isinstance(value, bool):
        raise LadderConfigError(f"{where}.{key} must be {kind.__name__}, got {value!r}")
    if kind is float and not math.isfinite(value):  # nan passes `<= 0`; inf is no limit
        raise LadderConfigError(f"{where}.{key} must be a finite number, got {value!r}")
    if positive and kind in (int, float) and value <= 0:
        raise LadderConfigError(f"{where}.{key} must be positive, got {value!r}")
    return float(value) if kind is float else value
