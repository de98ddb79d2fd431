"""drmix index as a library call (drmix.retrieval.build): the target each backend's target kind reads from the
options, refused before anything loads; what an index records as its model."""
from __future__ import annotations

from pathlib import Path

import pytest

from drmix.errors import ConfigError
from drmix.retrieval.backends import backend
from drmix.retrieval.build import (check_own_params, claim_target, corpus_file, index_corpus_file, index_target,
                                  stored_model_name)


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
    from drmix.data import corpus

    assert corpus_file is corpus.corpus_file     # the one resolver of a corpus argument (tests/data/test_corpus.py)
    assert stored_model_name(None) == "default"
    monkeypatch.chdir(Path(tiny_model_path).parent)
    assert stored_model_name(Path(tiny_model_path).name) == str(Path(tiny_model_path).resolve())


def test_a_parameter_of_another_backend_is_refused_before_anything_loads(tmp_path):
    """A flag typed for a backend not chosen would do nothing: refused naming it, who takes it and the fix."""
    assert check_own_params(backend("faiss-disk"), {"rerank": 5, "nprobe": 8}) == {"rerank": 5, "nprobe": 8}
    assert check_own_params(backend("memory"), {}) == {}
    with pytest.raises(ConfigError, match=r"--rerank is an option of faiss-disk, not of --backend memory") as e:
        check_own_params(backend("memory"), {"rerank": 5})
    assert "choose --backend faiss-disk" in e.value.format()
    with pytest.raises(ConfigError, match=r"--pq-m, --rerank are options of faiss-disk, not of --backend milvus"):
        check_own_params(backend("milvus"), {"rerank": 5, "pq_m": 8})
    with pytest.raises(ConfigError, match="no backend's option"):
        check_own_params(backend("memory"), {"bogus": 1})
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "d1", "text": "a"}\n')
    with pytest.raises(ConfigError, match="--rerank"):
        index_corpus_file("memory", corpus, output=tmp_path / "o", model="no-such-model", params={"rerank": 5})
    assert not (tmp_path / "o").exists()
