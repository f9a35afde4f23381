"""A corpus nobody outside has: text in a language drawn from the swarm's secret.

Why: with the stock corpus (Python source) an experiment can know its kind of text without
being sent any of it. The interpreter it must run holds such text, on disk and in its own
memory, and training on that pays (docs/reliability.md, "Other Python code is readable").
Text in a language made from a key exists only in the trainer's memory and in the
workspace's cache, both out of the sandbox's reach. Every byte value's role, the spelling
rules, the lexicon, the grammar and all their probabilities come from the key. This module's
code is public, though, and the family is knowledge: a recipe that draws languages of its own,
maps their bytes to the swarm's by inferred roles (the space is the most frequent byte, …) and
trains on them gains much (docs/reliability.md, "The secret language"). A family whose
instances cannot be aligned from their statistics would close that; this one does not.

The language has the structure that makes a byte-level LM recipe matter at every scale:
- spelling: words come from a letter bigram chain;
- a lexicon: word classes with Zipf-distributed vocabularies, the small classes short words;
- syntax: a random probabilistic grammar with nested brackets, each closed by its own mark;
- documents: each coins its own names and favours a few words, so reading back pays.

The same key gives the same bytes on every machine and Python version: only SHAKE-256,
integer arithmetic and the double operations IEEE 754 rounds exactly (+, −, ×, ÷, sqrt) decide
anything.
"""

from __future__ import annotations

import bisect
import hashlib
import hmac
import math
import struct
from dataclasses import dataclass

VERSION = 1  # part of the corpus's identity: a new generator is a new corpus
LETTERS = 36
CLASSES = 16
NONTERMINALS = 10
BRACKET_PAIRS = 3
MARKS = 4
MAX_DEPTH = 6  # past it a nonterminal takes its all-terminal production
NAME_CLASS = 0  # the class whose words each document coins for itself


def key_from(swarm_secret: bytes) -> bytes:
    """The language's key, from the swarm's secret (the workspace's seed secret): one secret
    per swarm, and knowing the language tells nothing of the seeds."""
    return hmac.new(swarm_secret, b"secret-language", hashlib.sha256).digest()


class _Draw:
    """The seeded stream; every draw goes through `random()`. Its bits come from SHAKE-256 in
    counter mode, not from `random.Random`: the Mersenne Twister is linear, so enough of the
    text would give its state away, and with it the whole corpus."""

    def __init__(self, key: bytes) -> None:
        self._seed = hashlib.sha256(b"secret-language/%d/" % VERSION + key).digest()
        self._block = 0
        self._values: list[int] = []
        self._next = 0

    def _random(self) -> float:
        if self._next == len(self._values):
            data = hashlib.shake_256(self._seed + self._block.to_bytes(8, "little")).digest(8192)
            self._values = list(struct.unpack("<1024Q", data))  # the same on every machine
            self._block += 1
            self._next = 0
        value = self._values[self._next]
        self._next += 1
        return math.ldexp(value >> 11, -53)  # exact

    def below(self, n: int) -> int:
        return min(int(self._random() * n), n - 1)

    def chance(self, p: float) -> bool:
        return self._random() < p

    def skewed(self, n: int, power: int) -> list[float]:
        """Cumulative weights of n outcomes, a few of them dominant (larger `power`: more so).
        Products only: a power with a fractional exponent is the C library's, whose last bit
        may differ between machines, and with it a draw near a boundary."""
        weights = []
        for _ in range(n):
            x, w = self._random(), 1.0
            for _ in range(power):
                w *= x
            weights.append(w + 1e-6)
        return _cumulative(weights)

    def pick(self, cumulative: list[float]) -> int:
        i = bisect.bisect_right(cumulative, self._random() * cumulative[-1])
        return min(i, len(cumulative) - 1)


def _cumulative(weights: list[float]) -> list[float]:
    out, total = [], 0.0
    for w in weights:
        total += w
        out.append(total)
    return out


def _zipf(n: int) -> list[float]:
    return _cumulative([1.0 / (rank + 2.7) for rank in range(n)])  # exponent 1: exact


@dataclass(frozen=True, slots=True)
class _Spelling:
    letters: tuple[bytes, ...]
    first: list[float]  # cumulative weights of the first letter
    after: tuple[list[float], ...]  # of the letter after each letter

    def word(self, draw: _Draw, go_on: float) -> bytes:
        letter = draw.pick(self.first)
        out = [self.letters[letter]]
        while draw.chance(go_on) and len(out) < 14:
            letter = draw.pick(self.after[letter])
            out.append(self.letters[letter])
        return b"".join(out)


# A grammar item: ("c", class, 0) a word of that class, ("n", k, 0) nonterminal k, ("b", pair,
# k) nonterminal k between the pair's brackets, ("m", mark, 0) a punctuation mark.
Item = tuple[str, int, int]


@dataclass(frozen=True, slots=True)
class _Language:
    space: bytes
    end_of_line: bytes
    brackets: tuple[tuple[bytes, bytes], ...]
    marks: tuple[bytes, ...]
    spelling: _Spelling
    words: tuple[tuple[bytes, ...], ...]  # per class, the most frequent first
    word_weights: tuple[list[float], ...]
    name_length: float  # the chance a coined name goes on after each letter
    # per nonterminal: production 0 holds words only, taken past MAX_DEPTH; the others are
    # chosen by `rule_weights`
    rules: tuple[tuple[tuple[Item, ...], ...], ...]
    rule_weights: tuple[list[float], ...]


