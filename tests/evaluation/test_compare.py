"""drmix compare: deltas, intervals and paired tests against hand-computed values."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from drmix.cli import app, main
from drmix.errors import DataError
from drmix.evaluation.compare import Scored, compare, load_scored, paired_test


def _pq(values: dict[str, float]) -> dict:
    return {q: {"ndcg@10": v} for q, v in values.items()}


def test_compare_average_weights_each_dataset_once():
    base = Scored("uniform", {"a": _pq({"1": 0.5, "2": 0.5}), "b": _pq({"x": 0.2, "y": 0.4, "z": 0.6, "w": 0.8})})
    model = Scored("tdro", {"a": _pq({"1": 0.7, "2": 0.5}), "b": _pq({"x": 0.2, "y": 0.4, "z": 0.6, "w": 0.4})})
    comp = compare([base, model], metric="ndcg@10", permutations=1000)
    rows = {d.dataset: d for d in comp.rows["tdro"]}
    # a: diffs [0.2, 0] -> +0.1; b: [0, 0, 0, -0.4] -> -0.1; average of datasets: 0.0 (not the query mean -1/30)
    assert rows["a"].delta == pytest.approx(0.1)
    assert rows["b"].delta == pytest.approx(-0.1)
    assert rows["average"].delta == pytest.approx(0.0, abs=1e-12)
    assert rows["average"].queries == 6
    # a: exact randomisation over 2 queries: |(+-0.2 +- 0)/2| >= 0.1 always -> p = 1
    assert rows["a"].fisher_p == pytest.approx(1.0)
    assert rows["average"].baseline == pytest.approx((0.5 + 0.5) / 2)


def test_compare_errors_name_the_fix(tmp_path):
    a = Scored("u", {"a": _pq({"1": 0.5})})
    b = Scored("v", {"c": _pq({"1": 0.5})})
    with pytest.raises(DataError, match="share no dataset"):
        compare([a, b])
    with pytest.raises(DataError, match="not among"):
        compare([a, Scored("w", {"a": _pq({"1": 0.1})})], baseline="zzz")
    old = tmp_path / "eval.json"
    old.write_text(json.dumps({"model": "m", "results": {"a": {"ndcg@10": 0.1}}}))
    with pytest.raises(DataError, match="per-query"):
        load_scored(old)


def _write_eval(path, model, per_query):
    path.mkdir(parents=True)
    (path / "eval.json").write_text(json.dumps({"model": model, "split": "test", "per_query": per_query}))


def test_cli_compare_writes_markdown_and_json(tmp_path, capsys):
    _write_eval(tmp_path / "u", "uniform", {"d": _pq({"1": 0.0, "2": 0.5, "3": 0.5, "4": 0.5})})
    _write_eval(tmp_path / "t", "tdro", {"d": _pq({"1": 1.0, "2": 0.7, "3": 0.8, "4": 0.9})})
    r = CliRunner().invoke(app, ["compare", str(tmp_path / "u"), str(tmp_path / "t" / "eval.json"),
                                 "--output", str(tmp_path / "cmp")])
    assert r.exit_code == 0, r.output
    out = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    row = out["models"]["tdro"][0]
    # diffs [1.0, 0.2, 0.3, 0.4]: mean 0.475; exact randomisation: only the all-plus / all-minus
    # patterns reach |sum| >= 1.9 -> 2/16.
    assert row["delta"] == pytest.approx(0.475)
    assert row["fisher_p"] == pytest.approx(2 / 16)
    assert out["baseline"] == "uniform"
    assert "| tdro | d | 4 |" in (tmp_path / "cmp" / "compare.md").read_text()
    with pytest.raises(SystemExit) as e:
        main(["compare", str(tmp_path / "u"), str(tmp_path / "missing")])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "no such evaluation" in err and "Traceback" not in err


def test_paired_test_pools_the_queries_both_scored_over_datasets():
    a = {"x": {"q1": 0.0, "q2": 0.5}, "y": {"q1": 0.5, "q2": 0.1}}
    b = {"x": {"q1": 0.5, "q2": 0.5}, "y": {"q1": 0.75}}          # y/q2 not scored by b: left out
    t = paired_test(a, b)
    # differences 0.5, 0, 0.25: mean 0.25, sd 0.25, t = sqrt(3); two-sided p with 2 df = 1 - t / sqrt(t^2 + 2)
    assert t["n"] == 3 and t["mean"] == pytest.approx(0.25)
    assert t["p"] == pytest.approx(1 - 3 ** 0.5 / 5 ** 0.5, abs=1e-9)
    half = 4.302652729911275 * 0.25 / 3 ** 0.5                    # t_{0.975, 2} sd / sqrt(n)
    assert (t["low"], t["high"]) == pytest.approx((0.25 - half, 0.25 + half))
