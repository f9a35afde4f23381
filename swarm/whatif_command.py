"""`swarm whatif`: the workspace's history decided again under other promotion settings.

    swarm whatif --ladder other.toml          one other ladder file
    swarm whatif --sweep sigmas=1,2,3         the swarm's ladder with one key set, per value
    swarm whatif --sweep t1.top_fraction=0,0.25,0.5 --out whatif.parquet

The engine is scale_ladder/whatif.py (the real ladder, fed the record). This module reads the
history (the running ledger over the bus, or the stopped ledger's file), builds the ladders,
prints the answer and writes it as Parquet for `swarm sql`-style queries.
"""

from __future__ import annotations

import asyncio
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bus.messages import Message
from ledger.duckdb_store import LedgerLocked, open_database
from ledger.readback import KIND_ORDER, read_messages
from ledger.remote_events import ledger_events
from ledger.sql_protocol import LedgerUnavailable
from scale_ladder.calibration import CALIBRATED
from scale_ladder.ladder import Ladder
from scale_ladder.tiers import LadderConfig, ladder_from, load_ladder, read_ladder_file
from scale_ladder.whatif import (
    Comparison,
    compare,
    decide_again,
    recorded,
    runs_differ,
    specs_differ,
)
from swarm.config import ConfigError, SwarmConfig
from swarm.config_files import ladder_path
from swarm.errors import SwarmError
from swarm.ladder_process import make_ladder
from swarm.sql_client import connect_running
from swarm.workspace import Workspace

# Promotion keys a sweep may set (the rest of a tier defines what its runs are).
SWEEP_KEYS = ("min_improvement", "sigmas", "top_fraction", "cold_start", "seeds", "max_seeds")
MAX_SETTINGS = 8  # each replays the whole history: a sweep of thousands would take hours


@dataclass(frozen=True)
class Setting:
    label: str  # what a person reads: "ladder.toml with sigmas=1"
    ladder: LadderConfig


@dataclass(frozen=True)
class Answer:
    fidelity: Comparison  # the recorded settings replayed, against the record
    results: list[tuple[Setting, Comparison]]


async def whatif(
    config: SwarmConfig, workspace: Workspace, files: list[Path], sweep: str | None
) -> Answer:
    messages, base = await history(config, workspace)
    settings = [Setting(f"{path}", load_ladder(path, config.target.kind)) for path in files]
    if sweep:
        settings += sweep_settings(ladder_path(config), config.target.kind, sweep)
    if not settings:
        raise ConfigError("swarm whatif needs --ladder FILE or --sweep KEY=V1,V2,...")
    for setting in settings:
        if why := runs_differ(base.tiers, setting.ladder.tiers):
            raise ConfigError(f"{setting.label}: {why}; a what-if changes promotion settings only")
    return await decide_in_thread(messages, base, settings, workspace)


async def history(config: SwarmConfig, workspace: Workspace) -> tuple[list[Message], Ladder]:
    """The workspace's recorded history and a ladder of the settings it ran with (its seeds
    included), checked to be the ladder its runs were made under."""
    if not (workspace.ledger_path.exists() or workspace.is_running()):
        raise SwarmError(f"no swarm has run in {workspace.root} (or pass --workspace)")
    if not workspace.seed_secret_file.exists():  # never made here: seed_secret() would
        raise SwarmError(
            f"no seed secret in {workspace.run_dir}: the what-if asks for the seeds the swarm "
            "ran, and they derive from it (a ledger copied without its workspace cannot say)"
        )
    messages = await read_history(workspace, config)
    if not messages:
        raise SwarmError(f"the ledger in {workspace.root} holds no history yet")
    base = make_ladder(config, workspace.seed_secret())
    if why := specs_differ(base.tiers, messages):
        raise ConfigError(
            f"{ladder_path(config)}: {why}: it is not the ladder the swarm ran with, so its "
            "settings cannot be replayed as the record's"
        )
    return messages, base


