"""A corpus argument (drmix.data.corpus): a BEIR folder means its corpus.jsonl, a file itself; its name; distinct
names of the target corpora of one run."""
from __future__ import annotations

import pytest

from drmix.data.corpus import check_corpus_names, corpus_file, corpus_name
from drmix.errors import ConfigError, DataError


def test_a_beir_folder_means_its_corpus_file_and_a_file_itself(tmp_path, monkeypatch):
    beir = tmp_path / "scifact"
    beir.mkdir()
    with pytest.raises(DataError, match="no corpus.jsonl"):
        corpus_file(beir)
    (beir / "corpus.jsonl").write_text('{"_id": "1", "text": "t"}\n')
    f = tmp_path / "c.jsonl"
    f.write_text('{"_id": "1", "text": "t"}\n')
    assert corpus_file(beir) == beir / "corpus.jsonl" and corpus_file(f) == f
    assert corpus_name(beir) == "scifact" and corpus_name(beir / "corpus.jsonl") == "scifact"
    assert corpus_name(f) == "c"
    with pytest.raises(DataError, match="not found"):
        corpus_file(tmp_path / "missing.jsonl")
    monkeypatch.setenv("HOME", str(tmp_path))                     # ~ is the user's home, as a shell reads it
    assert corpus_file("~/scifact") == beir / "corpus.jsonl" and corpus_name("~/scifact") == "scifact"


def test_a_beir_folder_is_named_after_the_folder_whatever_its_dots(tmp_path):
    folder = tmp_path / "cqadupstack.android"
    folder.mkdir()
    assert corpus_name(folder) == "cqadupstack.android"
    assert corpus_name(tmp_path / "nq.v1.jsonl") == "nq.v1"


def test_target_corpora_need_distinct_names(tmp_path):
    """The corpora of one run are named by corpus_name; none, or two of one name, is a ConfigError."""
    assert check_corpus_names([tmp_path / "scifact", tmp_path / "nq.jsonl"]) == ["scifact", "nq"]
    with pytest.raises(ConfigError, match="no target corpus"):
        check_corpus_names([])
    with pytest.raises(ConfigError, match="same name"):
        check_corpus_names([tmp_path / "a" / "scifact", tmp_path / "b" / "scifact" / "corpus.jsonl"])
