"""Which bytelm corpus a swarm trains on: `target.data`, with "auto" resolved by its brains."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agents.brain_groups import LLM_BRAINS, BrainSpecError, parse_brain_groups

if TYPE_CHECKING:  # config.py reads AUTO_DATA from here for its default
    from swarm.config import SwarmConfig

SECRET_DATA = "secret"  # target.data: the secret language (training/secret_language.py)
STDLIB_DATA = "stdlib"  # target.data: the Python stdlib's sources (training/corpus.py); also ""
AUTO_DATA = "auto"  # target.data: one of the two by the researchers' brains (corpus_of)


def corpus_of(config: SwarmConfig) -> str:
    """target.data, "auto" resolved. Where a researcher writes code (an LLM brain), the secret
    language: code can read or make text of a public corpus's kind and train on it. Where
    every brain only moves constants (the offline ones), the stdlib: a constant reads no file,
    and on it the default recipe's top tier is steadier across seeds, so the swarm's first
    stack comes sooner (README, "The corpus", measured)."""
    data = config.target.data
    if data != AUTO_DATA:
        return data
    try:
        groups = parse_brain_groups(config.agents.brain, config.agents.count)
    except BrainSpecError:
        return SECRET_DATA  # check_brains names the error; the safer corpus meanwhile
    return SECRET_DATA if any(g.brain in LLM_BRAINS for g in groups) else STDLIB_DATA


def on_secret_language(config: SwarmConfig) -> bool:
    """A bytelm swarm whose corpus is the secret language (its key is the workspace's)."""
    return config.target.kind == "bytelm" and corpus_of(config) == SECRET_DATA


def corpus_said(config: SwarmConfig) -> str:
    """The bytelm corpus as `swarm start` names it, with why where "auto" chose it."""
    data = corpus_of(config)
    named = {
        SECRET_DATA: "the swarm's secret language",
        "": "the stdlib",
        STDLIB_DATA: "the stdlib",
    }
    who = "write code" if data == SECRET_DATA else "move constants only"
    why = f" (auto: the researchers {who})" if config.target.data == AUTO_DATA else ""
    return f"{named.get(data, data)}{why}"
