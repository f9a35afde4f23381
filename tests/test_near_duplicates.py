"""Near-duplicate ideas: the normalised change, the similarity rule, and its calibration against
the offline brain, whose small steps are different ideas and must never be refused as the same."""

from __future__ import annotations

import random
from decimal import Decimal
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from agents.brain import Finding, Persona, Proposal
from agents.heuristic_brain import HeuristicBrain
from recipes.constants import Change, Value, changes_between, parse_value, with_values
from recipes.identity import fingerprint
from scale_ladder.near_duplicates import (
    NearDuplicate,
    PatchChange,
    nearest,
    patch_change,
    similarity,
)

RECIPE = (Path(__file__).resolve().parents[1] / "training/recipes/bytelm.py").read_text()
VERSION = 3
THRESHOLD = 0.9


def change(old: str, new: str, source: str = RECIPE) -> PatchChange:
    assert old in source
    return patch_change(source, source.replace(old, new, 1))


def near(a: PatchChange, b: PatchChange, threshold: float = THRESHOLD) -> bool:
    return nearest(b, [("a", a)], threshold) is not None


# --- the normalisation -------------------------------------------------------------------------


def test_only_the_changed_tokens_count_with_a_little_context() -> None:
    lr = change("LEARNING_RATE = 3e-3", "LEARNING_RATE = 0.0045")
    assert lr.tokens == ("=LEARNING_RATE", "==", "-3.0e-3", "+4.5e-3")
    assert lr.values == ("+4.5e-3", "-3.0e-3")


def test_comments_whitespace_and_quotes_do_not_count() -> None:
    lr = change("LEARNING_RATE = 3e-3", "LEARNING_RATE = 0.0045")
    for variant in (
        change("LEARNING_RATE = 3e-3  # peak", "LEARNING_RATE = 0.0045  # a higher peak"),
        change("LEARNING_RATE = 3e-3", "LEARNING_RATE=0.0045 "),
        change("LEARNING_RATE = 3e-3", "LEARNING_RATE = 4.5e-3"),
    ):
        assert variant == lr
    assert not change("# --- hyperparameters", "# the knobs\n\n\n# --- hyperparameters")
    cuda = 'torch.autocast("cuda"'
    assert change(cuda, "torch.autocast('cpu'") == change(cuda, 'torch.autocast("cpu"')


def test_numbers_agree_at_two_significant_digits() -> None:
    def lr(value: str) -> PatchChange:
        return change("LEARNING_RATE = 3e-3", f"LEARNING_RATE = {value}")

    assert lr("0.00301").tokens == lr("0.003").tokens == lr("3e-3").tokens
    assert lr("0.0035") != lr("0.003")
    batch = "BATCH_SIZE = 16"
    assert change(batch, "BATCH_SIZE = 32") == change(batch, "BATCH_SIZE = 32.0")
    assert change(batch, "BATCH_SIZE = 24") != change(batch, "BATCH_SIZE = 32")
    assert change(batch, "BATCH_SIZE = 165") == change(batch, "BATCH_SIZE = 160")  # half-even
    # Between 0.5 and 1 a number is rounded by its distance from 1: 0.976 and 0.983 differ.
    betas = "BETAS = (0.9, 0.95)"
    assert change(betas, "BETAS = (0.9, 0.976)") != change(betas, "BETAS = (0.9, 0.983)")
    assert change(betas, "BETAS = (0.9, 0.999)") != change(betas, "BETAS = (0.9, 0.9999)")
    assert change(betas, "BETAS = (0.9, 0.976)") == change(betas, "BETAS = (0.9, 0.9761)")


def test_a_change_and_its_reverse_are_not_alike() -> None:
    up = change("GRAD_CLIP = 1.0", "GRAD_CLIP = 2.0")
    back = patch_change(with_values(RECIPE, {"GRAD_CLIP": 2.0}), RECIPE)
    assert not near(up, back)


# --- the rule ----------------------------------------------------------------------------------


def test_different_constants_or_values_are_different_ideas() -> None:
    wd = change("WEIGHT_DECAY = 0.1", "WEIGHT_DECAY = 0.2")
    min_lr = change("MIN_LR_FRACTION = 0.1", "MIN_LR_FRACTION = 0.2")  # the same numbers
    assert wd.values == min_lr.values and not near(wd, min_lr)
    assert not near(wd, change("WEIGHT_DECAY = 0.1", "WEIGHT_DECAY = 0.125"))
    betas = "BETAS = (0.9, 0.95)"
    # One token of the tuple: similar tokens, different values.
    assert not near(change(betas, "BETAS = (0.9, 0.98)"), change(betas, "BETAS = (0.9, 0.99)"))
    assert not near(change("TIE_EMBEDDINGS = True", "TIE_EMBEDDINGS = False"), wd)


