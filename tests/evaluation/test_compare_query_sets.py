"""``drmix compare`` over evaluations of different query sets: refused with the counts, or with ``--intersect``
compared on the shared queries with the counts (evaluated for each, shared, dropped) in every row."""
from __future__ import annotations

import json

import pytest

from drmix.cli import main
from drmix.errors import DataError
from drmix.evaluation.compare import Scored, compare


def _pq(scores):
    return {q: {"ndcg@10": v} for q, v in scores.items()}


A20 = {str(i): 0.5 for i in range(20)}
B7 = {str(i): 0.5 + 0.1 * (i % 2) for i in range(7)}   # queries 1, 3, 5 gain 0.1: delta 0.3 / 7


def test_different_query_sets_are_refused_with_the_counts():
    with pytest.raises(DataError) as e:
        compare([Scored("A", {"d": _pq(A20)}), Scored("B", {"d": _pq(B7)})])
    msg = e.value.message
    assert "7 and 20 queries, 7 shared, 13 evaluated for only one" in msg and "13 only for A, 0 only for B" in msg
    assert "--intersect" in e.value.fix


def test_intersect_compares_the_shared_queries_and_counts_the_dropped():
    extra = {**B7, "b-only": 0.9}
    comp = compare([Scored("A", {"d": _pq(A20), "e": _pq({"x": 0.2, "y": 0.4})}),
                    Scored("B", {"d": _pq(extra), "e": _pq({"x": 0.4, "y": 0.4})})], intersect=True)
    d, e, avg = comp.rows["B"]
    assert (d.queries, d.baseline_queries, d.model_queries, d.dropped) == (7, 20, 8, 14)
    assert d.delta == pytest.approx(0.3 / 7) and d.baseline == pytest.approx(0.5)
    assert (e.queries, e.baseline_queries, e.model_queries, e.dropped) == (2, 2, 2, 0)
    assert (avg.queries, avg.baseline_queries, avg.model_queries, avg.dropped) == (9, 22, 10, 14)
    assert avg.delta == pytest.approx((0.3 / 7 + 0.1) / 2)
    assert comp.dropped == 14
    md = comp.to_markdown()
    assert "| B | d | 7 | 20 | 8 | 14 |" in md and "14 dropped" in md


def test_same_query_sets_need_no_flag_and_show_no_counts():
    comp = compare([Scored("A", {"d": _pq(A20)}), Scored("B", {"d": _pq(A20)})])
    assert comp.dropped == 0 and comp.rows["B"][0].dropped == 0 and "dropped" not in comp.to_markdown()


def _write(path, model, per_query):
    path.mkdir(parents=True)
    (path / "eval.json").write_text(json.dumps({"model": model, "split": "test", "per_query": {"d": per_query}}))


def test_cli_refuses_then_reports_with_intersect(tmp_path, capsys):
    _write(tmp_path / "a", "A", _pq(A20))
    _write(tmp_path / "b", "B", _pq(B7))
    with pytest.raises(SystemExit) as e:
        main(["compare", str(tmp_path / "a"), str(tmp_path / "b")])
    err = " ".join(capsys.readouterr().err.split())
    assert e.value.code == 2 and "Traceback" not in err and "13 evaluated for only one" in err and "--intersect" in err
    with pytest.raises(SystemExit) as e:
        main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--intersect", "--output", str(tmp_path / "cmp")])
    assert e.value.code in (0, None)
    err = " ".join(capsys.readouterr().err.split())
    assert "13 evaluated for only one model were dropped" in err
    row = json.loads((tmp_path / "cmp" / "compare.json").read_text())["models"]["B"][0]
    assert (row["queries"], row["baseline_queries"], row["model_queries"], row["dropped"]) == (7, 20, 7, 13)
