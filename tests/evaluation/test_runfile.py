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


def test_max_queries_scores_the_seeded_sample_a_model_evaluation_keeps(beir, tmp_path):
    from drmix.data.beir import load_beir
    from drmix.evaluation.evaluate import subsample

    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 a 1 0.9 t\nq2 Q0 x 1 0.3 t\n")        # q1 right (1.0), q2 wrong (0.0)
    # seed 0 keeps q2, seed 1 keeps q1 (numpy's default_rng(seed).choice(2, 1)), as subsample does for a model
    for seed, kept, mrr in ((0, "q2", 0.0), (1, "q1", 1.0)):
        report = evaluate_run_files([run], [beir], metrics=("mrr@10",), max_queries=1, seed=seed)
        assert list(report.per_query["toy"]) == [kept] == list(subsample(load_beir(beir, "test"), max_queries=1,
                                                                          seed=seed).qrels)
        assert report.results["toy"]["mrr@10"] == mrr
        assert report.info["toy"]["queries"] == 1
        assert report.info["toy"]["subsample"] == {"of_queries": 2, "seed": seed}
        assert report.label("toy") == "toy (sample: 1 of 2 queries)"
        assert "a seeded sample of the queries" in report.to_markdown()
    full = evaluate_run_files([run], [beir], metrics=("mrr@10",), max_queries=2)
    assert "subsample" not in full.info["toy"] and full.results["toy"]["mrr@10"] == 0.5


def test_document_ids_the_corpus_does_not_hold_are_named_with_a_count(beir, tmp_path, caplog):
    """A run of another corpus (or ids written another way) scores low without a word: the ids are counted and
    the first ones named; the scores are the same as without the warning."""
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 doc-a 1 0.9 t\nq1 Q0 a 2 0.5 t\nq2 Q0 doc-b 1 0.3 t\nq3 Q0 doc-z 1 0.1 t\n")
    with caplog.at_level("WARNING", logger="drmix.evaluation.runfile"):
        report = evaluate_run_files([run], [beir], metrics=("mrr@10",))
    assert report.results["toy"]["mrr@10"] == pytest.approx(0.25)   # q1: a at rank 2; q2: nothing relevant
    lines = [r.getMessage() for r in caplog.records if "document ids the run ranks" in r.getMessage()]
    assert len(lines) == 1
    assert "3 of the 4 document ids the run ranks are not in" in lines[0]
    assert "'doc-a', 'doc-b', 'doc-z'" in lines[0] and str(beir / "corpus.jsonl") in lines[0]
    caplog.clear()
    run.write_text("q1 Q0 a 1 0.9 t\nq2 Q0 x 1 0.3 t\n")   # every id in the corpus: no warning
    with caplog.at_level("WARNING", logger="drmix.evaluation.runfile"):
        evaluate_run_files([run], [beir], metrics=("mrr@10",))
    assert not [r for r in caplog.records if "document ids" in r.getMessage()]


def test_the_corpus_ids_are_read_without_the_texts_and_escaped_or_numeric_ids_parsed_whole(tmp_path):
    from drmix.data.beir import read_corpus, read_corpus_ids

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "plain", "text": "x"}\n'
                      '{ "_id" : "spaced", "title": "", "text": "y"}\n'
                      '{"_id": "quote\\"d", "text": "z"}\n'
                      '{"text": "w", "_id": "last"}\n'
                      '{"_id": 42, "text": "v"}\n'
                      '{"_id": "caf\\u00e9", "text": "u"}\n\n')
    assert read_corpus_ids(corpus) == set(read_corpus(corpus)) == {"plain", "spaced", 'quote"d', "last", "42",
                                                                   "café"}
