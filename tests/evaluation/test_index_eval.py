"""drmix eval --index: a built index scored against qrels (the same metrics as drmix eval)."""
from __future__ import annotations

import numpy as np
import pytest

from drmix.data.beir import write_beir
from drmix.evaluation.index_eval import evaluate_index
from drmix.retrieval.index import DenseIndex


class _Model:
    """Stands in for the query encoder: search_queries only needs encode_texts, patched below."""

    similarity_fn_name = "dot"
    prompts: dict = {}


def test_scores_the_index_run_against_the_qrels(tmp_path, monkeypatch):
    # two queries, three documents on the axes: q1 -> d1 first, q2 -> d3 first then d2
    data = write_beir(tmp_path / "toy", {"d1": {"text": "a"}, "d2": {"text": "b"}, "d3": {"text": "c"}},
                      {"q1": "x", "q2": "y"}, {"test": {"q1": {"d1": 1}, "q2": {"d2": 1}}})
    index = DenseIndex.build(np.eye(3, dtype=np.float32), ["d1", "d2", "d3"], metadata={"model": "m"})
    queries = {"x": [1.0, 0.0, 0.0], "y": [0.0, 0.5, 1.0]}
    import drmix.retrieval.index as idx_mod

    monkeypatch.setattr(idx_mod, "encode_texts", lambda model, texts, **kw: np.asarray(
        [queries[t] for t in texts], dtype=np.float32))
    monkeypatch.setattr("drmix.model.instructions.query_prompt_for", lambda *a, **k: "")
    monkeypatch.setattr("drmix.model.encoder.query_prompt", lambda *a, **k: "")
    report = evaluate_index(_Model(), index, str(tmp_path / "idx"), data, k=3, metrics=("mrr@10", "recall@1"))
    # q1: d1 at rank 1 -> MRR 1, recall@1 1; q2: d3, d2 -> MRR 1/2, recall@1 0
    assert report.results["toy"] == pytest.approx({"mrr@10": 0.75, "recall@1": 0.5})
    assert report.per_query["toy"]["q2"] == pytest.approx({"mrr@10": 0.5, "recall@1": 0.0})
    info = report.info["toy"]
    assert (info["queries"], info["documents"], info["backend"], info["kind"]) == (2, 3, "memory", "flat")
    assert report.model == "m" and info["index"] == str(tmp_path / "idx")


def test_qrels_of_documents_the_index_does_not_hold_are_named(tmp_path, monkeypatch, caplog):
    """An index of another corpus scores 0 without a fault of its own: the judged documents it lacks are counted
    and named in a warning (every one missing: the wrong index or the wrong --data)."""
    import logging

    data = write_beir(tmp_path / "toy", {"d1": {"text": "a"}, "d2": {"text": "b"}, "d3": {"text": "c"}},
                      {"q1": "x", "q2": "y"}, {"test": {"q1": {"d1": 1}, "q2": {"d2": 1, "d3": 0}}})
    import drmix.retrieval.index as idx_mod

    monkeypatch.setattr(idx_mod, "encode_texts", lambda model, texts, **kw: np.ones((len(texts), 3), np.float32))
    monkeypatch.setattr("drmix.model.instructions.query_prompt_for", lambda *a, **k: "")
    monkeypatch.setattr("drmix.model.encoder.query_prompt", lambda *a, **k: "")
    other = DenseIndex.build(np.eye(3, dtype=np.float32), ["e1", "e2", "e3"], metadata={"model": "m"})
    with caplog.at_level(logging.WARNING):
        report = evaluate_index(_Model(), other, "runs/other", data, k=3, metrics=("ndcg@10",))
    assert report.results["toy"] == {"ndcg@10": 0.0} and report.info["toy"]["judged_not_indexed"] == 2
    assert f"none of the 2 documents judged relevant in {data / 'qrels' / 'test.tsv'} is in the index at " \
           "runs/other" in caplog.text
    caplog.clear()
    half = DenseIndex.build(np.eye(3, dtype=np.float32), ["d1", "e2", "d3"], metadata={"model": "m"})
    with caplog.at_level(logging.WARNING):
        report = evaluate_index(_Model(), half, "runs/half", data, k=3, metrics=("ndcg@10",))
    assert report.info["toy"]["judged_not_indexed"] == 1 and "1 of the 2 documents judged relevant" in caplog.text
    caplog.clear()
    full = DenseIndex.build(np.eye(3, dtype=np.float32), ["d1", "d2", "d3"], metadata={"model": "m"})
    with caplog.at_level(logging.WARNING):
        report = evaluate_index(_Model(), full, "runs/full", data, k=3, metrics=("ndcg@10",))
    assert report.info["toy"]["judged_not_indexed"] == 0 and "judged relevant" not in caplog.text


@pytest.mark.slow
def test_scifact_through_milvus_and_faiss_on_disk(shared_data, tmp_path, milvus_target):
    """SciFact with all-MiniLM-L6-v2: a flat Milvus collection (Milvus Lite, a Milvus server) scores as exact
    search (nDCG@10 0.6451); on-disk IVF-PQ at nprobe 32, rerank 4 (the default is 10) stays within 0.02 of it
    (measured: 0.6333)."""
    from drmix.data.beir import read_corpus
    from drmix.evaluation.evaluate import evaluate_model
    from drmix.model.encoder import load_encoder
    from drmix.retrieval.backends import build_index, encode_chunks, model_record, open_index

    model = load_encoder(None)
    scifact = shared_data / "scifact"
    corpus = read_corpus(scifact / "corpus.jsonl")
    meta = {"model": "default", **model_record(model)}
    exact = evaluate_model(model, [scifact], show_progress=False).results["scifact"]
    vectors = list(encode_chunks(model, corpus, show_progress=False))
    milvus = build_index("milvus", f"{milvus_target}#scifact", vectors, metadata=meta)
    disk = build_index("faiss-disk", str(tmp_path / "disk"), vectors, metadata=meta, rerank=4)
    via_milvus = evaluate_index(model, open_index(milvus, model), milvus, scifact).results["scifact"]
    via_disk = evaluate_index(model, open_index(disk, model), disk, scifact).results["scifact"]
    assert via_milvus == pytest.approx(exact, abs=1e-4)
    assert via_disk["ndcg@10"] == pytest.approx(exact["ndcg@10"], abs=0.02)
