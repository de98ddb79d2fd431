"""benchmarks/bench_dev_labels.py: the choice on n labelled dev queries against the synthetic-dev choice, from
hand-made per-query scores; the docs' table is what --report-only prints from its stored results."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_dev_labels as bd  # noqa: E402


def _run(size_pool: dict[str, float]) -> dict:
    """Two candidates; the synthetic dev prefers size (test 0.3), uniform is better on test (0.4); on the pool
    uniform scores 0.5 on every query, size ``size_pool`` on the SciFact queries and 0.5 on NFCorpus's one."""
    return {"candidates": ["uniform", "size"], "synthetic_average": {"uniform": 0.5, "size": 0.6},
            "test": {"uniform": {"scifact": {"a": 0.3, "b": 0.5}, "nfcorpus": {"c": 0.4}},
                     "size": {"scifact": {"a": 0.3, "b": 0.3}, "nfcorpus": {"c": 0.3}}},
            "pool": {"uniform": {"scifact": {q: 0.5 for q in size_pool}, "nfcorpus": {"n1": 0.5}},
                     "size": {"scifact": dict(size_pool), "nfcorpus": {"n1": 0.5}}}}


def test_the_whole_pool_row_by_hand():
    runs = {"seed0": _run({"q1": 0.6, "q2": 0.0, "q3": 0.0, "q4": 0.0})}
    # the whole pool: size 0.15 on SciFact -> (0.15 + 0.5) / 2 = 0.325 < 0.5: uniform, test 0.4 vs size's 0.3
    assert bd.draws(runs, None, 200, 0) == [(pytest.approx(0.4), pytest.approx(0.3))]
    text = bd.report(runs, [4], 10, 0)
    # n = 4 is the whole SciFact pool (and more than NFCorpus's one query): the same choice in every draw;
    # Wilson's interval of 1 in 1 is [0.2065, 1]
    # both: uniform (0.5 + 0.5) / 2 = 0.5 against size (0.6 + 0.325) / 2 = 0.4625: uniform, test 0.4
    assert ("| 4 | 10 | 0.4000 | 0.3000 | +0.1000 [+0.1000, +0.1000] | 100% / 0% / 0% | [72%, 100%] | 0.4000 |"
            in text)
    assert ("| the whole pool | 1 | 0.4000 | 0.3000 | +0.1000 [+0.1000, +0.1000] | 100% / 0% / 0% | [21%, 100%] "
            "| 0.4000 |" in text)
    assert "ceiling of any choice among them): 0.4000; the synthetic-dev choice: 0.3000." in text
    assert text == bd.report(runs, [4], 10, 0)                              # seeded: the same table


def test_one_labelled_query_chooses_uniform_unless_it_draws_the_query_size_wins():
    runs = {"seed0": _run({"q1": 0.6, "q2": 0.0, "q3": 0.0, "q4": 0.0})}
    got = bd.draws(runs, 1, 400, 0)
    # size is chosen only when SciFact's one query is q1 ((0.6 + 0.5) / 2 > 0.5): a tie with the synthetic
    # choice; otherwise uniform, a win of +0.1 -- about 3 draws in 4
    assert {(round(a, 6), round(b, 6)) for a, b in got} == {(0.4, 0.3), (0.3, 0.3)}
    wins = sum(a > b for a, b in got)
    assert 0.68 < wins / 400 < 0.82
    # both: size when SciFact's query is q1 ((0.6 + 0.55) / 2 = 0.575 > 0.5), else (0.6 + 0.25) / 2 = 0.425:
    # uniform -- the same choice as the labels alone in every draw
    both: list[float] = []
    assert bd.draws(runs, 1, 400, 0, both) == got and both == [a for a, _ in got]


def test_ties_go_to_the_earlier_candidate_and_wilson_by_hand():
    assert bd._first_best({"uniform": 0.5, "size": 0.5}) == "uniform"
    lo, hi = bd.wilson(1, 1)
    assert (round(lo, 4), hi) == (0.2065, pytest.approx(1.0))
    lo, hi = bd.wilson(5, 10)
    assert (round(lo, 4), round(hi, 4)) == (0.2366, 0.7634)


FIXTURES = sorted((Path(__file__).parent / "fixtures").glob("dev-labels-*-results.json"))


def test_every_measured_preset_has_its_stored_results():
    assert "dev-labels-cpu-results" in [f.stem for f in FIXTURES]


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.stem for f in FIXTURES])
def test_the_docs_table_is_what_report_only_prints_from_its_stored_results(tmp_path, capsys, fixture):
    (tmp_path / "results.json").write_text(fixture.read_text(encoding="utf-8"), encoding="utf-8")
    assert bd.main(["--report-only", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert json.loads(fixture.read_text(encoding="utf-8"))["runs"]
    docs = (Path(__file__).resolve().parents[2] / "docs" / "adapt.md").read_text(encoding="utf-8")
    assert printed.rstrip("\n") in docs
