"""Row layouts (drmix.data.formats): each layout read into the golden canonical collection, detection, the
column mapping, teacher scores, and the refusals (file, line, fix)."""
import json
import logging

import pytest

from drmix.data.collections import load_collections
from drmix.data.formats import LAYOUTS, PlanError, layouts_table, plan_for
from drmix.errors import DataError


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DRMIX_CACHE", str(tmp_path / "drmix-cache"))


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def rows_of(collection):
    return collection.dataset.to_list()


# one layout -> (records as the tool writes them, the canonical rows drmix must read, with scores?)
GOLDEN = {
    "drmix": ([{"query": "q1", "positive": "p1", "negatives": ["n1", "n2"]},
               {"query": "q2", "positives": ["p2a", "p2b"]}],
              [{"query": "q1", "positives": ["p1"], "negatives": ["n1", "n2"]},
               {"query": "q2", "positives": ["p2a", "p2b"], "negatives": []}]),
    "st": ([{"anchor": "q1", "positive": "p1", "negative": "n1"},
            {"anchor": "q2", "positive": "p2", "negative": "n2"}],
           [{"query": "q1", "positives": ["p1"], "negatives": ["n1"]},
            {"query": "q2", "positives": ["p2"], "negatives": ["n2"]}]),
    "tevatron": ([{"query_id": "3", "query": "q1",
                   "positive_passages": [{"docid": "7", "title": "Title", "text": "body"}],
                   "negative_passages": [{"docid": "8", "title": "", "text": "other"},
                                         {"docid": "9", "title": "T9", "text": ""}]}],
                 [{"query": "q1", "positives": ["Title body"], "negatives": ["other", "T9"]}]),
    "flag": ([{"query": "q1", "pos": ["p1"], "neg": ["n1", "n2"], "pos_scores": [0.9], "neg_scores": [0.25, 0.5],
               "prompt": "Represent this query: "}],
             [{"query": "Represent this query: q1", "positives": ["p1"], "negatives": ["n1", "n2"],
               "positive_scores": [0.9], "negative_scores": [0.25, 0.5]}]),
}


@pytest.mark.parametrize("layout", sorted(GOLDEN))
def test_each_layout_reads_into_its_golden_collection(tmp_path, layout):
    records, expected = GOLDEN[layout]
    [c] = load_collections([str(write_jsonl(tmp_path / f"{layout}.jsonl", records))])
    assert c.layout == layout and c.name == layout
    assert rows_of(c) == expected
    assert c.has_scores == (layout == "flag")


@pytest.mark.parametrize("layout", sorted(GOLDEN))
def test_forcing_the_right_format_gives_the_same_rows(tmp_path, layout):
    records, expected = GOLDEN[layout]
    [c] = load_collections([str(write_jsonl(tmp_path / "x.jsonl", records))], format=layout)
    assert rows_of(c) == expected


def test_st_numbered_negatives_and_rows_by_position(tmp_path):
    f = write_jsonl(tmp_path / "n.jsonl", [{"query": "q", "positive": "p", "negative_2": "b", "negative_1": "a"}])
    assert rows_of(load_collections([str(f)])[0]) == [{"query": "q", "positives": ["p"], "negatives": ["a", "b"]}]
    # no known names: anchor, positive, negatives by position, as sentence-transformers reads any dataset
    g = write_jsonl(tmp_path / "qa.jsonl", [{"question": "q", "answer": "a", "distractor": "d"}])
    [c] = load_collections([str(g)])
    assert c.layout == "st" and rows_of(c) == [{"query": "q", "positives": ["a"], "negatives": ["d"]}]


def test_records_may_differ_in_their_optional_keys(tmp_path):
    f = write_jsonl(tmp_path / "mixed.jsonl", [{"query": "q1", "positive": "p1"},
                                                 {"query": "q2", "positive": "p2", "negatives": ["n"]},
                                                 {"query": "q3", "positive": "p3", "negative": "m"}])
    assert [r["negatives"] for r in rows_of(load_collections([str(f)])[0])] == [[], ["n"], ["m"]]


def test_a_bare_id_title_text_file_is_not_read_by_position(tmp_path):
    f = write_jsonl(tmp_path / "corpus.jsonl", [{"_id": "d1", "title": "t", "text": "x"}])
    with pytest.raises(DataError) as e:
        load_collections([str(f)])
    assert e.value.line == 1 and '"query"' in e.value.message and "--columns" in e.value.fix


def test_column_mapping_names_the_roles(tmp_path):
    f = write_jsonl(tmp_path / "m.jsonl", [{"question": "q", "answer": "a", "hard": ["h1", "h2"], "id": 4}])
    [c] = load_collections([str(f)], columns="query=question,positive=answer,negatives=hard")
    assert rows_of(c) == [{"query": "q", "positives": ["a"], "negatives": ["h1", "h2"]}]
    # several columns joined with +, and a mapping on a YAML item wins over the global one
    (tmp_path / "list.yaml").write_text("- path: m.jsonl\n  columns: {query: question, positive: answer+hard}\n")
    [c] = load_collections([str(tmp_path / "list.yaml")], columns="query=answer,positive=question")
    assert rows_of(c) == [{"query": "q", "positives": ["a", "h1", "h2"], "negatives": []}]


