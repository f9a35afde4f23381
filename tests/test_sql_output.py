"""How `swarm sql` prints an answer: every column kept, in its place, in every format."""

from __future__ import annotations

import json

import pyarrow as pa

from swarm.output import aligned, to_csv, to_json


def test_columns_named_alike_keep_their_own_values() -> None:
    # `select 1 as a, 2 as a, null as b`: rows read as dicts kept one `a` and shifted the rest
    table = pa.Table.from_arrays([pa.array([1]), pa.array([2]), pa.array([None])], ["a", "a", "b"])
    assert aligned(table).splitlines()[2].split() == ["1", "2", "NULL"]
    assert to_csv(table).splitlines() == ["a,a,b", "1,2,"]
    assert json.loads(to_json(table)) == [{"a": 1, "a_2": 2, "b": None}]
