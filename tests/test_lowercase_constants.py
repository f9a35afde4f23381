"""A stock nanoGPT-style train.py: its lowercase config globals are dials, the rest of the file is
not, edits stay byte-exact, and what the project holds fixed (by comment, by `target.fixed`, by
the run command's options) is never moved by an offline brain."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agents.brain import Desk, Finding, Persona
from agents.heuristic_brain import HeuristicBrain
from agents.model_brain import ModelBrain, ModelSearch, Sampler
from agents.search_space import Kind, space_of
from recipes.constants import (
    CONSTANT_NAME,
    Change,
    changes_between,
    constants,
    edit,
    with_values,
)
from recipes.fixed import command_names, fixed_names, is_fixed
from recipes.identity import fingerprint

RECIPES = Path(__file__).resolve().parents[1] / "training/recipes"
NANOGPT = '''"""docstring"""
import os
import torch
from model import GPT
# default config values
out_dir = 'out'
eval_interval = 2000
eval_only = False
dataset = 'shakespeare_char'
batch_size = 12
n_layer = 6
dropout = 0.0
bias = False
learning_rate = 6e-4  # max learning rate
beta2 = 0.95
max_iters = 600000
_private = 3
config_keys = [k for k,v in globals().items() if not k.startswith('_')]
exec(open('configurator.py').read())  # overrides from the command line
# ... training code ...
iter_num = 0
best_val_loss = 1e9
'''
DIALS = [
    "out_dir",
    "eval_interval",
    "eval_only",
    "dataset",
    "batch_size",
    "n_layer",
    "dropout",
    "bias",
    "learning_rate",
    "beta2",
    "max_iters",
]
# The same header with more to hold fixed: a `search: fixed` comment, globs for target.fixed.
FIXABLE = (
    NANOGPT.replace("dropout = 0.0", "dropout = 0.1")
    .replace("beta2 = 0.95", "beta2 = 0.95  # search: fixed")
    .replace("max_iters = 600000", "max_iters = 600000\nwandb_log = False\nweight_decay = 0.1")
)
PATTERNS = "wandb_*, eval_interval"
COMMAND = "python train.py config/train.py --batch_size=32 --n_layer 4 --compile"
HELD = {"beta2", "wandb_log", "eval_interval", "batch_size", "n_layer"}
VERSION = 1


# --- which assignments are dials ----------------------------------------------------------------


def test_a_nanogpt_header_yields_its_config_globals_as_dials() -> None:
    found = constants(NANOGPT)
    assert list(found) == DIALS  # not iter_num, best_val_loss, config_keys or _private
    assert found["learning_rate"].value == 6e-4 and found["learning_rate"].comment == (
        "max learning rate"
    )
    assert found["out_dir"].value == "out" and found["eval_only"].value is False
    assert NANOGPT.splitlines()[found["beta2"].line - 1] == "beta2 = 0.95"


def test_upper_case_names_count_anywhere_other_names_only_in_the_opening_block() -> None:
    source = (
        '"""doc"""\nimport math\nlr = 0.1\nn: int = 4\nlr *= 2\n"a bare string"\nwidth = 8\n'
        "setup()\nLATE = 3\nlate = 5\n"
        "def f():\n    inner = 1\n    INNER = 2\nAFTER_DEF = 0.5\n"
    )
    assert list(constants(source)) == ["lr", "n", "width", "LATE", "AFTER_DEF"]


@pytest.mark.parametrize(
    "ender",
    [
        "print('start')",
        "if True:\n    pass",
        "try:\n    import wandb\nexcept ImportError:\n    wandb = None",
        "for _ in range(2):\n    pass",
        "def main():\n    pass",
        "class Config:\n    pass",
        "assert True",
    ],
)
def test_the_opening_block_ends_at_the_first_statement_that_is_not_an_import_string_or_assignment(
    ender: str,
) -> None:
    source = f"import os\nbefore = 1\nBEFORE = 2\n{ender}\nafter = 3\nAFTER = 4\n"
    assert list(constants(source)) == ["before", "BEFORE", "AFTER"]


def test_names_starting_with_an_underscore_never_count() -> None:
    assert list(constants("_lr = 0.1\n__all__ = ('x',)\n_LR = 0.2\nlr = 0.3\n")) == ["lr"]


@pytest.mark.parametrize("recipe", ["bytelm.py", "synthetic.py"])
def test_the_built_in_recipes_keep_exactly_their_upper_case_constants(recipe: str) -> None:
    source = (RECIPES / recipe).read_text()
    found = constants(source)
    assert found and all(CONSTANT_NAME.match(name) for name in found)
    upper_only = {  # every module-level `UPPER = literal` line, read without `ast`
        line.split("=")[0].strip()
        for line in source.splitlines()
        if CONSTANT_NAME.match(line.split("=")[0].strip()) and " = " in line
    }
    assert set(found) == upper_only


def test_bytelm_keeps_its_constants_in_order() -> None:
    assert list(constants((RECIPES / "bytelm.py").read_text())) == [
        "BATCH_SIZE",
        "LEARNING_RATE",
        "MIN_LR_FRACTION",
        "WARMUP_FRACTION",
        "WEIGHT_DECAY",
        "BETAS",
        "GRAD_CLIP",
        "HEAD_DIM",
        "MLP_RATIO",
        "TIE_EMBEDDINGS",
        "INIT_STD",
    ]


def test_edits_of_lowercase_dials_keep_every_other_byte() -> None:
    new = with_values(NANOGPT, {"learning_rate": 1e-3, "eval_only": True, "dataset": "owt"})
    old_lines, new_lines = NANOGPT.split("\n"), new.split("\n")
    assert len(old_lines) == len(new_lines)
    assert [(a, b) for a, b in zip(old_lines, new_lines, strict=True) if a != b] == [
        ("eval_only = False", "eval_only = True"),
        ("dataset = 'shakespeare_char'", 'dataset = "owt"'),
        ("learning_rate = 6e-4  # max learning rate", "learning_rate = 0.001  # max learning rate"),
    ]
    assert changes_between(NANOGPT, new) == (
        Change("eval_only", "False", "True"),
        Change("dataset", "'shakespeare_char'", '"owt"'),
        Change("learning_rate", "6e-4", "0.001"),
    )
    with pytest.raises(KeyError, match="iter_num"):
        edit(NANOGPT, {"iter_num": 5})  # below the opening block: not a dial to write


def test_the_fraction_rule_reads_lowercase_names() -> None:
    space = space_of(FIXABLE).by_name()
    assert space["dropout"].kind is Kind.FRACTION
    assert space_of(NANOGPT).by_name()["beta2"].kind is Kind.FRACTION  # FIXABLE fixes it
    assert (space["dropout"].low, space["dropout"].high) == (0.01, 0.55)  # stays inside (0, 1)
    assert space["weight_decay"].kind is Kind.SCALE  # not named like a fraction
    assert space["learning_rate"].kind is Kind.SCALE and space["bias"].kind is Kind.FLAG
    assert space["batch_size"].kind is Kind.INT and "out_dir" not in space  # strings: declared


# --- what the project holds fixed -------------------------------------------------------------


def test_fixed_names_come_from_the_config_and_the_run_command() -> None:
    assert fixed_names(PATTERNS, COMMAND) == {
        "wandb_*",
        "eval_interval",
        "batch_size",
        "n_layer",
        "compile",
    }
    assert fixed_names("", "") == frozenset()
    assert command_names("torchrun --nproc-per-node=8 train.py --lr {lr} -v 'x") == {
        "nproc_per_node",
        "lr",
    }  # dashes read as underscores; an unbalanced quote still gives its options
    assert command_names("python t.py --=3 -- --x.y=1 --ok=--no") == {"ok"}
    assert is_fixed("wandb_project", {"wandb_*"}) and not is_fixed("WANDB_LOG", {"wandb_*"})


def test_the_space_leaves_out_every_fixed_constant() -> None:
    space = space_of(FIXABLE, fixed_names(PATTERNS, COMMAND)).by_name()
    assert set(space) == {
        "eval_only",
        "dropout",
        "bias",
        "learning_rate",
        "max_iters",
        "weight_decay",
    }
    assert not HELD & set(space)


def _desk(
    source: str, findings: tuple[Finding, ...] = (), tried: frozenset[str] = frozenset()
) -> Desk:
    return Desk(
        "r-0-tpe",
        VERSION,
        source,
        "train.py",
        top_tier=2,
        findings=findings,
        failures=(),
        notes=(),
        tried=tried | {fingerprint(source)},
        sources={VERSION: source},
        fixed=fixed_names(PATTERNS, COMMAND),
    )


def _assert_held(source: str, changes: tuple[Change, ...], champion: str) -> None:
    assert changes and not HELD & {c.name for c in changes}
    lines, before = source.splitlines(), champion.splitlines()
    for name in HELD:
        line = constants(champion)[name].line - 1
        assert lines[line] == before[line]


def test_the_tpe_brain_never_moves_a_fixed_constant() -> None:
    search = ModelSearch(Sampler.TPE, seed=3)
    tried: set[str] = set()
    for i in range(40):
        attempt = asyncio.run(
            ModelBrain(search).propose(_desk(FIXABLE, tried=frozenset(tried)), f"idea-{i}", "t")
        )
        assert attempt.proposal is not None, attempt.why_not
        _assert_held(attempt.proposal.source, attempt.proposal.changes, FIXABLE)
        tried.add(fingerprint(attempt.proposal.source))


def _finding(
    idea_id: str, name: str, old: str, new: str, delta: float, stacked: bool = False
) -> Finding:
    verdict = "PROMOTE" if stacked else "REJECT"
    return Finding(
        idea_id,
        "r-9-anthropic-explorer",  # an LLM researcher may move anything it likes
        VERSION - 1 if stacked else VERSION,
        (Change(name, old, new),),
        "h",
        1,
        verdict,
        delta,
        VERSION if stacked else 0,
    )


# What an LLM researcher did: it stacked a move of batch_size (the ablator would revert it) and
# near-missed with beta2 and wandb_log (the combiner would pair them with learning_rate's).
CHAMPION = FIXABLE.replace("batch_size = 12", "batch_size = 32")
FINDINGS = (
    _finding("idea-batch", "batch_size", "12", "32", 0.01, stacked=True),
    _finding("idea-drop", "dropout", "0.05", "0.1", 0.005, stacked=True),
    _finding("idea-beta", "beta2", "0.95", "0.99", 0.02),
    _finding("idea-wandb", "wandb_log", "False", "True", 0.01),
    _finding("idea-lr", "learning_rate", "6e-4", "1e-3", 0.03),
)


@pytest.mark.parametrize("persona", list(Persona))
def test_the_heuristic_brain_never_moves_a_fixed_constant(persona: Persona) -> None:
    brain = HeuristicBrain(persona, seed=7)
    fixed = fixed_names(PATTERNS, COMMAND)
    tried = {fingerprint(CHAMPION)}
    moved: set[str] = set()
    for _ in range(40):
        proposal = brain.propose(CHAMPION, VERSION, FINDINGS, tried, fixed)
        if proposal is None:
            break
        _assert_held(proposal.source, proposal.changes, CHAMPION)
        moved |= {c.name for c in proposal.changes}
        tried.add(fingerprint(proposal.source))
    assert {"learning_rate", "dropout"} <= moved  # it did move what it may
