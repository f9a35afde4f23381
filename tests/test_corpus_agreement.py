"""Workers agree on the data: the ladder records each champion and tier's corpus hash (its
first baseline run's), RunSpecs carry it, a trainer with other data refuses the run saying
why, and the ladder never pairs runs made on different data."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from bus.messages import RunResult, RunSpec, RunStatus, Verdict
from tests.ladder_sim import Sim, decisions, make_ladder, ok_runner
from tests.training_helpers import CHAMPION, TINY_LIMITS, tiny_spec
from training.corpus import Corpus
from training.runner import run_bytelm


def on_data(hashes: dict[str, str]) -> object:
    """A runner whose runs report the corpus of the trainer that ran them: `hashes` maps an
    idea id ("" for the baseline) to its trainer's data; others run on "data-a"."""

    def runner(spec: RunSpec, source: str) -> RunResult:
        result = ok_runner(spec, source)
        return dataclasses.replace(result, corpus_hash=hashes.get(spec.idea_id, "data-a"))

    return runner


def test_specs_carry_the_recorded_corpus_and_other_data_is_never_paired(tmp_path: Path) -> None:
    sim = Sim(make_ladder(tmp_path), on_data({"idea-elsewhere": "data-b"}))  # type: ignore[arg-type]
    sim.step()
    sim.run_all()
    assert sim.ladder.corpus(1, 0) == "data-a"
    sim.propose("idea-here", "LR = 1.0->LR = 2.0")
    sim.propose("idea-elsewhere", "LR = 1.0->LR = 2.5")
    sim.run_all()
    specs = [s for s in sim.log if isinstance(s, RunSpec) and s.idea_id and s.tier == 0]
    assert specs and all(s.corpus_hash == "data-a" for s in specs)
    here = decisions(sim, "idea-here")
    assert here[0].verdict is Verdict.PROMOTE  # a real gain, on the recorded data
    (elsewhere,) = decisions(sim, "idea-elsewhere")
    assert elsewhere.verdict is Verdict.REJECT and elsewhere.delta is None  # nothing paired
    assert "corpus data-b" in elsewhere.rule and "data-a recorded" in elsewhere.rule


def test_a_baseline_run_on_other_data_is_left_out_of_the_pairs(tmp_path: Path) -> None:
    ladder = make_ladder(tmp_path)
    sim = Sim(ladder)
    sim.step()
    sim.run_all()
    first = next(iter(ladder.results[("", 1, 0)].values()))
    assert ladder.corpus(1, 0) == ""  # the simulated runs report no corpus: nothing recorded
    stray = dataclasses.replace(first, run_id="run-stray", seed=first.seed + 1)
    recorded = dataclasses.replace(first, corpus_hash="data-a")
    ladder.results[("", 1, 0)] = {first.seed: recorded, stray.seed: stray}
    assert ladder.baseline_metrics(1, 0) == {first.seed: first.metric, stray.seed: stray.metric}
    other = dataclasses.replace(stray, corpus_hash="data-b")
    ladder.results[("", 1, 0)][stray.seed] = other
    assert ladder.baseline_metrics(1, 0) == {first.seed: first.metric}


def test_a_trainer_with_other_data_refuses_the_run_and_says_why(
    corpus: Corpus, tmp_path: Path
) -> None:
    spec = dataclasses.replace(tiny_spec(), corpus_hash="f" * 64)
    result = run_bytelm(spec, CHAMPION, corpus, TINY_LIMITS, tmp_path / "scratch")
    assert result.status is RunStatus.REFUSED and result.metric is None
    assert "corpus hash differs" in result.reason and "f" * 16 in result.reason
    assert result.corpus_hash == corpus.corpus_hash
    same = dataclasses.replace(tiny_spec(), corpus_hash=corpus.corpus_hash)
    assert run_bytelm(same, CHAMPION, corpus, TINY_LIMITS, tmp_path / "s2").status is RunStatus.OK
