"""The offline research brain: an evolutionary search over the recipe's constants.

Selectable with `--brain heuristic` (the default offline brain is model-based:
agents/model_brain.py). Each proposal is the champion recipe with a few of its top-level constants
moved within the recipe's search space (agents/search_space.py), chosen by one of four moves:

- explore (mutation): one random constant, one step on its natural scale: x or / 1.25, 1.5 or 2
  for positive numbers, a step on the logit for fractions (so they stay in (0, 1)), x2 or /2 for
  powers of two, another option for categoricals, a flip for flags;
- exploit (local search): take a change that gained (positive paired delta on this champion, or
  promoted / stacked anywhere) and push the same constant further the same way by a smaller step,
  or try the value between the champion's and the idea's;
- combine (recombination): merge two ideas with positive deltas on this champion that touch
  different constants, near-misses included, betting that their gains add up;
- ablate: undo one change of an idea already stacked into the champion, to check it still pays.

The ledger's paired gains are the fitness; the champion is the population of one that selection
keeps. A persona makes its own move first with high probability and any move otherwise, so every
agent still explores a little; if a move has nothing untried, the others follow, mutation last
since its neighbourhood is finite. Nothing here does I/O: the same seed and inputs give the same
proposals, and what was tried is told by the caller (fingerprints), not remembered.
"""

from __future__ import annotations

import math
import random
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice

from agents.brain import Attempt, Desk, Finding, Persona, Proposal
from agents.hypotheses import clip, describe, short, step_text
from agents.search_space import Dimension, Kind, SpaceError, distance, space_of, step
from recipes.constants import (
    Change,
    Constant,
    Scalar,
    Value,
    constants,
    edit,
    moved_indices,
    parse_value,
    same_value,
    scalar_at,
    with_element,
)
from recipes.fixed import held, nothing_to_move
from recipes.identity import fingerprint

PREFERRED_MOVE_PROBABILITY = 0.8
MAX_CANDIDATES_PER_MOVE = 128  # bounds the retries; every move's own supply is finite anyway
COMBINE_POOL = 48  # near-misses with the largest gains a combiner pairs (1,128 pairs at most)
EXPLORER_FACTORS = (1.25, 1.5, 2.0)
PUSH_FRACTIONS = (0.5, 1.0)  # exploiter: a further step, as a share of the idea's own step
PROMOTED = frozenset({"PROMOTE", "HELD"})
NEAR_MISS = frozenset({"PROMOTE", "HELD", "REJECT", "RETEST"})


@dataclass(frozen=True, slots=True)
class _Board:
    """One call's inputs, parsed once."""

    source: str
    version: int
    constants: Mapping[str, Constant]
    findings: tuple[Finding, ...]
    space: Mapping[tuple[str, int | None], Dimension]  # (constant, tuple index) -> dimension
    held: frozenset[str]  # constants held fixed (recipes/fixed.py): never moved


@dataclass(frozen=True, slots=True)
class _Draft:
    """A move's suggestion before it is written into the recipe."""

    values: Mapping[str, Value]
    tail: str  # the sentence after the description of the change: why this is worth a run
    reason: str  # for the trace
    parents: tuple[str, ...] = ()
    lead: str = ""  # replaces the generated description of the changes when set


def _positive(finding: Finding) -> bool:
    return finding.delta is not None and finding.delta > 0


def _gain(finding: Finding) -> float:
    return finding.delta if finding.delta is not None else 0.0


def _tested_tail(tested: list[Finding], version: int) -> str:
    """What the swarm knows of moving this constant on the champion, in a sentence."""
    if not tested:
        return f"Untested on champion v{version}."
    ideas = f"{len(tested)} idea{'' if len(tested) == 1 else 's'} moved it on v{version}"
    gains = [f.delta for f in tested if f.delta is not None]
    if not gains:
        return f"{ideas}, none measured yet."
    return f"{ideas} (best gain {max(gains):+.3g})."


def _applies(change: Change, board: _Board) -> bool:
    """The change was made from the champion's current value (not from an older one)."""
    constant = board.constants.get(change.name)
    return constant is not None and same_value(constant.value, parse_value(change.old))


def _slots(board: _Board) -> list[tuple[Dimension, Scalar]]:
    """Every scalar a move can step (the search space's dimensions), with its value."""
    slots: list[tuple[Dimension, Scalar]] = []
    for (name, index), d in board.space.items():
        value = board.constants[name].value
        if (index is None) == isinstance(value, tuple):
            continue
        slots.append((d, scalar_at(value, index)))
    return slots


def _inside(board: _Board, values: Mapping[str, Value]) -> bool:
    """Every value within its dimension of the recipe's space, and no constant held fixed moved
    (the combiner and the ablator copy a finding's values, which an LLM may have written; other
    values outside the space's dimensions are the champion's own or a finding's)."""
    for name, value in values.items():
        if name in board.held and not same_value(board.constants[name].value, value):
            return False
        indexed = enumerate(value) if isinstance(value, tuple) else [(None, value)]
        for index, x in indexed:
            d = board.space.get((name, index))
            if d is not None and not d.contains(x):
                return False
    return True