def test_one_name_swapped_for_another_is_a_different_idea() -> None:
    # Whole changed lines would call these 0.98 alike; the changed tokens say 0.83.
    silu, relu = change("F.gelu", "F.silu"), change("F.gelu", "F.relu")
    assert similarity(silu, relu) < THRESHOLD and not near(silu, relu)
    assert near(silu, change("F.gelu(", "F.silu( "))


LR_SCHEDULE = '''def learning_rate(progress):
    """Linear warmup, then a linear decay to MIN_LR_FRACTION of the peak."""
    if progress < WARMUP_FRACTION:
        return LEARNING_RATE * (progress + 1e-3) / WARMUP_FRACTION
    remaining = max(0.0, 1 - (progress - WARMUP_FRACTION) / (1 - WARMUP_FRACTION))
    floor = MIN_LR_FRACTION * LEARNING_RATE
    return floor + (LEARNING_RATE - floor) * remaining


'''
OLD_SCHEDULE = RECIPE[RECIPE.index("def learning_rate") : RECIPE.index("def train")]


def test_a_large_edit_with_a_renamed_variable_is_a_near_duplicate() -> None:
    linear = change(OLD_SCHEDULE, LR_SCHEDULE)
    renamed = change(OLD_SCHEDULE, LR_SCHEDULE.replace("remaining", "left"))
    commented = change(OLD_SCHEDULE, LR_SCHEDULE.replace("floor", "lowest") + "# linear\n")
    assert THRESHOLD <= similarity(linear, renamed) < 1
    assert THRESHOLD <= similarity(linear, commented) < 1
    assert near(linear, renamed) and near(linear, commented)
    assert not near(linear, renamed, threshold=1.0)
    # The same schedule decaying to a floor of its own is another experiment.
    floored = change(OLD_SCHEDULE, LR_SCHEDULE.replace("MIN_LR_FRACTION *", "0.05 *"))
    assert not near(linear, floored)


def test_nearest_takes_the_most_similar_then_the_earliest() -> None:
    linear = change(OLD_SCHEDULE, LR_SCHEDULE)
    renamed = change(OLD_SCHEDULE, LR_SCHEDULE.replace("remaining", "left"))
    other = change(OLD_SCHEDULE, LR_SCHEDULE.replace("floor", "lowest"))
    earlier = [("idea-1", other), ("idea-2", renamed), ("idea-3", linear), ("idea-4", linear)]
    assert nearest(linear, earlier, THRESHOLD) == NearDuplicate("idea-3", 1.0)
    assert nearest(linear, earlier, THRESHOLD, exclude="idea-3") == NearDuplicate("idea-4", 1.0)
    best = nearest(linear, earlier[:2], THRESHOLD)
    assert best is not None and best.idea_id == "idea-2"
    assert best.similarity == similarity(linear, renamed) > similarity(linear, other)
    assert nearest(linear, earlier[:2], 0.999) is None
    assert nearest(patch_change(RECIPE, RECIPE + "# only a comment\n"), earlier, 0.01) is None


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(["LEARNING_RATE", "GRAD_CLIP", "INIT_STD", "WEIGHT_DECAY"]),
    value=st.floats(1e-6, 1e3),
    comment=st.text(st.characters(codec="ascii", exclude_characters="\r\n"), max_size=20),
    spaces=st.text(" \t", max_size=3),
)
def test_comments_and_spaces_never_change_the_normalised_change(
    name: str, value: float, comment: str, spaces: str
) -> None:
    plain = with_values(RECIPE, {name: value})
    line = next(line for line in plain.splitlines() if line.startswith(name + " = "))
    noisy = plain.replace(line, f"{line.split('#')[0].rstrip()}{spaces}  # {comment}{spaces}")
    assert patch_change(RECIPE, noisy) == patch_change(RECIPE, plain)


# --- calibration against the offline brain -----------------------------------------------------


