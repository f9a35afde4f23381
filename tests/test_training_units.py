"""Corpus determinism and split hygiene, strict patching, tier config, metric parsing."""

from __future__ import annotations

import hashlib
import itertools
from pathlib import Path

import pytest

from recipes.patch import PatchRefused, apply
from scale_ladder.tiers import LadderConfigError, load_tiers
from tests.training_helpers import CHAMPION, edit, patch_for
from training import corpus as corpus_module
from training import corpus_modules
from training.targets import parse_metric

REPO = Path(__file__).resolve().parents[1]


def test_corpus_is_deterministic_and_split_by_file(tmp_path: Path) -> None:
    train, val, root = corpus_module.stdlib_files()
    assert train and val
    assert train == sorted(train) and val == sorted(val)
    # Only corpus modules, val's apart from train's; val's are in every CPython layout.
    train_modules = {corpus_modules.corpus_module(p.relative_to(root).parts[0]) for p in train}
    val_modules = {corpus_modules.corpus_module(p.relative_to(root).parts[0]) for p in val}
    assert train_modules <= set(corpus_modules.CORPUS_MODULES) - set(corpus_modules.VAL_MODULES)
    assert {"xmlrpc", "wsgiref", "curses", "dbm"} <= val_modules <= set(corpus_modules.VAL_MODULES)
    first = corpus_module.load_corpus(tmp_path / "a")
    second = corpus_module.load_corpus(tmp_path / "b")
    assert first.corpus_hash == second.corpus_hash
    assert bytes(first.val.numpy()) == bytes(second.val.numpy())
    assert bytes(first.train[:1000].numpy()) == bytes(second.train[:1000].numpy())
    # The val bytes never appear in train (whole files are held out).
    sample = bytes(first.val[5000:5200].numpy())
    assert sample not in bytes(first.train.numpy())


def test_a_cached_corpus_of_the_old_stdlib_split_is_rebuilt(tmp_path: Path) -> None:
    """Before issue 16 the corpus was the whole stdlib, under the key of "stdlib": a workspace
    that cached it must not train on it again."""
    old = tmp_path / hashlib.sha256(b"stdlib").hexdigest()[:12]
    old.mkdir()
    for name in ("train.bin", "val.bin"):
        (old / name).write_bytes(b"old corpus")
    (old / "manifest.json").write_text('{"hash": "old", "source": "stdlib"}')
    corpus = corpus_module.load_corpus(tmp_path)
    assert corpus.corpus_hash != "old" and len(corpus.val) > 64 * 1024


def test_user_data_file_and_folder(tmp_path: Path) -> None:
    text = tmp_path / "book.txt"
    text.write_bytes(bytes(range(32, 127)) * 10_000)
    single = corpus_module.load_corpus(tmp_path / "cache", text)
    assert len(single.val) == pytest.approx(len(single.train) / 9, rel=0.01)
    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(20):
        (folder / f"{i:02d}.txt").write_bytes(f"document {i} ".encode() * 5000)
    split = corpus_module.load_corpus(tmp_path / "cache", folder)
    assert split.corpus_hash != single.corpus_hash
    with pytest.raises(ValueError, match="corpus too small"):
        tiny = tmp_path / "tiny.txt"
        tiny.write_text("too short")
        corpus_module.load_corpus(tmp_path / "cache", tiny)


def test_patch_applies_exactly() -> None:
    patch = edit("LEARNING_RATE = 3e-3", "LEARNING_RATE = 2e-3")
    assert "LEARNING_RATE = 2e-3" in apply(CHAMPION, patch, "recipe.py")
    # A hunk that moved (lines added above it) still applies at its new place.
    shifted = "# a comment\n# another\n" + CHAMPION
    assert "LEARNING_RATE = 2e-3" in apply(shifted, patch, "recipe.py")


def test_patch_without_trailing_newline() -> None:
    patch = (
        "--- a/recipe.py\n+++ b/recipe.py\n@@ -1,2 +1,2 @@\n x = 1\n-y = 2\n"
        "\\ No newline at end of file\n+y = 3\n\\ No newline at end of file\n"
    )
    assert apply("x = 1\ny = 2", patch, "recipe.py") == "x = 1\ny = 3"


