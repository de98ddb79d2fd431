"""drmix search as library calls (drmix.retrieval.search): the queries to search, the run file and its summary,
the model an index names."""
from __future__ import annotations

import json

import pytest

from drmix.data.beir import write_beir
from drmix.errors import ModelError
from drmix.retrieval.search import index_model, select_queries, write_run


def test_judged_queries_in_the_order_of_their_qrels(tmp_path):
    data = write_beir(tmp_path / "b", {"d": {"text": "x"}}, {"a": "qa", "b": "qb", "c": "qc"},
                      {"test": {"c": {"d": 1}, "a": {"d": 0}}, "dev": {"b": {"d": 1}}})
    assert select_queries(data=data) == {"c": "qc", "a": "qa"}        # judged 0 is judged: pytrec_eval keeps it
    assert select_queries(data=data, split="dev") == {"b": "qb"}
    assert select_queries(data=data, qrels=data / "qrels" / "dev.tsv") == {"b": "qb"}
    assert select_queries(queries=data / "queries.jsonl") == {"a": "qa", "b": "qb", "c": "qc"}
    assert select_queries(query=["x", "y"]) == {"1": "x", "2": "y"}


def test_the_run_file_and_its_summary(tmp_path):
    rows = [{"query_id": "q1", "query": "x", "hits": [{"rank": 1, "doc_id": "d", "score": 0.5, "text": "T"}]},
            {"query_id": "q2", "query": "y", "hits": []}]
    summary = write_run(rows, "jsonl", tmp_path / "r.jsonl")
    assert summary == f"wrote 1 hits of 2 queries to {tmp_path / 'r.jsonl'} (jsonl)"
    saved = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert saved[0]["hits"] == [{"rank": 1, "doc_id": "d", "score": 0.5}]          # no texts in a run file
    write_run(rows, "trec", tmp_path / "r.trec")
    assert (tmp_path / "r.trec").read_text() == "q1 Q0 d 1 0.5 drmix\n"


def test_a_recorded_model_that_is_gone_is_named(tmp_path):
    assert index_model("default", tmp_path) is None and index_model("org/name", tmp_path) == "org/name"
    with pytest.raises(ModelError, match="built with the model runs/gone/model, which does not exist here") as e:
        index_model("runs/gone/model", tmp_path)
    assert e.value.path == str(tmp_path / "meta.json")
