"""`swarm audit`: check a stopped swarm's ledger for lost, duplicated and inconsistent records.

Primary keys already make a redelivered event one row. What they cannot catch, and this does:
- **unfinished**: RunSpecs with no RunResult (lost, unless the swarm stopped with work queued);
- **orphans**: RunResults of no RunSpec;
- **duplicated experiments**: the same experiment (idea or baseline, champion version, tier,
  seed) asked for twice, or two successful results of it (a restarted ladder that forgot what it
  asked for would do this);
- **duplicated decisions**: two rule verdicts closing the same idea at the same tier and version;
- **lineage**: champion versions 1..N without gaps, each one's parent the version before it, its
  sha that of its source, each stacked one an idea the rules promoted at the top tier;
- **replay**: every RunSpec's recipe address must be that of its champion with its patch (what
  trainers ran, fetched by address, is what the ledger says was tested); a fresh ladder folding
  the ledger's events must hold the same champion, and, on a
  swarm that stopped with nothing in flight, find nothing left to do (the live ladder saw and
  acted on everything the ledger holds).

It also lists, as notes rather than problems, **unsent ideas**: a researcher traced proposing
them, but the ledger never received the idea and no note says it was given back (the bus
refused it). A host killed between the two leaves one too; a researcher that went quiet after
one is what issue 18 calls silent idleness.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from bus.messages import (
    NEVER_SENT,
    ChampionChange,
    ChangeKind,
    Decision,
    Message,
    RunResult,
    RunSpec,
    RunStatus,
    Verdict,
)
from ledger.duckdb_store import open_database
from ledger.readback import KIND_ORDER, read_messages
from recipes.identity import names, recipe_sha
from scale_ladder.admission import NotAdmitted
from scale_ladder.ladder import Ladder

# Verdicts that close an idea at a tier (RETEST asks for more seeds; HELD waits for a person).
CLOSING = frozenset({Verdict.PROMOTE, Verdict.REJECT, Verdict.STALE, Verdict.REFUSED})


@dataclass
class Audit:
    run_specs: int = 0
    run_results: int = 0
    decisions: int = 0
    champion_version: int = 0
    unfinished: list[str] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    lineage: list[str] = field(default_factory=list)
    replay: list[str] = field(default_factory=list)
    left_to_do: list[str] = field(default_factory=list)  # what a replayed ladder would still do
    left_to_send: int = 0  # how many messages that is, all kinds together
    unsent: list[str] = field(default_factory=list)  # notes, not problems (module docstring)

    def problems(self, drained: bool) -> list[str]:
        """Everything wrong. Work left to do is wrong only if the swarm was drained (stopped with
        nothing in flight): otherwise it is what the swarm was doing when it stopped."""
        orphans = [f"result of no RunSpec: {r}" for r in self.orphans]
        left = [f"unfinished run {r}" for r in self.unfinished] + self.left_to_do
        return [*orphans, *self.duplicated, *self.lineage, *self.replay, *(left if drained else [])]

    def summary(self) -> str:
        return (
            f"run_specs {self.run_specs}  run_results {self.run_results}  "
            f"decisions {self.decisions}  champion v{self.champion_version}  "
            f"unfinished {len(self.unfinished)}  orphans {len(self.orphans)}  "
            f"duplicated {len(self.duplicated)}  lineage problems {len(self.lineage)}  "
            f"replay differences {len(self.replay)}  "
            f"messages a replay would still send {self.left_to_send}  "
            f"unsent ideas {len(self.unsent)}"
        )


def audit_ledger(db_path: Path, ladder: Ladder) -> Audit:
    """Read the ledger file (read-only; the swarm must be stopped) and check it. `ladder` is a
    fresh ladder built from the config and the seed secret the swarm ran with."""
    con = open_database(db_path, read_only=True)
    try:
        messages = read_messages(con, KIND_ORDER)
        unsent = con.execute(UNSENT_SQL, [NEVER_SENT]).fetchall()
    finally:
        con.close()
    specs = [m for m in messages if isinstance(m, RunSpec)]
    results = [m for m in messages if isinstance(m, RunResult)]
    decisions = [m for m in messages if isinstance(m, Decision)]
    champions = [m for m in messages if isinstance(m, ChampionChange)]
    report = Audit(len(specs), len(results), len(decisions))
    report.champion_version = max((c.version for c in champions), default=0)
    _check_runs(report, specs, results)
    _check_decisions(report, decisions)
    _check_lineage(report, champions, decisions, ladder.top)
    _check_replay(report, messages, ladder, champions)
    report.unsent = [
        f"{idea_id} by {agent}: proposed, never received; "
        + (f"its author proposed again {s:.0f} s later" if (s := quiet.total_seconds()) else
           "its author proposed nothing after it")
        for idea_id, agent, quiet in unsent
    ]  # fmt: skip
    return report


# Proposals whose idea never reached the ledger and was not given back, and how long after it
# its author last proposed anything (an interval; zero: nothing after it).
UNSENT_SQL = """
SELECT t.idea_id, t.agent,
       (SELECT max(l.created_at) FROM traces l WHERE l.agent = t.agent AND l.action = 'propose')
       - t.created_at
