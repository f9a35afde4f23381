"""Showing text that an experiment or an agent wrote: reasons, log tails, hypotheses, patches,
agent names. Any of it may be written to attack whoever reads it: escape sequences that redraw
a terminal (a forged `status: OK` over a crash), markup, or a code fence closed early so that
a log's text reads as instructions in an LLM researcher's prompt. Every screen neutralises it
here, so there is one rule to audit: the terminal sees no control character, the prompt sees
the text inside a fence that nothing in the text can close.
"""

from __future__ import annotations

import re
import unicodedata

# Characters that change how the rest of a line is shown rather than showing themselves: the
# C0 and C1 controls (ESC starts every ANSI sequence; CSI is its one-byte C1 form), DEL, and
# Unicode's format characters (bidi overrides reorder what follows: "Trojan Source").
_KEEP = frozenset("\n\t")


def for_terminal(text: str, newlines: bool = True) -> str:
    """`text` with every control and format character written as a visible escape (`\\x1b`,
    `\\u202e`), so printing it cannot move the cursor, recolour or reorder what follows.
    With `newlines=False`, a newline is shown as `\\n` too (one value on one line)."""
    return "".join(_visible(c, newlines) for c in text)


def _visible(c: str, newlines: bool) -> str:
    if c in _KEEP and (newlines or c != "\n"):
        return c
    if c == "\n":
        return "\\n"
    if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp"):
        return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"
    return c


_BACKTICKS = re.compile(r"`+")


def fenced(text: str, info: str = "") -> str:
    """`text` as a Markdown code block whose fence is longer than any run of backticks in it:
    by CommonMark's rule only a fence at least as long closes the block, so no line of the
    text can end it early (a tilde fence inside cannot close a backtick one)."""
    longest = max((len(m.group()) for m in _BACKTICKS.finditer(text)), default=0)
    fence = "`" * max(3, longest + 1)
    body = for_terminal(text)  # a prompt is read by a model, and sometimes by a person
    return f"{fence}{info}\n{body}\n{fence}"
