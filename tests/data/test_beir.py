"""BEIR directory loading, writing and every bad-input path (file and line named)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from drmix.data.beir import available_splits, doc_text, load_beir, read_qrels, write_beir
from drmix.errors import DataError

CORPUS = {"d1": {"title": "Alpha", "text": "first doc"}, "d2": {"title": "", "text": "second doc"},
          "d3": {"title": "Gamma", "text": "third doc"}}
QUERIES = {"q1": "find alpha", "q2": "find second", "q3": "unjudged in test"}
QRELS = {"test": {"q1": {"d1": 1}, "q2": {"d2": 2, "d3": 0}}, "train": {"q3": {"d3": 1}}}


@pytest.fixture()
def beir_dir(tmp_path) -> Path:
    return write_beir(tmp_path / "toy", CORPUS, QUERIES, QRELS)


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def test_round_trip_keeps_only_judged_queries(beir_dir):
    ds = load_beir(beir_dir, "test")
    assert ds.corpus == CORPUS
    assert ds.queries == {"q1": "find alpha", "q2": "find second"}
    assert ds.qrels == {"q1": {"d1": 1}, "q2": {"d2": 2, "d3": 0}}
    assert ds.name == "toy"
    assert available_splits(beir_dir) == ["test", "train"]


def test_split_none_loads_every_query_and_no_qrels(beir_dir):
    ds = load_beir(beir_dir, None, load_corpus=False)
    assert ds.queries == QUERIES and ds.qrels == {} and ds.corpus == {}


def test_written_files_follow_beir_layout(beir_dir):
    assert _lines(beir_dir / "qrels" / "test.tsv") == ["query-id\tcorpus-id\tscore", "q1\td1\t1", "q2\td2\t2",
                                                       "q2\td3\t0"]
    first = json.loads(_lines(beir_dir / "corpus.jsonl")[0])
    assert first == {"_id": "d1", "title": "Alpha", "text": "first doc"}


def test_doc_text_joins_title_and_text():
    assert doc_text({"title": "T", "text": "body"}) == "T body"
    assert doc_text({"title": "", "text": "body"}) == "body"
    assert doc_text({"text": "body "}) == "body"


def test_crlf_qrels_and_integer_ids(tmp_path):
    root = tmp_path / "crlf"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text('{"_id": 7, "title": "t", "text": "x"}\n', encoding="utf-8")
    (root / "queries.jsonl").write_text('{"_id": "a", "text": "q"}\n', encoding="utf-8")
    (root / "qrels" / "test.tsv").write_bytes(b"query-id\tcorpus-id\tscore\r\na\t7\t1\r\n")
    ds = load_beir(root)
    assert ds.qrels == {"a": {"7": 1}} and list(ds.corpus) == ["7"]
    (root / "qrels" / "test.tsv").write_bytes(b"query_id\tdoc_id\tlabel\na\t7\t2\n")  # other header names
    assert read_qrels(root / "qrels" / "test.tsv") == {"a": {"7": 2}}


def _write(path: Path, text: str | bytes) -> None:
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")


def _error(fn) -> DataError:
    with pytest.raises(DataError) as info:
        fn()
    return info.value


def test_missing_directory_and_split(tmp_path, beir_dir):
    err = _error(lambda: load_beir(tmp_path / "nope"))
    assert err.path.endswith("nope")
    err = _error(lambda: load_beir(beir_dir, "dev"))
    assert err.path.endswith("dev.tsv") and "test, train" in err.fix


@pytest.mark.parametrize("name, content, line, message", [
    ("corpus.jsonl", '{"_id": "d1", "text": "a"}\n{"_id": "d2", "text": \n', 2, "invalid JSON"),
    ("corpus.jsonl", '{"_id": "d1", "text": "a"}\n\n{"title": "x", "text": "b"}\n', 3, "no '_id'"),
    ("corpus.jsonl", '{"_id": "d1", "title": "no text"}\n', 1, "no 'text'"),
    ("corpus.jsonl", '{"_id": "d1", "text": "a"}\n{"_id": "d1", "text": "b"}\n', 2, "duplicate document id"),
    ("corpus.jsonl", '{"_id": "d1", "text": ["a"]}\n', 1, "must be a string"),
    ("corpus.jsonl", b'{"_id": "d1", "text": "a"}\n{"_id": "d2", "text": "\xff"}\n', 2, "UTF-8"),
    ("queries.jsonl", '{"_id": "q1", "text": "a"}\n{"_id": "q1", "text": "b"}\n', 2, "duplicate query id"),
    ("queries.jsonl", '[1, 2]\n', 1, "JSON object"),
    ("qrels/test.tsv", "query-id\tcorpus-id\tscore\nq1\td1\n", 2, "3 tab-separated columns"),
    ("qrels/test.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\thigh\n", 3, "not an integer"),
    ("qrels/test.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\nqX\td2\t1\n", 3, "query id 'qX'"),
    ("qrels/test.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\tdX\t1\n", 3, "document id 'dX'"),
])
def test_bad_records_name_file_and_line(beir_dir, name, content, line, message):
    _write(beir_dir / name, content)
    err = _error(lambda: load_beir(beir_dir, "test"))
    assert err.path == str(beir_dir / name)
    assert err.line == line
    assert message in err.message
    assert err.fix


def test_unknown_doc_ids_are_not_checked_without_corpus(beir_dir):
    _write(beir_dir / "qrels" / "test.tsv", "q1\tdX\t1\n")  # no header is fine too
    assert load_beir(beir_dir, "test", load_corpus=False).qrels == {"q1": {"dX": 1}}


def test_empty_split_and_missing_files(beir_dir):
    _write(beir_dir / "qrels" / "test.tsv", "query-id\tcorpus-id\tscore\r\n")
    assert "empty split" in _error(lambda: read_qrels(beir_dir / "qrels" / "test.tsv")).message
    (beir_dir / "queries.jsonl").unlink()
    err = _error(lambda: load_beir(beir_dir, "train"))
    assert err.path.endswith("queries.jsonl") and "not found" in err.message
    _write(beir_dir / "queries.jsonl", "")
    (beir_dir / "corpus.jsonl").write_text("\n", encoding="utf-8")
    assert "corpus is empty" in _error(lambda: load_beir(beir_dir, None)).message


@pytest.mark.slow
def test_scifact_counts(shared_data):
    ds = load_beir(shared_data / "scifact", "test")
    assert (len(ds.corpus), len(ds.queries), sum(len(v) for v in ds.qrels.values())) == (5183, 300, 339)
    assert available_splits(shared_data / "scifact") == ["test", "train"]
