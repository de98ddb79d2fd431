"""drmix index as a library call (drmix.retrieval.build): the target each backend's target kind reads from the
options, refused before anything loads; what an index records as its model."""
from __future__ import annotations

from pathlib import Path

import pytest

from drmix.errors import ConfigError
from drmix.retrieval.backends import backend
from drmix.retrieval.build import claim_target, corpus_file, index_target, stored_model_name


def test_the_target_follows_the_backends_target_kind(tmp_path):
    corpus = tmp_path / "sci-fact" / "corpus.jsonl"
    folder = index_target(backend("faiss-disk"), output=tmp_path / "o", uri=None, collection=None, corpus_file=corpus)
    assert (folder.location, folder.local) == (str(tmp_path / "o"), tmp_path / "o")
    lite = index_target(backend("milvus"), output=None, uri=str(tmp_path / "i.db"), collection=None,
                        corpus_file=corpus)
    assert lite.location == f"{tmp_path / 'i.db'}#sci_fact" and lite.local == tmp_path / "i.db"
    server = index_target(backend("milvus"), output=None, uri="http://h:19530", collection="c", corpus_file=corpus)
    assert server.location == "http://h:19530#c" and server.local is None
    with pytest.raises(ConfigError, match="--backend milvus writes a collection: give --uri"):
        index_target(backend("milvus"), output=tmp_path / "o", uri=None, collection=None, corpus_file=corpus)
    with pytest.raises(ConfigError, match=r"--backend memory writes a folder: give --output DIR \(--uri and "
                                          r"--collection are for --backend milvus\)"):
        index_target(backend("memory"), output=None, uri="x.db", collection=None, corpus_file=corpus)


def test_a_folder_that_is_not_an_index_is_refused_before_encoding(tmp_path):
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "notes.txt").write_text("mine")
    target = index_target(backend("memory"), output=tmp_path / "o", uri=None, collection=None,
                          corpus_file=tmp_path / "c.jsonl")
    with pytest.raises(ConfigError, match="not empty and does not hold an index"):
        claim_target(target, {}, corpus=tmp_path / "c.jsonl", overwrite=False)
    claim_target(target, {}, corpus=tmp_path / "c.jsonl", overwrite=True)
    assert (tmp_path / "o" / "notes.txt").exists()                      # refused or allowed: nothing touched yet


def test_the_corpus_file_and_the_model_recorded(tmp_path, tiny_model_path, monkeypatch):
    (tmp_path / "beir").mkdir()
    assert corpus_file(tmp_path / "beir") == tmp_path / "beir" / "corpus.jsonl"
    assert corpus_file(tmp_path / "c.jsonl") == tmp_path / "c.jsonl"
    assert stored_model_name(None) == "default"
    monkeypatch.chdir(Path(tiny_model_path).parent)
    assert stored_model_name(Path(tiny_model_path).name) == str(Path(tiny_model_path).resolve())
