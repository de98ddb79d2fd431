"""Shift metrics by hand on tiny corpora: weighted Jaccard, query types, alignment, uniformity; the report."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from drmix.analysis.shift import (QUERY_TYPES, alignment, query_type, query_type_distribution, shift_report,
                                  unigram_distribution, uniformity, weighted_jaccard, write_shift_report)
from drmix.errors import DataError


def test_weighted_jaccard_by_hand():
    s = unigram_distribution(["a a b"])            # a 2/3, b 1/3
    t = unigram_distribution(["a c"])              # a 1/2, c 1/2
    # min: a 1/2; max: a 2/3 + b 1/3 + c 1/2 = 3/2 -> 1/3
    assert weighted_jaccard(s, t) == pytest.approx(1 / 3)
    assert weighted_jaccard(s, s) == pytest.approx(1.0)
    assert weighted_jaccard(s, unigram_distribution(["zzz"])) == 0.0


def test_query_types():
    assert query_type("What is COVID?") == "what"
    assert query_type("  How long does it last") == "how"
    assert query_type("Does aspirin help") == "yes-no"
    assert query_type("am I sick") == "yes-no"
    assert query_type("vitamin D deficiency") == "declarative"
    assert query_type("") == "declarative"
    d = query_type_distribution(["what a", "what b", "is it", "cats"])
    assert d["what"] == 0.5 and d["yes-no"] == 0.25 and d["declarative"] == 0.25
    assert set(d) == set(QUERY_TYPES) and sum(d.values()) == pytest.approx(1.0)


def test_alignment_and_uniformity_by_hand():
    x = np.array([[1.0, 0.0], [0.0, 1.0]])
    y = np.array([[1.0, 0.0], [1.0, 0.0]])
    assert alignment(x, y) == pytest.approx((0 + 2) / 2)            # ||(0,1)-(1,0)||^2 = 2
    pts = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    # pair distances^2: 2, 4, 2 -> log mean(e^-4, e^-8, e^-4)
    assert uniformity(pts) == pytest.approx(math.log((2 * math.exp(-4) + math.exp(-8)) / 3))


def _beir(root, docs, queries, qrels):
    root.mkdir()
    (root / "corpus.jsonl").write_text("".join(json.dumps({"_id": k, "title": "", "text": v}) + "\n"
                                               for k, v in docs.items()))
    (root / "queries.jsonl").write_text("".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in queries.items()))
    (root / "qrels").mkdir()
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n"
                                             + "".join(f"{q}\t{d}\t1\n" for q, d in qrels))
    return root


def test_report_on_two_tiny_datasets(tmp_path, tiny_model_path):
    a = _beir(tmp_path / "a", {"1": "a a b", "2": "c"}, {"q1": "what is a", "q2": "is b"}, [("q1", "1"), ("q2", "2")])
    b = _beir(tmp_path / "b", {"1": "a c"}, {"q1": "where a"}, [("q1", "1")])
    r = shift_report([a], [b], model=tiny_model_path)
    # corpus a: a 2/4, b 1/4, c 1/4; corpus b: a 1/2, c 1/2 -> min 1/2+1/4=3/4, max 1/2+1/4+1/2=5/4
    assert r.corpus_jaccard[0][1] == pytest.approx(0.6)
    # queries a: what, is, a, is, b -> what .2, is .4, a .2, b .2 ; b: where .5, a .5 -> min .2, max 1.8
    assert r.query_jaccard[0][1] == pytest.approx(0.2 / 1.8)
    # types a: what .5, yes-no .5; b: where 1 -> 0
    assert r.intent_jaccard[0][1] == 0.0
    assert set(r.alignment) == {"a", "b"} and set(r.uniformity) == {"a"}      # b has one document
    files = write_shift_report(r, tmp_path / "out")
    assert all(f.exists() for f in files)
    assert "| a | b | 0.6000 |" in (tmp_path / "out" / "shift.md").read_text()


def test_bad_input(tmp_path):
    with pytest.raises(DataError, match="not a BEIR directory"):
        shift_report([tmp_path / "missing"], [tmp_path / "missing2"])
    empty = tmp_path / "e"
    empty.mkdir()
    (empty / "corpus.jsonl").write_text("")
    with pytest.raises(DataError, match="empty"):
        shift_report([empty], [empty])
