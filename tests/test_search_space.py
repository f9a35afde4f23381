"""The search space a recipe declares in its comments, and what brains derive without one."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from agents.hypotheses import describe
from agents.search_space import Dimension, Kind, SpaceError, space_of, step
from recipes.constants import Change, constants, edit, parse_value

BYTELM = (Path(__file__).resolve().parents[1] / "training/recipes/bytelm.py").read_text()


def dims(source: str) -> dict[str, Dimension]:
    return space_of(source).by_name()


def test_a_declared_range_is_log_when_both_ends_are_positive() -> None:
    d = dims("LR = 3e-3  # peak rate; search: 3e-4..3e-2\n")["LR"]
    assert (d.kind, d.low, d.high, d.log, d.declared) == (Kind.SCALE, 3e-4, 3e-2, True, True)
    linear = dims("BETA2 = 0.95  # search: 0.9..0.999 linear\n")["BETA2"]
    assert (linear.kind, linear.log) == (Kind.FRACTION, False)
    through_zero = dims("SHIFT = 0.5  # search: -1..1\n")["SHIFT"]
    assert through_zero.log is False


def test_integers_powers_of_two_choices_and_fixed() -> None:
    space = dims(
        "MLP = 4  # search: 1..8\n"
        "BATCH = 16  # search: 4..64 pow2\n"
        'ACT = "gelu"  # search: gelu | relu | silu\n'
        "HEAD = 32  # search: 16 | 32 | 64\n"
        "SEED = 7  # search: fixed\n"
        "FLAG = True\n"
    )
    assert (space["MLP"].kind, space["MLP"].low, space["MLP"].high) == (Kind.INT, 1, 8)
    assert (space["BATCH"].kind, space["BATCH"].low, space["BATCH"].high) == (Kind.POW2, 4, 64)
    assert space["ACT"].choices == ("gelu", "relu", "silu")
    assert space["HEAD"].choices == (16, 32, 64)  # numbers stay numbers
    assert space["FLAG"].choices == (False, True)
    assert "SEED" not in space


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("LR = 3e-3  # search: 1e-2..1e-1\n", "LR: its value 0.003 is outside"),
        ("LR = 3e-3  # search: 1e-1..1e-2\n", "LR: `search: 1e-1..1e-2` needs LOW < HIGH"),
        ("LR = 3e-3  # search: lots\n", "LR: cannot read `search: lots`"),
        ("LR = 3e-3  # search: 1e-4..1e-2 cubic\n", "LR: unknown word 'cubic'"),
        ("LR = 3e-3  # search: a..b\n", "LR: `search: a..b` needs numbers"),
        ("LR = 3e-3  # search: 1e-4..1e-2 pow2\n", "LR: pow2 is for integers"),
        ("N = 4  # search: 1.5..8\n", "N is an integer"),
        ("N = 4  # search: 3..64 pow2\n", "N: pow2 needs powers of two"),
        ("X = 0.5  # search: -1..1 log\n", "X: a log range needs LOW > 0"),
        ('ACT = "gelu"  # search: relu | silu\n', "ACT: its value 'gelu' is not among"),
        ('ACT = "gelu"  # search: gelu | gelu\n', "ACT: a choice is listed twice"),
        ('ACT = "gelu"  # search: 1..2\n', "ACT = 'gelu' takes choices"),
        ("BETAS = (0.9, 0.95)  # search: 0..1\n", "BETAS: a tuple constant cannot declare"),
    ],
)
def test_a_bad_declaration_names_the_constant_and_the_problem(line: str, says: str) -> None:
    with pytest.raises(SpaceError) as caught:
        space_of(line)
    assert str(caught.value).startswith(says)


def test_ranges_derived_around_undeclared_values() -> None:
    space = dims(
        "WD = 0.1\nWARMUP_FRACTION = 0.05\nBETA2_DECAY = 0.95\nDEPTH = 6\nWIDTH = 64\n"
        'NAME = "x"\nZERO = 0.0\nNEG = -3\nBETAS = (0.9, 0.95)\n'
    )
    assert (space["WD"].kind, space["WD"].low, space["WD"].high) == (Kind.SCALE, 0.01, 1.0)
    warmup = space["WARMUP_FRACTION"]
    assert (warmup.kind, warmup.low, warmup.high) == (Kind.FRACTION, 0.005, 0.5)
    near_one = space["BETA2_DECAY"]  # a decade either side of the distance to 1, linearly
    assert (near_one.low, near_one.high, near_one.log) == (0.5, 0.995, False)
    assert (space["DEPTH"].kind, space["DEPTH"].low, space["DEPTH"].high) == (Kind.INT, 1, 24)
    assert (space["WIDTH"].kind, space["WIDTH"].low, space["WIDTH"].high) == (Kind.POW2, 8, 512)
    assert {"NAME", "ZERO", "NEG"}.isdisjoint(space)  # no options to guess, no scale through 0
    assert space["BETAS[0]"].kind is Kind.FRACTION and space["BETAS[1]"].index == 1


@pytest.mark.parametrize(
    "line",
    ["BETA2 = 0.99995\n", "EMA_MOMENTUM = 0.99999\n", "DROPOUT = 0.00005\n", "P_BETA = 0.5\n"],
)
def test_a_derived_fraction_range_holds_its_value_however_close_to_0_or_1(line: str) -> None:
    (d,) = space_of(line).dimensions
    (x,) = (c.value for c in constants(line).values())
    assert d.low < x < d.high  # Optuna refuses low > high, and the value must stay reachable


def test_declarations_that_would_overflow_or_take_long_to_read_are_refused() -> None:
    # (A backtracking pattern took 7 s per read of the 40 KB one; bench it, never assert it.)
    for text, says in [
        ("-1e308..1e308 linear", "within ±1e+100"),
        ("1 | " + "9" * 400, "is beyond ±1e+100"),
        ("1..1" * 10_000 + " !", "over 4096 characters"),
        ("1..2..3", "cannot read"),
    ]:
        with pytest.raises(SpaceError, match=re.escape(says)):
            space_of(f"N = 1  # search: {text}\n")
    assert not space_of("TINY = 5e-324\n").dimensions  # too close to 0 to derive a range


def test_the_declaration_stays_out_of_what_people_read() -> None:
    (lr,) = constants("LR = 3e-3  # peak learning rate; search: 3e-4..3e-2\n").values()
    assert (lr.comment, lr.declaration) == ("peak learning rate", "3e-4..3e-2")
    said = describe(Change("LR", "3e-3", "6e-3"), lr.comment)
    assert said == "Raise LR from 3e-3 to 6e-3 (x2): peak learning rate"


def test_string_constants_are_read_and_rewritten_in_place() -> None:
    source = 'ACT = "gelu"  # activation; search: gelu | relu | silu\nX = 1\n'
    assert constants(source)["ACT"].value == "gelu"
    new, changes = edit(source, {"ACT": "relu"})
    assert new == 'ACT = "relu"  # activation; search: gelu | relu | silu\nX = 1\n'
    assert changes == (Change("ACT", '"gelu"', '"relu"'),)
    assert parse_value(changes[0].new) == "relu"
    quoted, _ = edit(source, {"ACT": 'say "hi"'})
    assert constants(quoted)["ACT"].value == 'say "hi"'  # quotes inside survive


def test_unit_coordinates_for_a_surrogate() -> None:
    space = space_of(
        "LR = 1e-3  # search: 1e-4..1e-2\nACT = 'a'  # search: a | b | c\nFLAG = True\n"
    )
    point = space.unit({"LR": 1e-3, "ACT": "b", "FLAG": False})
    assert point == pytest.approx([0.5, 0.0, 1.0, 0.0, 0.0])  # LR mid (log); ACT one-hot; flag
    assert len(space.unit({})) == 5  # a missing value sits mid-range, the width is kept


def test_the_bytelm_recipe_declares_what_it_can_run() -> None:
    space = dims(BYTELM)
    assert space["HEAD_DIM"].choices == (16, 32, 64)  # widths are multiples of 64
    assert (space["BATCH_SIZE"].kind, space["BATCH_SIZE"].low, space["BATCH_SIZE"].high) == (
        Kind.POW2,
        4,
        64,
    )
    assert space["MLP_RATIO"].kind is Kind.INT
    assert step(space["HEAD_DIM"], 64, math.log(2)) is None


def test_every_bad_declaration_is_named_at_once() -> None:
    with pytest.raises(SpaceError) as caught:
        space_of("A = 1  # search: 5..9\nB = 2  # search: 1..3\nC = 0.5  # search: x..y\n")
    said = str(caught.value)
    assert said.startswith("A: its value 1 is outside") and "; C: `search: x..y` needs" in said
