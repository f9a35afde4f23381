"""What makes two recipes the same.

`recipe_sha` is a recipe's content address: the SHA-256 of its exact text. RunSpecs, Ideas and
champion versions name their recipe by it, and the recipe store (store.py) keys it so, so a
reader checks what it fetched against the name it asked for. All 64 hex digits: a shorter
prefix is within a birthday search of anyone who can propose an idea (2^32 tries for 16), and
two recipes with one name would let one run stand for the other.

`fingerprint` is the identity the duplicate checks use: the same recipe up to whitespace at
line ends and blank lines, which change nothing a run does.
"""

from __future__ import annotations

import hashlib
import re

SHA_CHARS = 64
# A champion version recorded before full hashes (schema v1.1 and older) carries the first 16.
LEGACY_SHA_CHARS = 16
_HEX = re.compile(r"[0-9a-f]+")


def recipe_sha(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def names(sha: str, source: str) -> bool:
    """Whether `sha` is this recipe's address (or, from an older release, its 16-digit prefix)."""
    if len(sha) not in (SHA_CHARS, LEGACY_SHA_CHARS) or not _HEX.fullmatch(sha):
        return False
    return recipe_sha(source).startswith(sha)


def is_sha(text: str) -> bool:
    """A full content address: 64 lowercase hex digits."""
    return len(text) == SHA_CHARS and _HEX.fullmatch(text) is not None


def fingerprint(source: str) -> str:
    """Identity of a recipe for dedup: whitespace at line ends and blank lines do not count."""
    lines = (line.rstrip() for line in source.splitlines())
    return hashlib.sha256("\n".join(line for line in lines if line).encode()).hexdigest()[:24]