async def decide_in_thread(
    messages: list[Message], base: Ladder, settings: list[Setting], workspace: Workspace
) -> Answer:
    """decide_all off the event loop (the web view's: seconds of CPU per setting on a long
    history), with a note where the workspace ran under more than one ladder file."""
    answer = await asyncio.to_thread(decide_all, messages, base, settings)
    earlier = sorted(workspace.run_dir.glob("ladder.*.toml"))
    if earlier:
        answer.fidelity.notes.append(
            f"this workspace ran under {len(earlier) + 1} ladder files (the earlier ones in "
            f"{workspace.run_dir}/ladder.N.toml); it is replayed under the last: verdicts made "
            "under the others may differ for that reason alone"
        )
    return answer


def decide_all(messages: list[Message], base: Ladder, settings: list[Setting]) -> Answer:
    """The recorded settings replayed (the fidelity check), then each setting."""
    record = recorded(messages)
    fidelity = compare(record, decide_again(messages, fresh_ladder(base, None)), base.tiers)
    results = []
    for setting in settings:
        again = decide_again(messages, fresh_ladder(base, setting.ladder))
        results.append((setting, compare(record, again, setting.ladder.tiers)))
    return Answer(fidelity, results)


def fresh_ladder(base: Ladder, other: LadderConfig | None) -> Ladder:
    """A new ladder like the swarm's, with `other`'s tiers and rules; it stacks without waiting
    for a person (approvals are not replayed)."""
    return Ladder(
        other.tiers if other else base.tiers,
        base.editable,
        base.initial_source,
        target=base.target,
        lower_is_better=base.lower_is_better,
        near_duplicate_similarity=(
            other.near_duplicate_similarity if other else base.near_duplicate_similarity
        ),
        fixed=base.fixed,
        seed_secret=base.seed_secret,
    )


def sweep_settings(path: Path, target: str, sweep: str) -> list[Setting]:
    """`KEY=V1,V2,...` (every tier) or `TIER.KEY=...` (the tier of that name): one ladder per
    value, checked as a ladder file is."""
    key, sep, values = sweep.partition("=")
    tier_name, dot, name = key.strip().rpartition(".")
    if not sep or not values.strip() or name not in SWEEP_KEYS:
        raise ConfigError(
            f"--sweep {sweep!r}: expected KEY=V1,V2,... or TIER.KEY=..., KEY one of "
            f"{', '.join(SWEEP_KEYS)}"
        )
    data = read_ladder_file(path)
    names = [t.get("name") for t in data.get("tier", []) if isinstance(t, dict)]
    if dot and tier_name not in names:
        raise ConfigError(f"--sweep {sweep!r}: no tier named {tier_name!r} (tiers: {names})")
    texts = values.split(",")
    if len(texts) > MAX_SETTINGS:
        raise ConfigError(f"--sweep {key}: {len(texts)} values, at most {MAX_SETTINGS} at a time")
    settings = []
    for text in texts:
        value = _literal(text.strip(), sweep)
        tiers = [
            {**t, name: value} if not dot or t.get("name") == tier_name else t for t in data["tier"]
        ]
        label = f"{path.name} with {key.strip()}={text.strip()}"
        settings.append(Setting(label, ladder_from({**data, "tier": tiers}, label, target)))
    return settings


def check_out(out: Path, suffix: str, workspace: Workspace, config: SwarmConfig) -> None:
    """Before any work: `out` may be written, and is none of the files the swarm keeps."""
    where = out.resolve()
    if where.suffix != suffix:
        raise ConfigError(f"--out {out}: expected a {suffix} file")
    if not where.parent.is_dir():
        raise ConfigError(f"--out {out}: no folder {where.parent}")
    if where.is_dir():
        raise ConfigError(f"--out {out} is a folder")
    if where.is_relative_to(workspace.root.resolve()):
        raise ConfigError(f"--out {out} is inside the workspace {workspace.root}: not there")
    kept = (ladder_path(config), Path(config.agents.program), workspace.run_dir / "swarm.toml")
    for path in kept:
        if where.exists() and path.exists() and where.samefile(path):
            raise ConfigError(f"--out {out} is {path}, which the swarm reads: not there")
    if suffix == ".toml" and where.exists() and CALIBRATED not in where.read_text(errors="replace"):
        raise ConfigError(f"--out {out} exists and is no proposal of swarm calibrate: not there")