def _language(draw: _Draw) -> _Language:
    symbols = [bytes([b]) for b in (10, 32, *range(33, 127))]
    for i in range(len(symbols) - 1, 0, -1):  # Fisher-Yates on our own draws: stable
        j = draw.below(i + 1)
        symbols[i], symbols[j] = symbols[j], symbols[i]
    marks_at = 2 + 2 * BRACKET_PAIRS
    letters_at = marks_at + MARKS
    spelling = _Spelling(
        letters=tuple(symbols[letters_at : letters_at + LETTERS]),
        first=draw.skewed(LETTERS, 2),
        after=tuple(draw.skewed(LETTERS, 4) for _ in range(LETTERS)),
    )
    words: list[tuple[bytes, ...]] = []
    taken: set[bytes] = set()
    for _ in range(CLASSES):
        size = 8 + draw.below(792) if draw.chance(0.6) else 4 + draw.below(28)
        # the small (function-word) classes: short words (sqrt is exact in IEEE 754)
        go_on = 0.45 + 0.4 * math.sqrt(size / 800)
        vocabulary: list[bytes] = []
        while len(vocabulary) < size:
            word = spelling.word(draw, go_on)
            if word not in taken:
                taken.add(word)
                vocabulary.append(word)
        words.append(tuple(vocabulary))
    rules, weights = [], []
    for k in range(NONTERMINALS):
        plain = tuple(("c", draw.below(CLASSES), 0) for _ in range(1 + draw.below(3)))
        shortest = 3 if k == 0 else 1  # a sentence is a few phrases
        more = [
            tuple(_item(draw) for _ in range(shortest + draw.below(4)))
            for _ in range(2 + draw.below(3))
        ]
        rules.append((plain, *more))
        weights.append(draw.skewed(len(more), 2))
    return _Language(
        space=symbols[0],
        end_of_line=symbols[1],
        brackets=tuple((symbols[2 + 2 * k], symbols[3 + 2 * k]) for k in range(BRACKET_PAIRS)),
        marks=tuple(symbols[marks_at:letters_at]),
        spelling=spelling,
        words=tuple(words),
        word_weights=tuple(_zipf(len(w)) for w in words),
        name_length=0.8,
        rules=tuple(rules),
        rule_weights=tuple(weights),
    )


def _item(draw: _Draw) -> Item:
    kind = draw.below(20)
    if kind < 11:
        return ("c", draw.below(CLASSES), 0)
    if kind < 16:
        return ("n", draw.below(NONTERMINALS), 0)
    if kind < 18:
        return ("b", draw.below(BRACKET_PAIRS), draw.below(NONTERMINALS))
    return ("m", draw.below(MARKS), 0)


class _Document:
    """One document's own words: names it coins, and a few favourites of each class."""

    def __init__(self, draw: _Draw, lang: _Language) -> None:
        self.names = [lang.spelling.word(draw, lang.name_length) for _ in range(3 + draw.below(6))]
        self.name_weights = _zipf(len(self.names))
        self.favourites = [
            [words[draw.pick(cum)] for _ in range(3)] if draw.chance(0.4) else []
            for words, cum in zip(lang.words, lang.word_weights, strict=True)
        ]

    def word(self, draw: _Draw, lang: _Language, c: int) -> bytes:
        if c == NAME_CLASS and draw.chance(0.85):
            return self.names[draw.pick(self.name_weights)]
        if self.favourites[c] and draw.chance(0.35):
            return self.favourites[c][draw.below(3)]
        return lang.words[c][draw.pick(lang.word_weights[c])]


def _sentence(draw: _Draw, lang: _Language, doc: _Document) -> bytes:
    """Nonterminal 0 expanded, words joined by the space symbol, then the end of line."""
    out: list[bytes] = []
    stack: list[tuple[Item, int] | bytes] = [(("n", 0, 0), 0)]
    while stack:
        top = stack.pop()
        if isinstance(top, bytes):  # a closing bracket, waiting for its content
            out.append(top)
            continue
        item, depth = top
        if item[0] == "c":
            out.append(doc.word(draw, lang, item[1]))
        elif item[0] == "m":
            out.append(lang.marks[item[1]])
        elif item[0] == "b":
            opening, closing = lang.brackets[item[1]]
            out.append(opening)
            stack.append(closing)
            stack.append((("n", item[2], 0), depth + 1))
        else:
            k = item[1]
            choice = 0 if depth >= MAX_DEPTH else 1 + draw.pick(lang.rule_weights[k])
            stack.extend((sub, depth + 1) for sub in reversed(lang.rules[k][choice]))
    return lang.space.join(out) + lang.end_of_line


def generate(key: bytes, train_bytes: int, val_bytes: int) -> tuple[bytes, bytes]:
    """At least `train_bytes` of train text and `val_bytes` of val, whole documents each,
    the val documents after the train ones: the language is the key's, the text its draws."""
    draw = _Draw(key)
    lang = _language(draw)
    splits: list[bytes] = []
    for wanted in (train_bytes, val_bytes):
        chunks: list[bytes] = []
        size = 0
        while size < wanted:
            doc = _Document(draw, lang)
            text = b"".join(_sentence(draw, lang, doc) for _ in range(6 + draw.below(40)))
            chunks.append(text + lang.end_of_line)
            size += len(text) + 1
        splits.append(b"".join(chunks))
    return splits[0], splits[1]
