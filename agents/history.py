"""The swarm's history as a host's researchers read it, folded once per host.

Every researcher of a host reads the same history: the champion recipes, what each idea changed
and how far it climbed, the recipes already tried per champion, the latest failed runs. Folding
it into each researcher made every event cost O(researchers) (22% of a 100-researcher host's
time, by py-spy), so one History folds it, and SharedHistory tells each event only to the
researchers it concerns: the author of a decided or failed idea, the agent of an LLM call, and
everyone only for a champion change (rare). A researcher keeps only its own state
(agents/researcher.py).
"""

from __future__ import annotations

import functools
import json
from collections import defaultdict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Protocol

from agents.brain import Failure, Finding, Gain
from bus.messages import (
    ChampionChange,
    ChangeKind,
    Decision,
    Idea,
    LlmCall,
    Message,
    RunResult,
    RunStatus,
    Verdict,
    is_spot_check,
)
from recipes.constants import Change, changes_between, parse_value, with_values
from recipes.identity import fingerprint
from recipes.patch import PatchRefused, apply

FAILURES_KEPT = 20  # recent failed runs a brain is shown
EVERYONE = ""  # a Notice for every researcher


@dataclass(frozen=True, slots=True)
class Notice:
    """A folded event as it concerns researchers: `to` names the one (EVERYONE: all of them)."""

    to: str
    event: Message
    new_champion: bool = False  # a ChampionChange beyond every champion folded before it


@dataclass(frozen=True, slots=True)
class _Proposed:
    """What folding an own idea added to the history, undone if it is never sent."""

    version: int
    tried: frozenset[str]  # recipe fingerprints new to that version
    looked: tuple[str, int, int] | None  # a second look's key, if new


