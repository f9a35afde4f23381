"""Messages and findings pickle as a call of their class (bus/fast_pickle.py): the same values
back through pickle and copy, and no silent loss for classes it cannot serve."""

from __future__ import annotations

import copy
import pickle
from dataclasses import dataclass, field

import pytest

from agents.brain import Finding
from bus.fast_pickle import by_fields
from bus.messages import Idea, RunResult, RunStatus
from recipes.constants import Change


def test_messages_and_findings_come_back_equal() -> None:
    made = [
        Idea("idea-1", "a", "h", "patch", 3, parent_ids=("p",), entry_tier=1),
        RunResult("run-1", 1, 7, 3, RunStatus.OK, idea_id="idea-1", metric=2.5),
        Finding("idea-1", "a", 3, (Change("LR", "1", "2"),), "h", 1, "PROMOTE", 0.1),
    ]
    for thing in made:
        assert pickle.loads(pickle.dumps(thing)) == thing
        assert copy.deepcopy(thing) == thing and copy.copy(thing) == thing
        assert type(thing).__reduce__ is not object.__reduce__  # the fast path is in use


def test_a_subclass_must_say_how_it_pickles() -> None:
    @by_fields
    @dataclass(frozen=True, slots=True)
    class Base:
        a: int

    @dataclass(frozen=True, slots=True)
    class Child(Base):
        b: int = 0

    with pytest.raises(TypeError, match="Child must be decorated"):
        pickle.dumps(Child(1, 2))


def test_keyword_only_fields_keep_the_default_path() -> None:
    @dataclass(frozen=True, slots=True, kw_only=True)
    class Named:
        a: int
        b: list[int] = field(default_factory=list)

    assert by_fields(Named).__reduce__ is object.__reduce__  # left as it was
