"""TREC run files: written from drmix search rows, read back (and drmix's JSONL runs), bad lines refused."""
from __future__ import annotations

import json

import pytest

from drmix.errors import DataError
from drmix.retrieval.trec import read_run, read_trec_run, trec_lines, write_trec_run

ROWS = [{"query_id": "q1", "query": "x", "hits": [{"rank": 1, "doc_id": "d2", "score": 0.75, "text": "t"},
                                                 {"rank": 2, "doc_id": "d1", "score": 0.5}]},
        {"query_id": "q2", "query": "y", "hits": [{"rank": 1, "doc_id": "d9", "score": -0.125, "corpus": "fiqa"}]}]


def test_lines_are_six_fields_in_rank_order():
    assert trec_lines(ROWS) == ["q1 Q0 d2 1 0.75 drmix", "q1 Q0 d1 2 0.5 drmix", "q2 Q0 fiqa/d9 1 -0.125 drmix"]
    assert trec_lines(ROWS[:1], tag="mine")[0] == "q1 Q0 d2 1 0.75 mine"


def test_written_run_reads_back(tmp_path):
    path = tmp_path / "run.trec"
    write_trec_run(path, ROWS)
    assert path.read_text().endswith("drmix\n")
    assert read_run(path) == {"q1": {"d2": 0.75, "d1": 0.5}, "q2": {"fiqa/d9": -0.125}}


def test_jsonl_run_of_drmix_search_reads(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    assert read_run(path) == {"q1": {"d2": 0.75, "d1": 0.5}, "q2": {"fiqa/d9": -0.125}}


def test_id_with_space_is_refused():
    with pytest.raises(DataError, match="whitespace"):
        trec_lines([{"query_id": "q 1", "hits": [{"doc_id": "d", "score": 1.0}]}])


@pytest.mark.parametrize("text, line, match", [
    ("q1 Q0 d1 1 0.5 t\nq1 Q0 d2 2 0.4\n", 2, "6 fields"),
    ("q1 Q0 d1 1 high t\n", 1, "not a finite number"),
    ("q1 Q0 d1 1 nan t\n", 1, "not a finite number"),
    ("q1 Q0 d1 1 0.5 t\n\nq1 Q0 d1 2 0.4 t\n", 3, "listed twice"),
])
def test_bad_trec_lines_name_the_line(tmp_path, text, line, match):
    path = tmp_path / "bad.trec"
    path.write_text(text)
    with pytest.raises(DataError, match=match) as e:
        read_trec_run(path)
    assert e.value.line == line and e.value.path == str(path)


def test_bad_jsonl_line_and_missing_or_empty_file(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"query_id": "q1", "hits": []}\n{"query_id": "q2"}\n')
    with pytest.raises(DataError, match="not a drmix search result") as e:
        read_run(path)
    assert e.value.line == 2
    with pytest.raises(DataError, match="not found"):
        read_run(tmp_path / "none.trec")
    (tmp_path / "empty.trec").write_text("# only a comment\n")
    with pytest.raises(DataError, match="holds no ranking"):
        read_run(tmp_path / "empty.trec")
