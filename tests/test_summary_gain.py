"""The exit summary's champion line: its gain is positive when the champion got better,
whichever way the metric points (as in the decisions and the report)."""

from __future__ import annotations

from swarm.summary import champion_moves


def baselines(first: list[float], last: list[float]) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for version, metrics in ((1, first), (2, last)):
        rows += [
            {"tier": 0, "version": version, "seed": s, "metric": m} for s, m in enumerate(metrics)
        ]
    return rows


def test_a_lower_metric_that_fell_is_a_positive_gain() -> None:
    (line,) = champion_moves(baselines([3.0, 3.2], [2.0, 2.4]), {})
    assert line.startswith("tier 0 champion: v1 3.1000 -> v2 2.2000 (gain +0.9000")


def test_a_higher_metric_that_rose_is_a_positive_gain() -> None:
    (line,) = champion_moves(baselines([0.5, 0.6], [0.7, 0.9]), {}, lower_is_better=False)
    assert line.startswith("tier 0 champion: v1 0.5500 -> v2 0.8000 (gain +0.2500")
    (worse,) = champion_moves(baselines([0.7, 0.9], [0.5, 0.6]), {}, lower_is_better=False)
    assert "-> v2 0.5500 (gain -0.2500" in worse