def test_mapping_a_missing_column_is_refused_with_the_columns(tmp_path):
    f = write_jsonl(tmp_path / "m.jsonl", [{"question": "q", "answer": "a"}])
    with pytest.raises(DataError) as e:
        load_collections([str(f)], columns={"query": "question", "positive": "answr"})
    assert e.value.path == str(f) and e.value.line == 1
    assert "answr" in e.value.message and "question, answer" in e.value.message


def test_st_label_margins_and_absolute_scores(tmp_path):
    # MarginMSELoss: one margin M(q,p) - M(q,n) per negative -> positive 0, negative -margin
    f = write_jsonl(tmp_path / "margin.jsonl", [{"anchor": "q", "positive": "p", "negative_1": "a", "negative_2": "b",
                                                 "label": [2.0, 0.5]}])
    [c] = load_collections([str(f)])
    assert rows_of(c) == [{"query": "q", "positives": ["p"], "negatives": ["a", "b"], "positive_scores": [0.0],
                           "negative_scores": [-2.0, -0.5]}]
    # DistillKLDivLoss: [M(q,p), M(q,n_1), ...]
    g = write_jsonl(tmp_path / "kl.jsonl", [{"anchor": "q", "positive": "p", "negative": "a", "score": [3.0, 1.0]}])
    assert rows_of(load_collections([str(g)])[0])[0]["positive_scores"] == [3.0]
    assert rows_of(load_collections([str(g)])[0])[0]["negative_scores"] == [1.0]
    # a scalar with one negative is a margin
    h = write_jsonl(tmp_path / "one.jsonl", [{"anchor": "q", "positive": "p", "negative": "a", "score": 1.25}])
    assert rows_of(load_collections([str(h)])[0])[0]["negative_scores"] == [-1.25]


def test_st_label_of_the_wrong_length_names_the_line(tmp_path):
    f = write_jsonl(tmp_path / "bad.jsonl", [{"anchor": "q", "positive": "p", "negative": "a", "score": 1.0},
                                             {"anchor": "q", "positive": "p", "negative": "a", "score": [1, 2, 3]}])
    with pytest.raises(DataError) as e:
        load_collections([str(f)])
    assert e.value.line == 2 and '"score"' in e.value.message and "MarginMSELoss" in e.value.fix


def test_pair_score_rows_are_refused_with_the_reason_and_the_fix(tmp_path):
    f = write_jsonl(tmp_path / "sts.jsonl", [{"sentence1": "a", "sentence2": "b", "score": 0.8}])
    with pytest.raises(DataError) as e:
        load_collections([str(f)])
    assert "pair" in e.value.message and "CoSENT" in e.value.message and e.value.line == 1
    assert "--columns score=" in e.value.fix
    # the fix works: the label is ignored and every pair is a positive
    [c] = load_collections([str(f)], columns="score=")
    assert rows_of(c) == [{"query": "a", "positives": ["b"], "negatives": []}]


def test_flag_scores_must_align_with_their_texts(tmp_path):
    f = write_jsonl(tmp_path / "f.jsonl", [{"query": "q", "pos": ["p"], "neg": ["a", "b"], "pos_scores": [1.0],
                                           "neg_scores": [0.5]}])
    with pytest.raises(DataError) as e:
        load_collections([str(f)])
    assert e.value.line == 1 and "neg_scores" in e.value.message and "one score per negative" in e.value.fix


def test_empty_texts_are_dropped_with_their_scores(tmp_path):
    f = write_jsonl(tmp_path / "f.jsonl", [{"query": "q", "pos": ["p"], "neg": ["a", "  ", "c"], "pos_scores": [1.0],
                                           "neg_scores": [0.1, 0.2, 0.3]}])
    r = rows_of(load_collections([str(f)])[0])[0]
    assert r["negatives"] == ["a", "c"] and r["negative_scores"] == [0.1, 0.3]


def test_scores_on_some_records_only_are_refused(tmp_path):
    f = write_jsonl(tmp_path / "f.jsonl", [{"query": "q", "pos": ["p"], "neg": ["a"]},
                                           {"query": "q", "pos": ["p"], "neg": ["a"], "pos_scores": [1.0],
                                            "neg_scores": [0.0]}])
    with pytest.raises(DataError) as e:
        load_collections([str(f)])
    assert e.value.line == 2 and "teacher scores" in e.value.message


def test_tevatron_id_only_rows_are_refused(tmp_path):
    f = write_jsonl(tmp_path / "t.jsonl", [{"query_id": "1", "query_text": "q", "positive_document_ids": ["7"],
                                           "negative_document_ids": []}])
    with pytest.raises(DataError) as e:
        load_collections([str(f)])
    assert "document ids" in e.value.message and "resolve" in e.value.fix