class History:
    """What the swarm learned, folded in stream order. A decision that arrives before its idea
    waits for it. An idea proposed on this host enters when it is proposed (its author folds
    it), so the host's other researchers know it before the bus brings it back."""

    def __init__(self, editable: str, target: str, lower_is_better: bool = True) -> None:
        self.editable = editable
        self.target = target
        self.lower_is_better = lower_is_better
        self.sources: dict[int, str] = {}  # champion version -> recipe
        self._findings: dict[str, Finding] = {}  # idea id -> finding, in the order first seen
        self.tried: dict[int, set[str]] = defaultdict(set)  # version -> fingerprints
        self.pending: dict[str, list[Decision]] = defaultdict(list)  # decisions before ideas
        self.failures: deque[Failure] = deque(maxlen=FAILURES_KEPT)
        # On the current champion only: idea -> (tier, gain) of each rejected by the rules there,
        # and (idea, version, entry tier) of every second look sent (agents/second_look.py).
        self.rejected: dict[str, tuple[int, float]] = {}
        self.looked: set[tuple[str, int, int]] = set()
        # Snapshots for brains, rebuilt only after a change: a burst of proposals between two
        # events shares one instead of copying every finding per proposal.
        self._findings_snapshot: tuple[Finding, ...] | None = None
        self._tried_snapshots: dict[int, frozenset[str]] = {}
        # This host's own ideas folded before the stream brought them back, with what folding
        # them added (_Proposed): a snapshot is never taken while there are any
        # (agents/host_snapshot.py), as one may never be sent.
        self.unconfirmed: dict[str, _Proposed] = {}
        self.checkpoint: tuple[int, str] | None = None  # the last event folded, by stream seq

    @property
    def champion(self) -> int:
        return max(self.sources, default=0)

    @property
    def findings(self) -> Mapping[str, Finding]:
        """Read-only: every change goes through this class, which keeps the snapshot honest."""
        return MappingProxyType(self._findings)

    def findings_snapshot(self) -> tuple[Finding, ...]:
        if self._findings_snapshot is None:
            self._findings_snapshot = tuple(self._findings.values())
        return self._findings_snapshot

    def tried_snapshot(self, version: int) -> frozenset[str]:
        snapshot = self._tried_snapshots.get(version)
        if snapshot is None:
            snapshot = self._tried_snapshots[version] = frozenset(self.tried[version])
        return snapshot

    def add_tried(self, version: int, recipe_fingerprint: str) -> None:
        if recipe_fingerprint not in self.tried[version]:
            self.tried[version].add(recipe_fingerprint)
            self._tried_snapshots.pop(version, None)

    def observe(self, message: Message) -> list[Notice]:
        """Fold one event; what it means to researchers. Kinds the history ignores pass."""
        if isinstance(message, ChampionChange):
            return self._on_champion(message)
        if isinstance(message, Idea):
            return self._on_idea(message)
        if isinstance(message, Decision):
            return self._on_decision(message)
        if isinstance(message, RunResult):
            return self._on_result(message)
        if isinstance(message, LlmCall):
            return [Notice(message.agent, message)]
        return []

    def propose(self, idea: Idea, recipe_fingerprint: str) -> list[Notice]:
        """Fold an idea of this host's own as it is proposed, before the stream brings it:
        its recipe is tried from now on (its author must never propose it twice, and the host's
        other researchers need not either)."""
        version = idea.champion_version
        fingerprints = {recipe_fingerprint}
        base = self.sources.get(version)
        if base is not None:
            fingerprints.add(_read_patch(base, idea.patch, self.editable)[1])
        looked = (idea.parent_ids[0], version, idea.entry_tier) if idea.parent_ids else None
        added = _Proposed(
            version,
            frozenset(f for f in fingerprints if f not in self.tried[version]),
            looked if idea.entry_tier and looked not in self.looked else None,
        )
        self.add_tried(version, recipe_fingerprint)
        notices = self.observe(idea)
        if idea.idea_id in self._findings:
            self.unconfirmed[idea.idea_id] = added
        return notices

    def release(self, idea_id: str) -> None:
        """An own idea that was never sent: out of the history, with what folding it added, as
        if never proposed (a full replay never sees it)."""
        added = self.unconfirmed.pop(idea_id, None)
        if added is None:
            return
        del self._findings[idea_id]
        self._findings_snapshot = None
        self.tried[added.version] -= added.tried
        self._tried_snapshots.pop(added.version, None)
        if added.looked is not None:
            self.looked.discard(added.looked)

    def _set(self, finding: Finding) -> None:
        self._findings[finding.idea_id] = finding
        self._findings_snapshot = None

    def _on_champion(self, change: ChampionChange) -> list[Notice]:
        new = change.version > self.champion
        self.sources[change.version] = change.source
        if new:  # near misses on the old champion are not near misses on this one
            self.rejected.clear()
        self.add_tried(change.version, fingerprint(change.source))
        finding = self._findings.get(change.idea_id)
        if change.kind is ChangeKind.STACK and finding is not None:
            self._set(replace(finding, stacked_into=change.version))
        return [Notice(EVERYONE, change, new_champion=new)]

    def _on_idea(self, idea: Idea) -> list[Notice]:
        if self.unconfirmed.pop(idea.idea_id, None) is not None:
            # Back from the stream: it takes its place in stream order, as a replay has it.
            self._findings[idea.idea_id] = self._findings.pop(idea.idea_id)
            self._findings_snapshot = None
            return []
        if idea.idea_id in self._findings or idea.target != self.target:
            return []
        if idea.entry_tier and idea.parent_ids:
            self.looked.add((idea.parent_ids[0], idea.champion_version, idea.entry_tier))
        base = self.sources.get(idea.champion_version)
        changes: tuple[Change, ...] = ()
        code_changed = False
        if base is not None:
            changes, tried, code_changed = _read_patch(base, idea.patch, self.editable)
            self.add_tried(idea.champion_version, tried)
        finding = Finding(
            idea.idea_id,
            idea.author,
            idea.champion_version,
            changes,
            idea.hypothesis,
            0,
            "",
            None,
            code_changed=code_changed,
        )
        self._set(finding)
        notices: list[Notice] = []
        for decision in self.pending.pop(idea.idea_id, []):
            notices += self._on_decision(decision)
        return notices

    def _on_decision(self, decision: Decision) -> list[Notice]:
        finding = self._findings.get(decision.idea_id)
        if finding is None:
            self.pending[decision.idea_id].append(decision)
            return []
        if decision.tier >= finding.tier:
            delta = decision.delta if decision.delta is not None else finding.delta
            finding = replace(
                finding,
                tier=decision.tier,
                verdict=decision.verdict.value,
                delta=delta,
                reason=decision.rule,
            )
        final = decision.verdict in (Verdict.PROMOTE, Verdict.REJECT)
        if final and decision.delta is not None and decision.decided_by == "ladder":
            if decision.verdict is Verdict.REJECT and decision.champion_version == self.champion:
                self.rejected[decision.idea_id] = (decision.tier, decision.delta)
            baseline = _first_baseline(decision.details)
            checked = is_spot_check(decision.rule)
            gain = Gain(decision.champion_version, decision.tier, decision.delta, baseline, checked)
            kept = [g for g in finding.gains if (g.version, g.tier) != (gain.version, gain.tier)]
            finding = replace(finding, gains=(*kept, gain))
        self._set(finding)
        return [Notice(finding.author, decision)]

    def _on_result(self, result: RunResult) -> list[Notice]:
        """Failed runs teach what breaks: brains see the latest ones with their log tails."""
        if result.status in (RunStatus.OK, RunStatus.SKIPPED) or not result.idea_id:
            return []
        finding = self._findings.get(result.idea_id)
        if finding is not None and not finding.failed:
            self._set(replace(finding, failed=True))
        if any(f.idea_id == result.idea_id and f.tier == result.tier for f in self.failures):
            return []  # one failure per idea and tier is enough to learn from
        failure = Failure(
            result.idea_id, result.tier, result.status.value, result.reason, result.log_tail
        )
        self.failures.append(failure)
        return [] if finding is None else [Notice(finding.author, result)]


