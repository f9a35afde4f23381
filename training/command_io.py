"""What a command target's run command is given, and how its metric is read back.

In: the run's seed, tier, budget and the tier's dials, as `{name}` placeholders in the command
text (shell-quoted: the command runs through /bin/sh) and as SWARM_* environment variables, so
`python train.py --seed={seed} --n_layer={n_layer}` needs no wrapper. Only `{identifier}` is a
placeholder; `${VAR}` is the shell's and `{{`/`}}` are literal braces.

Out: the metric, from the command's output, the last one printed winning: a `name: value` line,
a regular expression with one group, or the last JSON object printed on a line of its own.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from bus.messages import RunSpec

# `{name}` not preceded by `$` (shell) or another brace (a literal `{{name}}`).
PLACEHOLDER = re.compile(r"(?<![${])\{([A-Za-z_][A-Za-z0-9_]*)\}(?!\})")
RUN_FIELDS = ("seed", "tier", "budget")
MAX_JSON_LINE = 1 << 16  # a longer line is not read as a JSON object
# The metric is read from the end of the output: a command may print gigabytes, and a pattern
# run over all of it could take longer than the run itself (nothing times the reading).
METRIC_TAIL_BYTES = 1 << 20


class CommandError(ValueError):
    """A run command or metric setting that cannot work; says what to change."""


def placeholders(command: str) -> set[str]:
    return set(PLACEHOLDER.findall(command))


def check_placeholders(
    command: str,
    tiers: Iterable[tuple[str, Mapping[str, object]]],
    key: str = "target.run",
    extra: tuple[str, ...] = (),
) -> None:
    """Every placeholder in `command` (the config's `key`) is filled at every tier (given as
    name, dials); `extra` names the ones this command gets besides the run's."""
    for tier, dials in tiers:
        fields = (*RUN_FIELDS, *extra)
        unknown = sorted(placeholders(command) - set(fields) - set(dials))
        if unknown:
            known = ", ".join("{" + n + "}" for n in (*fields, *dials))
            raise CommandError(
                f"{key}: {{{unknown[0]}}} is neither a run field nor a dial of tier "
                f"{tier!r} (it has {known}); write $ before it for a shell variable, or double "
                "the braces for literal ones"
            )


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"  # what command-line parsers take
    if isinstance(value, float) and value.is_integer():
        return str(int(value))  # a budget of 300.0 is `300` to an int flag
    return str(value)


def run_values(spec: RunSpec) -> dict[str, str]:
    values = {"seed": str(spec.seed), "tier": str(spec.tier), "budget": _text(spec.budget)}
    return values | {name: _text(v) for name, v in spec.dials.items()}


def render(command: str, spec: RunSpec, extra: Mapping[str, str] | None = None) -> str:
    """The command with its placeholders filled, each value quoted for the shell."""
    values = run_values(spec) | dict(extra or {})

    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:  # checked at start-up; a RunSpec from elsewhere may lack it
            raise CommandError(f"no value for {{{name}}} in this run's command")
        return shlex.quote(values[name])

    return PLACEHOLDER.sub(fill, command).replace("{{", "{").replace("}}", "}")


def environment(spec: RunSpec, device: str) -> dict[str, str]:
    values = run_values(spec)
    env = {
        "SWARM_BUDGET_KIND": spec.budget_kind.value,
        "SWARM_BUDGET": values["budget"],
        "SWARM_SEED": values["seed"],
        "SWARM_TIER": values["tier"],
        "SWARM_DIALS": json.dumps(spec.dials),
        "SWARM_DEVICE": device,
    }
    return env | {f"SWARM_DIAL_{name.upper()}": values[name] for name in spec.dials}


@dataclass(frozen=True, slots=True)
class MetricReader:
    name: str
    source: str = "line"  # line | regex | json
    pattern: str = ""  # regex: one group, the number

    def check(self) -> None:
        if not self.name:
            raise CommandError("target.metric: the metric needs a name")
        if self.source == "regex":
            try:
                groups = re.compile(self.pattern).groups
            except re.error as exc:
                why = f"target.metric_regex: not a regular expression: {exc}"
                raise CommandError(why) from None
            if groups != 1:
                raise CommandError(
                    f"target.metric_regex must have exactly one group (the number), has {groups}"
                )
        elif self.pattern:
            raise CommandError('target.metric_regex is set: also set metric_from = "regex"')

    def expected(self) -> str:
        """What the output lacked, for a run's reason."""
        if self.source == "regex":
            return f"no match of metric_regex {self.pattern!r} with a number in the output"
        if self.source == "json":
            return f'no JSON object with a number under "{self.name}" in the output'
        return f"no `{self.name}: <number>` line in the output"

    def read(self, output: str) -> float | None:
        """The metric in the end of `output` (METRIC_TAIL_BYTES; the last one printed wins)."""
        output = output[-METRIC_TAIL_BYTES:]
        if self.source == "regex":
            found = [m.group(1) for m in re.finditer(self.pattern, output, re.MULTILINE)]
            return _number(found[-1]) if found else None
        if self.source == "json":
            return _last_json(output, self.name)
        return parse_metric(output, self.name)


def parse_metric(output: str, name: str) -> float | None:
    """The last `name: value` line's value, if it is a finite number."""
    # [ \t], not \s: \s spans newlines, and the search went quadratic in blank lines.
    pattern = re.compile(
        rf"^[ \t]*{re.escape(name)}[ \t]*:[ \t]*([-+0-9.eE]+|nan|inf)[ \t]*\r?$", re.MULTILINE
    )
    matches = pattern.findall(output)
    return _number(matches[-1]) if matches else None


def _last_json(output: str, key: str) -> float | None:
    for line in reversed(output.splitlines()):
        line = line.strip()
        if not (line.startswith("{") and line.endswith("}")) or len(line) > MAX_JSON_LINE:
            continue
        try:
            found = json.loads(line)
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
            continue
        if isinstance(found, dict):  # the last object printed decides, with or without the key
            value = found.get(key)
            is_number = isinstance(value, int | float) and not isinstance(value, bool)
            return _number(value) if is_number else None
    return None


def _number(value: object) -> float | None:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):  # an int of 400 digits is no float
        return None
    return number if math.isfinite(number) else None