@pytest.mark.parametrize(
    ("patch", "reason"),
    [
        (patch_for("x\n", "train.py"), "patch touches 'train.py'"),
        ("--- /dev/null\n+++ b/recipe.py\n@@ -0,0 +1 @@\n+x\n", "may not create or delete"),
        ("hello", "not a unified diff"),
        ("--- a/recipe.py\n+++ b/recipe.py\n@@ -1,3 +1,3 @@\n x\n", "truncated"),
        ("--- a/recipe.py\n+++ b/recipe.py\n@@ -1 +1 @@\n?x\n", "malformed hunk line"),
        ("--- a/recipe.py\n+++ b/recipe.py\n@@ -1 +1 @@\n-nope\n+x\n", "does not apply"),
    ],
)
def test_bad_patches_are_refused(patch: str, reason: str) -> None:
    with pytest.raises(PatchRefused, match=reason):
        apply(CHAMPION, patch, "recipe.py")


def test_shipped_ladder_loads() -> None:
    tiers = load_tiers(REPO / "configs" / "ladder.toml")
    assert [t.index for t in tiers] == list(range(len(tiers)))
    assert all(a.width <= b.width for a, b in itertools.pairwise(tiers))


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("[[tier]]\nname = 't'\n", "missing key depth"),
        (
            "[[tier]]\nname='t'\ndepth=1\nwidth=32\ncontext=8\nbudget_kind='tokens'\nbudget=64\n"
            "time_limit_s=1\neval_tokens=1\nseeds=1\nsize=3\n",
            "unknown key size",
        ),
        (
            "[[tier]]\nname='t'\ndepth=1\nwidth=30\ncontext=8\nbudget_kind='tokens'\nbudget=64\n"
            "time_limit_s=1\neval_tokens=1\nseeds=1\n",
            "multiple of 32",
        ),
        (
            "[[tier]]\nname='t'\ndepth=0\nwidth=32\ncontext=8\nbudget_kind='tokens'\nbudget=64\n"
            "time_limit_s=1\neval_tokens=1\nseeds=1\n",
            r'tier\[0\] \("t"\)\.depth must be positive',
        ),
        (
            "[[tier]]\nname='t'\ndepth=1\nwidth=32\ncontext=8\nbudget_kind='flops'\nbudget=1\n"
            "time_limit_s=1\neval_tokens=1\nseeds=1\n",
            "budget_kind must be 'tokens' or 'seconds'",
        ),
        (
            "[[tier]]\nname='t'\ndepth=1\nwidth=32\ncontext=64\nbudget_kind='tokens'\n"
            "budget=1.5\ntime_limit_s=1\neval_tokens=1\nseeds=2\n",
            r"budget \(1.5 tokens\) is less than one row of the tier's context \(64 tokens\)",
        ),
        ("tiers = 3\n", "unknown key tiers"),
    ],
)
def test_ladder_mistakes_name_the_key(tmp_path: Path, text: str, reason: str) -> None:
    path = tmp_path / "ladder.toml"
    path.write_text(text)
    with pytest.raises(LadderConfigError, match=reason):
        load_tiers(path)


def test_metric_parsing_takes_the_last_finite_value() -> None:
    output = "epoch 1\nval_loss: 2.5\nval_loss: 1.25\nother: 3\n"
    assert parse_metric(output, "val_loss") == 1.25
    assert parse_metric("val_loss: nan\n", "val_loss") is None
    assert parse_metric("no metric here", "val_loss") is None


def test_promotion_keys_are_optional_and_checked(tmp_path: Path) -> None:
    base = (
        "[[tier]]\nname='t'\ndepth=1\nwidth=32\ncontext=8\nbudget_kind='tokens'\nbudget=64\n"
        "time_limit_s=1\neval_tokens=1\nseeds=2\n"
    )
    path = tmp_path / "ladder.toml"
    path.write_text(base)
    (tier,) = load_tiers(path)
    assert tier.rule.seeds == 2 and tier.rule.sigmas == 2.0
    path.write_text(base + "sigmas = 3\ntop_fraction = 0.25\n")
    (tier,) = load_tiers(path)
    assert tier.rule.sigmas == 3.0 and tier.rule.top_fraction == 0.25
    for extra, reason in [
        ("max_seeds = 1\n", "max_seeds .1. is below seeds .2."),
        ("top_fraction = 1.5\n", "top_fraction must be in"),
        ("sigmas = 'two'\n", "sigmas must be float"),
    ]:
        path.write_text(base + extra)
        with pytest.raises(LadderConfigError, match=reason):
            load_tiers(path)