class Reader(Protocol):
    """A researcher as SharedHistory sees it (agents/researcher.py)."""

    name: str
    history: History

    @property
    def busy(self) -> bool: ...

    def hear(self, notice: Notice) -> None: ...


class SharedHistory:
    """One History folded once for many researchers, each told only what concerns it."""

    def __init__(self, history: History, readers: Sequence[Reader]) -> None:
        strangers = [r.name for r in readers if r.history is not history]
        if strangers:  # they would never learn anything
            raise ValueError(f"researchers {strangers} read another history")
        self.history = history
        self.readers = readers
        self.by_name: dict[str, list[int]] = defaultdict(list)
        for index, reader in enumerate(readers):
            self.by_name[reader.name].append(index)

    def fold(self, message: Message) -> list[int]:
        """Fold one event; the indices of the researchers it freed (busy before, not after)."""
        freed: set[int] = set()
        everyone = range(len(self.readers))
        for notice in self.history.observe(message):
            for index in everyone if notice.to == EVERYONE else self.by_name.get(notice.to, ()):
                reader = self.readers[index]
                was_busy = reader.busy
                reader.hear(notice)
                if was_busy and not reader.busy:
                    freed.add(index)
        return sorted(freed)


@functools.lru_cache(maxsize=4096)
def _read_patch(base: str, patch: str, editable: str) -> tuple[tuple[Change, ...], str, bool]:
    """What an idea changes, the fingerprint of its recipe, and whether it edits more than
    those constants. Researchers built without a shared history each fold every idea (the
    search benchmark's do), so the patch is applied once per process (the cache), not once per
    researcher."""
    try:
        patched = apply(base, patch, editable)
        changes = changes_between(base, patched)
        values = {c.name: parse_value(c.new) for c in changes}
        # Written the same way in both, the constants cancel: what is left differing is code.
        return (
            changes,
            fingerprint(patched),
            with_values(base, values) != with_values(patched, values),
        )
    except (PatchRefused, SyntaxError, ValueError, OverflowError, RecursionError, MemoryError):
        # The ladder refuses it, or its values are past what a search can hold: nothing to
        # learn from its constants (marked as a code change, so no model reads it as one).
        return (), fingerprint(base), True


def _first_baseline(details: str) -> float | None:
    """The champion's metric on the first paired seed of a verdict (its `details` JSON lists
    the seeds in the order the tier runs them, the tier's first seed first)."""
    try:
        value = json.loads(details)["baseline"][0]
    except (ValueError, KeyError, TypeError, IndexError):  # a person's verdict, or no pairs
        return None
    return float(value) if isinstance(value, int | float) else None