def test_string_where_a_list_is_expected_is_one_text_with_one_warning(tmp_path, caplog):
    f = write_jsonl(tmp_path / "s.jsonl", [{"query": "q1", "pos": "one passage", "neg": "other passage"},
                                           {"query": "q2", "pos": "second", "neg": "more"}])
    with caplog.at_level(logging.WARNING, logger="drmix.data.formats"):
        [c] = load_collections([str(f)])
    assert rows_of(c)[0] == {"query": "q1", "positives": ["one passage"], "negatives": ["other passage"]}
    warned = [r.getMessage() for r in caplog.records if "where a list is expected" in r.getMessage()]
    assert len(warned) == 2 and all(str(f) in w for w in warned)           # one per column, naming the file
    assert any('"pos"' in w for w in warned) and any('"neg"' in w for w in warned)
    # a cached conversion repeats the warning (the rows are not read again)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="drmix"):
        load_collections([str(f)])
    assert sum("where a list is expected" in r.getMessage() for r in caplog.records) == 2


def test_a_json_encoded_list_in_a_text_cell_is_refused(tmp_path):
    f = write_jsonl(tmp_path / "j.jsonl", [{"query": "q", "positives": ["p"], "negatives": '["a", "b"]'}])
    with pytest.raises(DataError) as e:
        load_collections([str(f)])
    assert e.value.line == 1 and "JSON-encoded list" in e.value.message


@pytest.mark.parametrize("value, words", [(5, "int"), ([1, 2], "int"), ({"x": 1}, 'without "text"')])
def test_non_text_cells_are_refused(tmp_path, value, words):
    f = write_jsonl(tmp_path / "b.jsonl", [{"query": "q", "positive": "p", "negatives": value}])
    with pytest.raises(DataError) as e:
        load_collections([str(f)])
    assert e.value.line == 1 and '"negatives"' in e.value.message and words in e.value.message


def test_detection_order_and_explicit_formats():
    assert plan_for(["query_id", "query", "positive_passages"]).layout == "tevatron"
    assert plan_for(["query", "pos", "neg"]).layout == "flag"
    assert plan_for(["query", "positive", "negatives", "mined"]).layout == "drmix"
    assert plan_for(["anchor", "positive", "negative"]).layout == "st"
    assert plan_for(["query", "positive", "score", "negative"]).layout == "st"   # a label: sentence-transformers
    p = plan_for(["query", "positive", "negatives", "mined"])
    assert p.ignored == ("mined",) and p.negatives == ("negatives",)
    with pytest.raises(PlanError, match="folder layout"):
        plan_for(["query", "positive"], format="beir")
    with pytest.raises(PlanError, match='"pos"'):
        plan_for(["query", "positive"], format="flag")


def test_registry_lists_every_layout_and_the_docs_print_its_table():
    from pathlib import Path

    assert set(LAYOUTS.names()) == {"drmix", "st", "tevatron", "flag", "beir"}
    table = layouts_table()
    assert table.count("\n") == len(LAYOUTS) + 1
    docs = (Path(__file__).resolve().parents[3] / "docs" / "data.md").read_text(encoding="utf-8")
    assert "python -m drmix.data.formats" in docs and table in docs
    from drmix.data.formats.sources import sources_table

    assert sources_table() in docs


def _issue29_rule(text):
    """drmix.io.text.clean_text's contract (issue #29): (text with lone surrogates as U+FFFD, how many)."""
    import re

    return re.subn("[\ud800-\udfff]", "\ufffd", text)


def test_lone_surrogates_pass_the_one_cleaning_place_and_are_counted_once(tmp_path, caplog, monkeypatch):
    import drmix.data.formats as formats

    monkeypatch.setattr(formats, "_CLEAN", getattr(__import__("drmix.io.text").io.text, "clean_text", None)
                        or _issue29_rule)
    f = tmp_path / "s.jsonl"
    f.write_text('{"query": "caf\\ud800", "pos": ["a\\udfff b"], "neg": ["ok", "\\ud800\\ud800"], '
                 '"prompt": "P\\ud800:"}\n', encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="drmix"):
        [c] = load_collections([str(f)])
    assert rows_of(c) == [{"query": "P\ufffd: caf\ufffd", "positives": ["a\ufffd b"],
                           "negatives": ["ok", "\ufffd\ufffd"]}]
    warned = [r.getMessage() for r in caplog.records if "surrogate" in r.getMessage()]
    assert len(warned) == 1 and str(f) in warned[0] and "5 lone surrogate" in warned[0]


def test_a_list_in_the_st_anchor_column_says_one_query_per_row(tmp_path):
    f = write_jsonl(tmp_path / "st.jsonl", [{"anchor": "q0", "positive": "p0"},
                                            {"anchor": ["q1", "q2"], "positive": "p1"}])
    with pytest.raises(DataError) as e:
        load_collections([str(f)], format="st")
    assert e.value.line == 2 and '"anchor" holds a list (2 items)' in e.value.message
    assert "a row of its own" in e.value.fix and "--columns query=COLUMN" in e.value.fix
