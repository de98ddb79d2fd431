"""drmix eval --run: a run file scored against BEIR qrels (hand-computed values)."""
from __future__ import annotations

import math

import pytest

from drmix.data.beir import write_beir
from drmix.errors import ConfigError
from drmix.evaluation.runfile import evaluate_run_files

CORPUS = {d: {"title": "", "text": d} for d in ("a", "b", "x", "y")}
QUERIES = {"q1": "one", "q2": "two", "q3": "three"}


@pytest.fixture()
def beir(tmp_path):
    return write_beir(tmp_path / "toy", CORPUS, QUERIES, {"test": {"q1": {"a": 1}, "q2": {"b": 1}}})


def test_run_scored_against_qrels(beir, tmp_path):
    run = tmp_path / "run.trec"
    # q1: its relevant document second; q2: not ranked (scores 0); q3: not judged (ignored)
    run.write_text("q1 Q0 x 1 0.9 t\nq1 Q0 a 2 0.5 t\nq3 Q0 a 1 0.1 t\n")
    report = evaluate_run_files([run], [beir], metrics=("mrr@10", "ndcg@10", "recall@100"))
    row = report.results["toy"]
    assert row["mrr@10"] == pytest.approx(0.25)
    assert row["ndcg@10"] == pytest.approx(0.5 / math.log2(3))
    assert row["recall@100"] == pytest.approx(0.5)
    assert report.per_query["toy"]["q2"]["mrr@10"] == 0.0
    assert report.model == "run.trec" and report.info["toy"]["run"] == str(run)


def test_run_is_cut_to_k(beir, tmp_path):
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 x 1 0.9 t\nq1 Q0 a 2 0.5 t\nq2 Q0 b 1 0.3 t\n")
    assert evaluate_run_files([run], [beir], k=1, metrics=("recall@100",)).results["toy"]["recall@100"] == 0.5


def test_one_run_per_dataset(beir, tmp_path):
    with pytest.raises(ConfigError, match="one --run per --data"):
        evaluate_run_files([tmp_path / "a", tmp_path / "b"], [beir])