def _literal(text: str, sweep: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        raise ConfigError(f"--sweep {sweep!r}: {text!r} is not a number") from None


async def read_history(workspace: Workspace, config: SwarmConfig) -> list[Message]:
    """The ladder's kinds of event, in stream order: from the running ledger (as the cli role,
    through the SQL gate), or from the stopped ledger's file."""
    nc = await connect_running(workspace, config, "swarm-whatif")
    if nc is not None:
        try:
            found = await ledger_events(nc, KIND_ORDER, 0, 2**63 - 1)
        finally:
            await nc.close()
        return [message for _, message in found]
    if not workspace.ledger_path.exists():
        raise SwarmError(f"no ledger in {workspace.root}: no swarm has run there")
    try:
        con = open_database(workspace.ledger_path, read_only=True)
    except LedgerLocked:
        raise LedgerUnavailable(f"{workspace.ledger_path} is held by a running ledger") from None
    try:
        return read_messages(con, KIND_ORDER)
    finally:
        con.close()


# --- what a person reads -------------------------------------------------------------------

COLUMNS = (
    "tier",
    "decided",
    "same",
    "changed",
    "earlier",
    "later",
    "new",
    "open",
    "diverged",
    "runs",
    "recorded",
    "not needed",
    "unmeasured",
)


def tier_rows(comparison: Comparison) -> list[tuple[Any, ...]]:
    return [
        (
            t.name,
            t.decided,
            t.same,
            len(t.changed),
            len(t.earlier),
            len(t.later),
            len(t.reached),
            len(t.open),
            len(t.diverged),
            t.runs,
            t.recorded_runs,
            t.not_needed,
            t.unmeasured,
        )
        for t in comparison.tiers
    ]


def render(answer: Answer, details: int = 10) -> str:
    lines = [
        "what-if: the recorded history decided again, with only the runs that exist",
        "  decided: ideas with a verdict at the tier in the record (but diverged ones) = same"
        " (earlier/later: the same on fewer/more seeds)",
        "  + changed + open;",
        "  changed: another verdict; open: none here (it waits on a run nobody made, or never"
        " got there); new: decided here, not in the record;",
        "  diverged: admitted in the record, refused here, written for a champion these"
        " settings never made (not theirs to judge);",
        "  unmeasured: runs asked for that nobody made (needed only here, or in flight when the"
        " swarm stopped)",
        "",
        fidelity_line(answer.fidelity),
    ]
    for setting, comparison in answer.results:
        lines += ["", f"== {setting.label}", *_table(comparison)]
        lines.append(_stacks_line(comparison))
        lines += _details(comparison, details)
    if len(answer.results) > 1:
        lines += ["", "== side by side", *_side_by_side(answer)]
    return "\n".join(lines)


def fidelity_line(fidelity: Comparison) -> str:
    decided = sum(t.decided for t in fidelity.tiers)
    same = sum(t.same for t in fidelity.tiers)
    stacks = "the same" if fidelity.recorded_stacks == fidelity.whatif_stacks else "differ"
    line = (
        f"the recorded settings, replayed so: {same} of {decided} recorded verdicts the same, "
        f"stacks {stacks}"
    )
    return "\n".join([*(f"note: {note}" for note in fidelity.notes), line])


def _table(comparison: Comparison) -> list[str]:
    rows = [COLUMNS, *tier_rows(comparison)]
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(COLUMNS))]
    return ["  ".join(str(v).rjust(w) for v, w in zip(row, widths, strict=True)) for row in rows]