def _rounded(value: Value) -> object:
    """A value as the rule compares it, computed here independently of the module."""
    if isinstance(value, tuple):
        return tuple(_rounded(v) for v in value)
    if isinstance(value, bool):
        return value
    x = Decimal(repr(value))
    if Decimal("0.5") < x < 1:
        return ("1-", f"{1 - x:.1e}")
    return f"{x:.1e}" if x else "0"


def _moved(source: str) -> list[tuple[str, object]]:
    """The constants a recipe moves from the champion, with their new values as rounded."""
    return [(c.name, _rounded(parse_value(c.new))) for c in changes_between(RECIPE, source)]


def heuristic_proposals(count: int, brains_per_persona: int) -> list[Proposal]:
    """Proposals of every persona on one champion, as a swarm would make them: each brain sees
    the findings of all ideas so far (with random verdicts) and never repeats a tried recipe."""
    stacked = [
        ("idea-hd", Change("HEAD_DIM", "16", "32"), 0.02),
        ("idea-b2", Change("BETAS", "(0.9, 0.9)", "(0.9, 0.95)"), 0.01),
    ]
    findings = [Finding(i, "x", VERSION, (c,), "h", 1, "PROMOTE", d, True) for i, c, d in stacked]
    brains = [HeuristicBrain(p, seed) for seed in range(brains_per_persona) for p in Persona]
    rng, tried, proposals = random.Random(0), {fingerprint(RECIPE)}, list[Proposal]()
    while len(proposals) < count:
        for brain in brains:
            proposal = brain.propose(RECIPE, VERSION, findings, tried)
            assert proposal is not None
            tried.add(fingerprint(proposal.source))
            proposals.append(proposal)
            verdict = rng.choice(["REJECT", "RETEST", "PROMOTE"])
            finding = Finding(
                f"idea-{len(proposals)}", brain.persona.value, VERSION, proposal.changes,
                proposal.hypothesis, 0, verdict, rng.gauss(0.0, 0.01),
            )  # fmt: skip
            findings.append(finding)
    return proposals[:count]


def refusals(sources: list[str], threshold: float = THRESHOLD) -> dict[int, NearDuplicate]:
    """What the ladder would refuse, in order: a refused idea is not compared against later."""
    index: list[tuple[str, PatchChange]] = []
    refused: dict[int, NearDuplicate] = {}
    for i, source in enumerate(sources):
        found = nearest(patch_change(RECIPE, source), index, threshold)
        if found is None:
            index.append((str(i), patch_change(RECIPE, source)))
        else:
            refused[i] = found
    return refused


def test_heuristic_proposals_are_refused_only_when_they_are_the_same_change() -> None:
    proposals = heuristic_proposals(200, brains_per_persona=2)
    assert {p.persona for p in proposals} == set(Persona)
    assert sum(len(p.changes) > 1 for p in proposals) > 20  # combinations are in the mix
    sources = [p.source for p in proposals]
    refused = refusals(sources)
    moved = [_moved(source) for source in sources]  # the same change: the same moves
    for i, found in refused.items():
        assert moved[i] == moved[int(found.idea_id)], proposals[i].changes
    # And every idea that repeats an admitted one (as rounded) is refused.
    admitted: list[list[tuple[str, object]]] = []
    repeats = set()
    for i in range(len(sources)):
        if moved[i] in admitted:
            repeats.add(i)
        else:
            admitted.append(moved[i])
    assert set(refused) == repeats
    # Measured: 2 of 200 refused, both GRAD_CLIP from 1.0: to 1.99 after 2.0, to 1.19 after
    # 1.25 (1.2 at 2 significant digits, half-even). Without the values condition: 31.
    print(f"near-duplicates among {len(sources)} heuristic proposals: {len(refused)}")
    assert len(refused) <= 6


def test_a_reworded_twin_of_a_heuristic_proposal_is_refused() -> None:
    proposals = heuristic_proposals(40, brains_per_persona=1)
    sources = [p.source for p in proposals]
    twins: list[str] = []
    for proposal in proposals[::4]:  # the same recipe with its changed lines re-commented
        twin = proposal.source
        for c in proposal.changes:
            line = next(x for x in twin.splitlines() if x.startswith(f"{c.name} = "))
            twin = twin.replace(line, line.split("  #")[0] + "   # tried again")
        assert fingerprint(twin) != fingerprint(proposal.source)
        twins.append(twin)
    refused = refusals(sources + twins)
    assert set(refused) >= set(range(len(sources), len(sources) + len(twins)))
    assert all(refused[len(sources) + k].similarity == 1.0 for k in range(len(twins)))