FROM traces t
WHERE t.action = 'propose' AND t.idea_id <> ''
  AND NOT EXISTS (SELECT 1 FROM ideas i WHERE i.idea_id = t.idea_id)
  AND NOT EXISTS (SELECT 1 FROM agent_events e WHERE e.kind = 'NOTE' AND e.agent = t.agent
                  AND starts_with(e.detail, t.idea_id || $1))
ORDER BY t.created_at"""


def _check_runs(report: Audit, specs: list[RunSpec], results: list[RunResult]) -> None:
    spec_ids = {s.run_id for s in specs}
    result_ids = {r.run_id for r in results}
    report.unfinished = sorted(spec_ids - result_ids)
    report.orphans = sorted(result_ids - spec_ids)
    failed = {r.run_id for r in results if r.status is not RunStatus.OK}
    # An idea's seed asked for again after its run failed where the champion's failed too is
    # a second try (scale_ladder/shared_failures.py), not a duplicate: a spec after a failed one
    # is not counted.
    asked: Counter[tuple[str, int, int, int]] = Counter()
    last: dict[tuple[str, int, int, int], str] = {}
    for spec in (s for s in specs if s.idea_id):
        key = (spec.idea_id, spec.champion_version, spec.tier, spec.seed)
        asked[key] += key not in last or last[key] not in failed
        last[key] = spec.run_id
    ok = Counter(
        (r.idea_id, r.champion_version, r.tier, r.seed) for r in results if r.status is RunStatus.OK
    )
    for key in sorted(asked.keys() | ok.keys()):
        if asked[key] > 1 or ok[key] > 1:
            who = key[0] or "the champion"
            report.duplicated.append(
                f"{who} at v{key[1]} tier {key[2]} seed {key[3]}: asked for {asked[key]}x, "
                f"{ok[key]} successful results"
            )


def _check_decisions(report: Audit, decisions: list[Decision]) -> None:
    closing = Counter(
        (d.idea_id, d.tier, d.champion_version)
        for d in decisions
        if d.decided_by == "ladder" and d.verdict in CLOSING
    )
    for (idea, tier, version), n in sorted(closing.items()):
        if n > 1:
            report.duplicated.append(f"{idea} closed {n}x at tier {tier} on v{version}")


def _check_lineage(
    report: Audit, champions: list[ChampionChange], decisions: list[Decision], top: int
) -> None:
    by_version = {c.version: c for c in champions}
    promoted = {d.idea_id for d in decisions if d.tier == top and d.verdict is Verdict.PROMOTE}
    for version in range(1, report.champion_version + 1):
        change = by_version.get(version)
        if change is None:
            report.lineage.append(f"champion v{version} is missing")
            continue
        if change.parent_version != version - 1:
            report.lineage.append(
                f"champion v{version}'s parent is v{change.parent_version}, not v{version - 1}"
            )
        if not names(change.recipe_sha, change.source):
            report.lineage.append(f"champion v{version}'s sha does not match its source")
        if change.kind is ChangeKind.STACK and change.idea_id not in promoted:
            report.lineage.append(
                f"champion v{version} stacks {change.idea_id}, never promoted at the top tier"
            )


def _check_replay(
    report: Audit, messages: list[Message], ladder: Ladder, champions: list[ChampionChange]
) -> None:
    if not champions:
        return  # the ladder never started: nothing to replay
    for message in messages:
        ladder.observe(message)
    for spec in (m for m in messages if isinstance(m, RunSpec) and m.recipe_sha):
        try:
            made = recipe_sha(ladder.recipe_of(spec.champion_version, spec.patch))
        except (KeyError, NotAdmitted) as exc:
            made = f"none ({exc})"
        if made != spec.recipe_sha:
            report.replay.append(
                f"{spec.run_id} names recipe {spec.recipe_sha[:12]}; its champion "
                f"v{spec.champion_version} and patch make {made[:80]}"
            )
    if ladder.current != report.champion_version:
        report.replay.append(
            f"a replay holds champion v{ladder.current}, the ledger v{report.champion_version}"
        )
    pending: Counter[str] = Counter(type(m).__name__ for m in ladder.act())
    report.left_to_send = pending.total()
    for kind, n in sorted(pending.items()):
        report.left_to_do.append(f"a replay of the ledger would still publish {n} {kind}(s)")