def _stacks_line(comparison: Comparison) -> str:
    def names(ideas: list[str]) -> str:
        return ", ".join(ideas) if ideas else "none"

    return (
        f"stacked: {names(comparison.whatif_stacks)} (recorded: "
        f"{names(comparison.recorded_stacks)})"
    )


def _details(comparison: Comparison, limit: int) -> list[str]:
    out = []
    for t in comparison.tiers:
        for label, changes in (("changed", t.changed), ("new", t.reached), ("open", t.open)):
            for c in changes[:limit]:
                out.append(
                    f"  {t.name} {label}: {c.idea_id} {c.recorded} -> {c.whatif} "
                    f"({c.recorded_seeds} -> {c.whatif_seeds} seeds): {c.why[:160]}"
                )
            if len(changes) > limit:
                out.append(f"  {t.name} {label}: {len(changes) - limit} more (--out for all)")
    out += [f"  note: {note}" for note in comparison.notes]
    return out


def _side_by_side(answer: Answer) -> list[str]:
    labels = [s.label for s, _ in answer.results]
    rows: list[tuple[str, ...]] = [("", *labels)]
    comparisons = [c for _, c in answer.results]
    rows.append(("stacked", *(str(len(c.whatif_stacks)) for c in comparisons)))
    rows.append(("differ (changed+new+open)", *(str(c.verdict_changes) for c in comparisons)))
    rows.append(("runs used", *(str(sum(t.runs for t in c.tiers)) for c in comparisons)))
    rows.append(("not needed", *(str(sum(t.not_needed for t in c.tiers)) for c in comparisons)))
    rows.append(("unmeasured", *(str(sum(t.unmeasured for t in c.tiers)) for c in comparisons)))
    rows.append(("diverged", *(str(sum(len(t.diverged) for t in c.tiers)) for c in comparisons)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(v.rjust(w) for v, w in zip(row, widths, strict=True)) for row in rows]


# The Parquet file's columns: one row per setting and tier (kind 'tier', with the counts the
# table shows), and one per setting, tier and idea whose outcome differs (kind: changed,
# earlier, later, new, open, diverged; its verdicts, "open" where none closed it). A column that
# does not apply to a row is null.
PARQUET = pa.schema(
    [
        ("setting", pa.string()),
        ("tier", pa.int64()),
        ("tier_name", pa.string()),
        ("kind", pa.string()),
        *((name.replace(" ", "_"), pa.int64()) for name in COLUMNS[1:]),
        ("idea_id", pa.string()),
        ("recorded_verdict", pa.string()),
        ("whatif_verdict", pa.string()),
        ("recorded_seeds", pa.int64()),
        ("whatif_seeds", pa.int64()),
        ("why", pa.string()),
    ]
)


def write_parquet(answer: Answer, path: Path) -> int:
    """The answer as Parquet (PARQUET's columns); returns the rows written."""
    rows: list[dict[str, Any]] = []
    for setting, comparison in answer.results:
        for t, row in zip(comparison.tiers, tier_rows(comparison), strict=True):
            counts = {n.replace(" ", "_"): v for n, v in zip(COLUMNS[1:], row[1:], strict=True)}
            rows.append({"setting": setting.label, "tier": t.tier, "tier_name": t.name,
                         "kind": "tier", **counts})  # fmt: skip
            for kind, changes in (
                ("changed", t.changed),
                ("earlier", t.earlier),
                ("later", t.later),
                ("new", t.reached),
                ("open", t.open),
                ("diverged", t.diverged),
            ):
                rows += [
                    {
                        "setting": setting.label,
                        "tier": t.tier,
                        "tier_name": t.name,
                        "kind": kind,
                        "idea_id": c.idea_id,
                        "recorded_verdict": c.recorded,
                        "whatif_verdict": c.whatif,
                        "recorded_seeds": c.recorded_seeds,
                        "whatif_seeds": c.whatif_seeds,
                        "why": c.why,
                    }
                    for c in changes
                ]
    pq.write_table(pa.Table.from_pylist(rows, schema=PARQUET), path)
    return len(rows)
