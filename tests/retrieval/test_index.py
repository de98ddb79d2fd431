"""The Python API over the memory backend: a corpus encoded into an index, queries searched, what the index records
(the index itself: tests/retrieval/backends/test_memory.py; encoding: test_encode.py)."""
from __future__ import annotations

import logging

import pytest

from drmix.errors import DataError
from drmix.retrieval.index import index_corpus, search_queries

TEXTS = ["a short one", "a much longer text that has quite a few more words in it than the others", "mid size text",
         "x", "another fairly long sentence about retrieval and indexes"]


def test_index_corpus_and_search_queries_find_identical_text():
    from drmix.model.encoder import load_encoder

    model = load_encoder(None, device="cpu")  # real MiniLM: the tiny random model cannot tell texts apart
    corpus = {f"d{i}": {"title": f"title {i}", "text": t} for i, t in enumerate(TEXTS)}
    index = index_corpus(model, corpus, show_progress=False, metadata={"model": "mini"})
    assert index.metadata["model"] == "mini" and index.metadata["normalized"] is True
    run = search_queries(model, index, {"q": f"title 3 {TEXTS[3]}", "r": f"title 1 {TEXTS[1]}"}, k=3)
    assert list(run) == ["q", "r"] and all(len(v) == 3 for v in run.values())
    for qid, doc in (("q", "d3"), ("r", "d1")):
        best = max(run[qid], key=run[qid].get)
        assert best == doc and run[qid][best] == pytest.approx(1.0, abs=1e-5)
    with pytest.raises(DataError, match="empty"):
        index_corpus(model, {})


def test_the_model_is_recorded_as_an_absolute_path(tmp_path, tiny_model_path, monkeypatch):
    """A model loaded from a folder relative to the current one is recorded absolute: the saved index is searched
    from anywhere (it was recorded as given, relative to the folder it was built in)."""
    import os
    from pathlib import Path

    from drmix.model.encoder import load_encoder
    from drmix.retrieval.search import index_model

    monkeypatch.chdir(Path(tiny_model_path).parent)
    model = load_encoder(os.path.basename(tiny_model_path), device="cpu")
    index = index_corpus(model, {"a": {"title": "", "text": "alpha"}}, show_progress=False)
    assert index.metadata["model"] == str(Path(tiny_model_path).resolve())
    index.save(tmp_path / "idx")
    monkeypatch.chdir(tmp_path)
    assert index_model(index.metadata["model"], tmp_path / "idx") == str(Path(tiny_model_path).resolve())


def test_a_corpus_of_empty_texts_is_indexed_with_a_warning(tiny_model_path, caplog):
    from drmix.model.encoder import load_encoder

    model = load_encoder(tiny_model_path, device="cpu")
    with caplog.at_level(logging.WARNING, logger="drmix.index"):
        index = index_corpus(model, {"a": {"title": "", "text": ""}, "b": {"title": " ", "text": "\n"}},
                             show_progress=False)
    assert len(index) == 2
    assert "all 2 documents have no title or text (first: 'a')" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="drmix.index"):
        index_corpus(model, {"a": {"title": "A", "text": ""}, "b": {"title": "", "text": ""}}, show_progress=False)
    assert "1 of 2 documents have no title or text (first: 'b')" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="drmix.index"):
        index_corpus(model, {"a": {"title": "A", "text": "x"}}, show_progress=False)
    assert "no title or text" not in caplog.text
