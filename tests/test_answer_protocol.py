"""The LLM answer protocol: HYPOTHESIS plus SEARCH/REPLACE edits, read tolerantly, applied
strictly, every refusal with a reason that names the block and the problem."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.answer_protocol import (
    FORMAT,
    Answer,
    Edit,
    ProtocolError,
    apply_edits,
    parse_answer,
    repair_request,
)
from training.target_info import RECIPE as RECIPE_PATH

RECIPE = RECIPE_PATH.read_text()
EDITABLE = "recipe.py"
LR = "LEARNING_RATE = 3e-3  # peak AdamW learning rate (small models on few steps like it high)"
LR_NEW = LR.replace("3e-3", "4e-3")

ANSWER = f"""HYPOTHESIS: A higher peak learning rate trains the small models further in the same
budget, so the held-out loss should drop.

recipe.py
<<<<<<< SEARCH
{LR}
=======
{LR_NEW}
>>>>>>> REPLACE
"""


def block(search: str, replace: str, path: str = "recipe.py", width: int = 7) -> str:
    head = f"{path}\n" if path else ""
    return f"{head}{'<' * width} SEARCH\n{search}{'=' * width}\n{replace}{'>' * width} REPLACE\n"


def reason(text: str, source: str = RECIPE) -> str:
    with pytest.raises(ProtocolError) as info:
        apply_edits(source, parse_answer(text), EDITABLE)
    assert str(info.value) == info.value.reason
    return info.value.reason


def test_the_canonical_answer_on_the_real_recipe() -> None:
    answer = parse_answer(ANSWER)
    assert answer.hypothesis.startswith("A higher peak learning rate trains the small models")
    assert answer.hypothesis.endswith("so the held-out loss should drop.")
    assert answer.edits == (Edit("recipe.py", LR + "\n", LR_NEW + "\n"),)
    new = apply_edits(RECIPE, answer, EDITABLE)
    assert new == RECIPE.replace(LR, LR_NEW)
    compile(new, EDITABLE, "exec")


def test_format_is_short_and_shows_every_marker() -> None:
    assert len(FORMAT.splitlines()) <= 10
    for marker in ("HYPOTHESIS:", "<<<<<<< SEARCH", "=======", ">>>>>>> REPLACE"):
        assert marker in FORMAT


def test_several_blocks_apply_in_order_each_to_the_previous_result() -> None:
    batch = "BATCH_SIZE = 16  # sequences per step; search: 4..64 pow2\n"
    clip = "GRAD_CLIP = 1.0  # max global gradient norm\n"
    text = (
        "HYPOTHESIS: Larger batches with a looser clip.\n"
        + block(batch, batch.replace("16", "32"))
        + block(clip, clip.replace("1.0", "2.0"))
        # The third block searches the text the first one wrote.
        + block(batch.replace("16", "32"), batch.replace("16", "24"))
    )
    new = apply_edits(RECIPE, parse_answer(text), EDITABLE)
    assert "BATCH_SIZE = 24  #" in new and "GRAD_CLIP = 2.0  #" in new
    assert len(new.splitlines()) == len(RECIPE.splitlines())


def test_a_code_edit_inside_a_function_with_dropped_indentation() -> None:
    # The model quoted an indented body without its indentation: matched consistently, and
    # the replacement is indented the same way.
    search = "t = min(1.0, (progress - WARMUP_FRACTION) / (1 - WARMUP_FRACTION))\n"
    replace = "t = min(1.0, (progress - WARMUP_FRACTION) / (1 - WARMUP_FRACTION))\nt = t**0.5\n"
    answer = parse_answer("HYPOTHESIS: A slower decay early on.\n" + block(search, replace))
    new = apply_edits(RECIPE, answer, EDITABLE)
    assert "    t = min(1.0, (progress - WARMUP_FRACTION)" in new
    assert "\n    t = t**0.5\n" in new
    compile(new, EDITABLE, "exec")


def test_too_much_indentation_is_removed_consistently() -> None:
    source = "def f():\n    x = 1\n    return x\n"
    search = "        x = 1\n        return x\n"
    replace = "        x = 2\n        return x\n"
    answer = parse_answer("HYPOTHESIS: h\n" + block(search, replace))
    assert apply_edits(source, answer, EDITABLE) == "def f():\n    x = 2\n    return x\n"


def test_trailing_whitespace_does_not_matter() -> None:
    search = "BATCH_SIZE = 16  # sequences per step; search: 4..64 pow2   \n"
    answer = parse_answer("HYPOTHESIS: h\n" + block(search, "BATCH_SIZE = 8\n"))
    assert "\nBATCH_SIZE = 8\n" in apply_edits(RECIPE, answer, EDITABLE)


def _variants() -> list[tuple[str, str]]:
    canonical = block(LR + "\n", LR_NEW + "\n")
    bare = block(LR + "\n", LR_NEW + "\n", "")
    return [
        ("whole answer fenced", f"```\nHYPOTHESIS: h\n{canonical}```\n"),
        ("block fenced", f"HYPOTHESIS: h\n\nrecipe.py\n```python\n{bare}```\n"),
        ("prose around", f"Sure! My idea.\n\nHYPOTHESIS: h\n\n{canonical}\nHope it helps.\n"),
        ("crlf", f"HYPOTHESIS: h\n{canonical}".replace("\n", "\r\n")),
        ("five markers", "HYPOTHESIS: h\n" + block(LR + "\n", LR_NEW + "\n", width=5)),
        ("nine markers", "HYPOTHESIS: h\n" + block(LR + "\n", LR_NEW + "\n", width=9)),
        ("lower case", f"hypothesis: h\n{canonical}"),
        ("bold label", f"**HYPOTHESIS:** h\n{canonical}"),
        ("bold word", f"**Hypothesis**: h\n{canonical}"),
        ("heading", f"## Hypothesis: h\n{canonical}"),
        ("label alone", f"**Hypothesis:**\n\nh\n\n{canonical}"),
        ("backticks", "HYPOTHESIS: h\n" + block(LR + "\n", LR_NEW + "\n", "`recipe.py`")),
        ("dot slash", "HYPOTHESIS: h\n" + block(LR + "\n", LR_NEW + "\n", "./recipe.py")),
        ("longer path", "HYPOTHESIS: h\n" + block(LR + "\n", LR_NEW + "\n", "work/recipe.py")),
        ("file label", "HYPOTHESIS: h\n" + block(LR + "\n", LR_NEW + "\n", "**File: recipe.py**")),
        ("no path", "HYPOTHESIS: h\n" + block(LR + "\n", LR_NEW + "\n", "")),
        ("hypothesis last", f"{canonical}\nHYPOTHESIS: h\n"),
    ]  # fmt: skip


@pytest.mark.parametrize(("name", "text"), _variants(), ids=[n for n, _ in _variants()])
def test_tolerant_forms_all_give_the_same_edit(name: str, text: str) -> None:
    answer = parse_answer(text)
    assert answer.hypothesis == "h"
    (edit,) = answer.edits
    assert edit.search == LR + "\n" and edit.replace == LR_NEW + "\n"
    assert apply_edits(RECIPE, answer, EDITABLE) == RECIPE.replace(LR, LR_NEW)


def test_a_hypothesis_paragraph_stops_at_the_path_line() -> None:
    text = "HYPOTHESIS: Raise the rate,\nit helps.\nrecipe.py\n" + block(
        LR + "\n", LR_NEW + "\n", ""
    )
    answer = parse_answer(text)
    assert answer.hypothesis == "Raise the rate, it helps."
    assert answer.edits[0].path == "recipe.py"


def test_a_crlf_file_keeps_its_line_endings() -> None:
    source = "A = 1\r\nB = 2\r\n"
    answer = parse_answer("HYPOTHESIS: h\n" + block("B = 2\n", "B = 3\n"))
    assert apply_edits(source, answer, EDITABLE) == "A = 1\r\nB = 3\r\n"


def test_a_file_without_a_final_newline() -> None:
    answer = parse_answer("HYPOTHESIS: h\n" + block("B = 2\n", "B = 3\nC = 4\n"))
    assert apply_edits("A = 1\nB = 2", answer, EDITABLE) == "A = 1\nB = 3\nC = 4"


def test_a_deletion_and_an_empty_file() -> None:
    answer = parse_answer("HYPOTHESIS: h\n" + block("B = 2\n", ""))
    assert apply_edits("A = 1\nB = 2\n", answer, EDITABLE) == "A = 1\n"
    fill = parse_answer("HYPOTHESIS: h\n" + block("", "A = 1\n"))
    assert apply_edits("", fill, EDITABLE) == "A = 1\n"


# --- refusals ----------------------------------------------------------------------------------


def test_no_hypothesis() -> None:
    with pytest.raises(ProtocolError, match="no hypothesis"):
        parse_answer(block(LR + "\n", LR_NEW + "\n"))
    with pytest.raises(ProtocolError, match="no hypothesis"):
        parse_answer("HYPOTHESIS:\n" + block(LR + "\n", LR_NEW + "\n"))


def test_no_edit_blocks() -> None:
    with pytest.raises(ProtocolError, match="no edit blocks"):
        parse_answer("HYPOTHESIS: raise LEARNING_RATE to 4e-3.\n")


@pytest.mark.parametrize(
    ("tail", "why"),
    [
        (f"<<<<<<< SEARCH\n{LR}\n", "block 2 is unterminated: it has no `=======` line"),
        (
            f"<<<<<<< SEARCH\n{LR}\n=======\n{LR_NEW}\n",
            "block 2 is unterminated: it has no `>>>>>>> REPLACE` line",
        ),
        (f"<<<<<<< SEARCH\n{LR}\n>>>>>>> REPLACE\n", "block 2 is unterminated"),
        (f"{LR}\n=======\n{LR_NEW}\n>>>>>>> REPLACE\n", "no `<<<<<<< SEARCH` line before it"),
    ],
)
def test_unterminated_blocks(tail: str, why: str) -> None:
    first = block("BATCH_SIZE = 16  # sequences per step; search: 4..64 pow2\n", "BATCH_SIZE = 8\n")
    with pytest.raises(ProtocolError, match=re.escape(why)):
        parse_answer("HYPOTHESIS: h\n" + first + tail)


def test_edits_outside_the_editable_file_are_refused() -> None:
    text = "HYPOTHESIS: h\n" + block("import os\n", "import sys\n", "training/harness.py")
    assert reason(text) == "edits outside the editable file are refused: training/harness.py"
    text = "HYPOTHESIS: h\n" + block(LR + "\n", LR_NEW + "\n", "`other_recipe.py`")
    assert reason(text) == "edits outside the editable file are refused: other_recipe.py"


def test_a_search_that_does_not_match_names_the_block_and_its_first_line() -> None:
    text = (
        "HYPOTHESIS: h\n"
        + block(LR + "\n", LR_NEW + "\n")
        + block("\nBATCH_SIZE = 17  # sequences per step; search: 4..64 pow2\n", "BATCH_SIZE = 8\n")
    )
    assert reason(text).startswith(
        "SEARCH block 2 does not match the file (its first line: `BATCH_SIZE = 17  #"
    )


def test_inconsistent_indentation_does_not_match() -> None:
    source = "def f():\n    x = 1\n    return x\n"
    text = "HYPOTHESIS: h\n" + block("x = 1\n    return x\n", "x = 2\n    return x\n")
    assert "SEARCH block 1 does not match" in reason(text, source)


def test_an_ambiguous_search_is_refused() -> None:
    text = "HYPOTHESIS: h\n" + block("super().__init__()\n", "super().__init__()  # hi\n")
    why = reason(text)
    assert why.startswith("SEARCH block 1 matches the file in 2 places")
    assert "`super().__init__()`" in why


def test_a_search_matches_whole_lines_only() -> None:
    # "RATE = 3e-3" is inside the LEARNING_RATE line, but not a line of its own.
    text = "HYPOTHESIS: h\n" + block("RATE = 3e-3\n", "RATE = 4e-3\n")
    assert "does not match" in reason(text)


def test_an_empty_search_is_refused_on_a_file_with_text() -> None:
    text = "HYPOTHESIS: h\n" + block("", "X = 1\n")
    assert reason(text).startswith("SEARCH block 1 is empty")


def test_edits_that_change_nothing_are_refused() -> None:
    text = "HYPOTHESIS: h\n" + block(LR + "\n", LR + "\n")
    assert reason(text).startswith("the edits change nothing")
    there_and_back = (
        "HYPOTHESIS: h\n" + block(LR + "\n", LR_NEW + "\n") + block(LR_NEW + "\n", LR + "\n")
    )
    assert reason(there_and_back).startswith("the edits change nothing")


def test_repair_request_names_the_reason_and_asks_for_one_answer() -> None:
    message = repair_request("SEARCH block 2 does not match the file (its first line: `x`)")
    assert "SEARCH block 2 does not match the file (its first line: `x`)." in message
    assert "one corrected answer in the same format" in message
    assert len(message) < 400


# --- properties --------------------------------------------------------------------------------

LINES = RECIPE.split("\n")[:-1]
LINES = [line + "\n" for line in LINES]
MARKER = re.compile(r"^\s*(<{5}|={5}|>{5})")  # a replacement line may not look like a marker


@st.composite
def line_edits(draw: st.DrawFn) -> tuple[str, Answer]:
    """Disjoint spans of the recipe, each unique in it, replaced by new lines: the answer and
    the file it should produce."""
    text = st.text(st.characters(codec="utf-8", exclude_characters="\r\n"), max_size=30).filter(
        lambda line: not MARKER.match(line)
    )
    starts = sorted(draw(st.sets(st.integers(0, len(LINES) - 1), min_size=1, max_size=5)))
    spans: list[tuple[int, int]] = []
    for k, start in enumerate(starts):
        stop = starts[k + 1] if k + 1 < len(starts) else len(LINES)
        end = start + 1
        # Grow the span until it is unique in the file (a lone blank line is not).
        while "".join(LINES).count("".join(LINES[start:end])) > 1 and end < stop:
            end += 1
        span = "".join(LINES[start:end])
        if "".join(LINES).count(span) == 1 and span.strip():
            spans.append((start, end))
    if not spans:
        spans = [(LINES.index(LR + "\n"), LINES.index(LR + "\n") + 1)]
    wanted, edits, last = [], [], 0
    for start, end in spans:
        # At least one line, each marked as new: an empty or free-form replacement could join
        # or copy lines into a second occurrence of a later edit's SEARCH (hypothesis found one).
        new = [f"#~ {line}\n" for line in draw(st.lists(text, min_size=1, max_size=3))]
        wanted += LINES[last:start] + new
        last = end
        path = draw(st.sampled_from(["", EDITABLE, "./recipe.py"]))
        edits.append(Edit(path, "".join(LINES[start:end]), "".join(new)))
    wanted += LINES[last:]
    order = draw(st.permutations(edits))  # disjoint and unique: any order gives the same file
    return "".join(wanted), Answer("h", tuple(order))


@settings(max_examples=150, deadline=None)
@given(line_edits())
def test_exact_edits_reproduce_the_intended_file(case: tuple[str, Answer]) -> None:
    wanted, answer = case
    if wanted == RECIPE:
        return
    assert apply_edits(RECIPE, answer, EDITABLE) == wanted


@settings(max_examples=100, deadline=None)
@given(line_edits())
def test_the_written_answer_parses_back_to_the_same_edits(case: tuple[str, Answer]) -> None:
    wanted, answer = case
    text = f"HYPOTHESIS: {answer.hypothesis}\n" + "".join(
        block(e.search, e.replace, e.path) for e in answer.edits
    )
    parsed = parse_answer(text)
    assert parsed.edits == tuple(
        Edit(e.path.removeprefix("./"), e.search, e.replace) for e in answer.edits
    )
    if wanted != RECIPE:
        assert apply_edits(RECIPE, parsed, EDITABLE) == wanted