class HeuristicBrain:
    def __init__(
        self, persona: Persona, seed: int, focus: float = PREFERRED_MOVE_PROBABILITY
    ) -> None:
        self.persona = persona
        self.focus = focus  # probability of making the persona's own move first
        self._rng = random.Random(seed)

    def propose(
        self,
        champion_source: str,
        champion_version: int,
        findings: Sequence[Finding],
        tried: Collection[str],
        fixed: Collection[str] = (),
    ) -> Proposal | None:
        """A new, untried recipe built from the champion, or None if every move is spent.
        Constants matching `fixed` (names or globs) stay as they are."""
        space = {(d.constant, d.index): d for d in space_of(champion_source, fixed).dimensions}
        found = constants(champion_source)
        board = _Board(
            champion_source,
            champion_version,
            found,
            tuple(findings),
            space,
            frozenset(held(found, fixed)),
        )
        moves = {
            Persona.EXPLORER: self._explore,
            Persona.EXPLOITER: self._exploit,
            Persona.COMBINER: self._combine,
            Persona.ABLATOR: self._ablate,
        }
        order = self._move_order()
        for position, move in enumerate(order):
            for draft in islice(moves[move](board), MAX_CANDIDATES_PER_MOVE):
                if not _inside(board, draft.values):
                    continue  # a finding's value (the combiner copies them) the recipe rules out
                source, changes = edit(champion_source, draft.values)
                if not changes or fingerprint(source) in tried:
                    continue
                return self._proposal(board, draft, source, changes, move, order[:position])
        return None

    def _move_order(self) -> list[Persona]:
        others = [p for p in Persona if p not in (self.persona, Persona.EXPLORER)]
        self._rng.shuffle(others)
        order = [self.persona, *others]
        if self.persona is not Persona.EXPLORER:
            order.append(Persona.EXPLORER)
        if self._rng.random() >= self.focus:  # a detour: some other move first this time
            detour = self._rng.choice(list(Persona))
            order.remove(detour)
            order.insert(0, detour)
        return order

    def _proposal(
        self,
        board: _Board,
        draft: _Draft,
        source: str,
        changes: tuple[Change, ...],
        move: Persona,
        spent: Sequence[Persona],
    ) -> Proposal:
        lead = draft.lead or "; ".join(
            describe(c, board.constants[c.name].comment) for c in changes
        )
        positive = sum(
            1 for f in board.findings if f.champion_version == board.version and _positive(f)
        )
        stacked = sum(1 for f in board.findings if f.stacked)
        read = f"read {len(board.findings)} findings, {positive} gaining on v{board.version}"
        read += f", {stacked} stacked"
        how = self.persona.capitalize()
        if move is not self.persona:
            cause = "its own had nothing untried" if self.persona in spent else "for variety"
            how += f" making {'an' if move[0] in 'aeiou' else 'a'} {move} move ({cause})"
        return Proposal(
            hypothesis=clip(f"{lead}. {draft.tail}"),
            source=source,
            changes=changes,
            persona=self.persona,
            why=f"{how}: {draft.reason} ({read}).",
            parents=draft.parents,
        )

    def _explore(self, board: _Board) -> Iterator[_Draft]:
        # One constant drawn uniformly, then one of its steps; on retries, every other
        # constant's next step before a second step of the same one.
        plans: list[list[tuple[Dimension, Scalar, float]]] = []
        for d, x in _slots(board):
            if d.kind is Kind.FLAG:
                steps = [0.0]
            elif d.kind is Kind.CHOICE:  # any other option: the choices need not be ordered
                steps = [k * math.log(2) for k in range(-len(d.choices), len(d.choices) + 1) if k]
            elif d.kind is Kind.POW2:
                steps = [math.log(2), -math.log(2)]
            else:
                steps = [s * math.log(f) for f in EXPLORER_FACTORS for s in (1, -1)]
            self._rng.shuffle(steps)
            plans.append([(d, x, du) for du in steps])
        self._rng.shuffle(plans)
        # Which findings on this champion touched each constant, in one pass: scanning every
        # finding per candidate made a proposal take seconds once thousands were held (a soak
        # found the agents host's event loop blocked by it, and its publishes timing out).
        tested_on: dict[str, list[Finding]] = {}
        for f in board.findings:
            if f.champion_version == board.version:
                for touched in {c.name for c in f.changes}:
                    tested_on.setdefault(touched, []).append(f)
        for round_ in range(max((len(p) for p in plans), default=0)):
            for plan in plans:
                if round_ >= len(plan):
                    continue
                d, x, du = plan[round_]
                moved = step(d, x, du)
                if moved is None:
                    continue
                name, index = d.constant, d.index
                tail = _tested_tail(tested_on.get(name, []), board.version)
                value = with_element(board.constants[name].value, index, moved)
                yield _Draft({name: value}, tail, f"a random {d.kind} step on {d.name}")

    def _exploit(self, board: _Board) -> Iterator[_Draft]:
        winners = [
            f
            for f in board.findings
            if (_positive(f) and f.champion_version == board.version)
            or ((f.stacked or f.verdict in PROMOTED) and (f.delta is None or f.delta > 0))
        ]
        # Best gain first, with a little noise so two exploiters do not chase the same idea.
        winners.sort(key=lambda f: _gain(f) * self._rng.uniform(0.7, 1.0), reverse=True)
        for finding in winners:
            changes = list(finding.changes)
            self._rng.shuffle(changes)
            for change in changes:
                yield from self._push(board, finding, change)

    def _push(self, board: _Board, finding: Finding, change: Change) -> Iterator[_Draft]:
        if change.name not in board.constants:
            return
        old, new = parse_value(change.old), parse_value(change.new)
        current = board.constants[change.name].value
        adopted = not same_value(current, old)  # stacked, or moved since; push from where it is
        anchor = current if adopted else new
        for index in moved_indices(old, new, anchor):
            a, b, x = scalar_at(old, index), scalar_at(new, index), scalar_at(anchor, index)
            d = board.space.get((change.name, index))
            du = distance(d, a, b) if d is not None else None
            if d is None or du is None:
                continue  # not in the search space, or a flag (it cannot go further than flipped)
            fractions = [*PUSH_FRACTIONS] + ([] if adopted else [-0.5])  # -0.5: in between
            if self._rng.random() < 0.3:
                self._rng.shuffle(fractions)
            for k in fractions:
                moved = step(d, x, k * du)
                if moved is not None:
                    value = with_element(anchor, index, moved)
                    tail = (
                        f"Exploiting {finding.idea_id} whose {step_text(change)} step "
                        f"gained {_gain(finding):.3g}."
                    )
                    reason = f"pushing {change.name} the way {finding.idea_id} moved it"
                    yield _Draft({change.name: value}, tail, reason, (finding.idea_id,))

    def _combine(self, board: _Board) -> Iterator[_Draft]:
        pool = [
            f
            for f in board.findings
            if f.champion_version == board.version
            and _positive(f)
            and not f.stacked
            and f.verdict in NEAR_MISS
            and all(_applies(c, board) for c in f.changes)
        ]
        # Only the best gains can make the best pairs: pairing every positive finding was
        # quadratic, and with a few hundred of them it took most of a 100-agent host's time.
        pool.sort(key=lambda f: _gain(f), reverse=True)
        pool = pool[:COMBINE_POOL]
        names = [frozenset(c.name for c in f.changes) for f in pool]
        pairs = [
            (a, pool[j])
            for i, a in enumerate(pool)
            for j in range(i + 1, len(pool))
            if names[i].isdisjoint(names[j])
        ]
        pairs.sort(key=lambda p: (_gain(p[0]) + _gain(p[1])) * self._rng.uniform(0.7, 1.0))
        for a, b in reversed(pairs):
            values = {c.name: parse_value(c.new) for f in (a, b) for c in f.changes}
            lead = "Combine " + " with ".join(
                f"{f.idea_id} ({', '.join(short(c) for c in f.changes)}, gained {_gain(f):.3g})"
                for f in (a, b)
            )
            tail = "Gains on different constants may add up."
            reason = f"merging near-misses {a.idea_id} and {b.idea_id}"
            yield _Draft(values, tail, reason, (a.idea_id, b.idea_id), lead)

    def _ablate(self, board: _Board) -> Iterator[_Draft]:
        stacked = [f for f in board.findings if f.stacked]
        # The smallest gains first: those are the likeliest passengers.
        stacked.sort(key=lambda f: _gain(f) * self._rng.uniform(1.0, 1.5))
        for finding in stacked:
            for change in finding.changes:
                constant = board.constants.get(change.name)
                old = parse_value(change.old)
                if constant is None or same_value(constant.value, old):
                    continue
                tail = (
                    f"Ablating {finding.idea_id} (stacked, gained {_gain(finding):.3g} at tier "
                    f"{finding.tier}): does it still pull its weight?"
                )
                reason = f"reverting {change.name} from stacked {finding.idea_id}"
                yield _Draft({change.name: old}, tail, reason, (finding.idea_id,))


class OfflineBrain:
    """The heuristic search behind the Brain interface (no I/O, so nothing to record)."""

    def __init__(self, search: HeuristicBrain) -> None:
        self.search = search
        self.persona: Persona | None = search.persona
        self.label = "heuristic"

    async def propose(self, desk: Desk, idea_id: str, trace_id: str) -> Attempt:
        try:
            proposal = self.search.propose(
                desk.source, desk.version, desk.findings, desk.tried, desk.fixed
            )
            if proposal is None and not space_of(desk.source, desk.fixed).dimensions:
                why = nothing_to_move(constants(desk.source), desk.editable, desk.fixed)
                return Attempt(None, why_not=why, nothing_to_move=True)
        except SpaceError as exc:  # the recipe's own declaration: say so, and look again later
            return Attempt(None, why_not=f"the recipe's search space: {exc}", failed=True)
        except (ValueError, OverflowError, MemoryError, RecursionError) as exc:
            why = f"the recipe's values: {type(exc).__name__}: {str(exc)[:200]}"
            return Attempt(None, why_not=why, failed=True)  # data an agent wrote, not a crash
        return Attempt(proposal, why_not="" if proposal else "no untried change left")
