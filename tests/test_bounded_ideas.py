"""The work one idea can cause is bounded (issue 16, deliverable 5): a patch too long, with too
many hunks, growing the file too far, or a hypothesis too long is REFUSED with the reason, by
the real Ladder and by a real trainer's runner, before any of it is applied."""

from __future__ import annotations

import base64
import difflib
import random
from pathlib import Path

from bus.messages import Decision, Idea, RunSpec, RunStatus, Verdict
from recipes.patch import MAX_ADDED_INFORMATION, MAX_FILE_CHARS, MAX_HUNKS, MAX_PATCH_CHARS
from scale_ladder.admission import MAX_HYPOTHESIS_CHARS
from scale_ladder.ladder import Ladder
from scale_ladder.tiers import load_tiers
from tests.training_helpers import run
from training.corpus import Corpus
from training.target_info import RECIPE


def diff(old: str, new: str) -> str:
    return "".join(
        difflib.unified_diff(
            old.splitlines(True), new.splitlines(True), "a/recipe.py", "b/recipe.py", n=0
        )
    )


def verdict_of(source: str, patch: str, hypothesis: str = "h") -> Decision:
    ladder = Ladder(load_tiers(), "recipe.py", source)
    ladder.act()
    ladder.observe(Idea("idea-big", "agent-x", hypothesis, patch, 1))
    out = ladder.act()
    assert not [m for m in out if isinstance(m, RunSpec)], "nothing of it may run"
    (decision,) = [m for m in out if isinstance(m, Decision)]
    return decision


def test_a_patch_past_the_size_limit_is_refused_with_its_size() -> None:
    source = RECIPE.read_text()
    lines = source.splitlines(True)
    grown = "".join(lines + [f"EXTRA_{i} = {i}\n" for i in range(8000)])  # ~110 KB added
    decision = verdict_of(source, diff(source, grown))
    assert decision.verdict is Verdict.REFUSED
    assert f"at most {MAX_PATCH_CHARS} are accepted" in decision.rule


def test_a_patch_of_too_many_hunks_is_refused() -> None:
    source = "".join(f"C_{i} = {i}\n" for i in range(2 * MAX_HUNKS + 20))
    every_other = "".join(
        f"C_{i} = {i + 1 if i % 2 == 0 else i}\n" for i in range(2 * MAX_HUNKS + 20)
    )
    patch = diff(source, every_other)
    assert len(patch) < MAX_PATCH_CHARS  # small, but thousands of lookups
    decision = verdict_of(source, patch)
    assert decision.verdict is Verdict.REFUSED and f"at most {MAX_HUNKS} are accepted" in (
        decision.rule
    )


def test_a_file_may_not_grow_past_its_limit() -> None:
    lines = [f"C_{i} = {i}  # a long comment to fill the line\n" for i in range(20_000)]
    source = "".join(lines)[: MAX_FILE_CHARS - 20_000]
    source = source[: source.rindex("\n") + 1]  # whole lines, 20 KB under the limit
    grown = source + "".join(f"D_{i} = {i}\n" for i in range(4000))
    decision = verdict_of(source, diff(source, grown))
    assert decision.verdict is Verdict.REFUSED and "may grow to at most" in decision.rule


def test_a_hypothesis_past_its_limit_is_refused() -> None:
    source = RECIPE.read_text()
    small = diff(source, source.replace("BATCH_SIZE = 16", "BATCH_SIZE = 24", 1))
    decision = verdict_of(source, small, "x" * (MAX_HYPOTHESIS_CHARS + 1))
    assert decision.verdict is Verdict.REFUSED and "the hypothesis is" in decision.rule


def test_a_trainer_refuses_an_oversized_patch_before_running_it(
    corpus: Corpus, tmp_path: Path
) -> None:
    source = RECIPE.read_text()
    grown = source + "".join(f"EXTRA_{i} = {i}\n" for i in range(8000))
    result = run(corpus, tmp_path, diff(source, grown))
    assert result.status is RunStatus.REFUSED
    assert result.reason.startswith("patch refused: the patch is")


def carrying(source: str, payload: bytes) -> str:
    """`source` with `payload` packed into it, as a red team packed pretrained weights."""
    blob = base64.b85encode(payload).decode()
    lines = [f"    {blob[i : i + 96]!r}\n" for i in range(0, len(blob), 96)]
    return source + "\n_WEIGHTS = (\n" + "".join(lines) + ")\n"


def test_a_patch_carrying_data_is_refused_and_one_adding_real_code_is_not(
    corpus: Corpus, tmp_path: Path
) -> None:
    """A red team packed weights pretrained offline on the public corpus into a 51 KB patch
    (2.44 against an honest 3.38, control windows and all). What a patch adds, compressed, is
    bounded however it is written: 12 KB of random bytes is refused by the ladder and by a
    trainer, naming it; adding 16 KB of real code (a module of this project) is not."""
    source = RECIPE.read_text()
    packed = carrying(source, random.Random(3).randbytes(12 * 1024))
    decision = verdict_of(source, diff(source, packed))
    assert decision.verdict is Verdict.REFUSED
    assert f"at most {MAX_ADDED_INFORMATION} are accepted" in decision.rule
    result = run(corpus, tmp_path, diff(source, packed))
    assert result.status is RunStatus.REFUSED and "bytes of information" in result.reason
    module = (Path(__file__).parents[1] / "training" / "evaluator.py").read_text()
    code = source + "\n" + module.replace("from __future__ import annotations\n", "")
    assert len(diff(source, code)) > 15_000
    ladder = Ladder(load_tiers(), "recipe.py", source)
    ladder.act()
    ladder.observe(Idea("idea-module", "agent-x", "h", diff(source, code), 1))
    out = ladder.act()
    assert not [m for m in out if isinstance(m, Decision)]
    assert [m for m in out if isinstance(m, RunSpec) and m.idea_id == "idea-module"]
