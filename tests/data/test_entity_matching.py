"""The entity-matching builder (drmix.data.entity_matching) on tiny hand-written tables."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from drmix.data.beir import load_beir
from drmix.data.entity_matching import EntityMatchingConfig, build_entity_matching, default_names, read_manifest
from drmix.errors import ConfigError, DataError

from em_tables import TABLE_A, TABLE_B, write_src  # tests/ helper module


def build(tmp_path: Path, **kw):
    src = write_src(tmp_path / "src")
    cfg = EntityMatchingConfig(names=("left", "right"), **kw)
    return build_entity_matching(src, tmp_path / "out", cfg), tmp_path / "out"


def test_layout_queries_qrels_and_training_pairs(tmp_path):
    s, out = build(tmp_path)
    assert s.names == ("left", "right") and s.matches == 3
    assert s.corpus_sizes == {"left": 4, "right": 4}
    # Components: {A0, B10} (2 queries) and {A1, B11, B13} (3 queries) -> one per split.
    assert sorted(s.queries.values()) == [2, 3]
    left_corpus = [json.loads(x) for x in (out / "left" / "corpus.jsonl").read_text().splitlines()]
    assert left_corpus[0] == {"_id": "0", "title": "", "text": "brand: acme"}   # no title by default
    assert left_corpus[3]["text"] == ""                          # empty brand left out, nothing remains
    qrels = {}
    for split in ("dev", "test"):
        for side in ("left", "right"):
            ds = load_beir(out / side, split=split, load_corpus=True)
            for q, docs in ds.qrels.items():
                qrels.setdefault(q, {})[side] = docs
    assert qrels == {
        "left-0": {"left": {"0": 1}, "right": {"10": 1}},
        "right-10": {"left": {"0": 1}, "right": {"10": 1}},
        "left-1": {"left": {"1": 1}, "right": {"11": 1, "13": 1}},
        "right-11": {"left": {"1": 1}, "right": {"11": 1}},
        "right-13": {"left": {"1": 1}, "right": {"13": 1}},
    }
    # A component never straddles the splits.
    dev = set(load_beir(out / "left", split="dev", load_corpus=False).qrels)
    assert dev in ({"left-0", "right-10"}, {"left-1", "right-11", "right-13"})
    queries = load_beir(out / "left", split=None, load_corpus=False).queries
    assert queries["right-13"] == "foo gadget y"
    train_left = [json.loads(x) for x in (out / "train" / "left.jsonl").read_text().splitlines()]
    assert train_left == [{"query": "bar thing", "positive": "brand: bar"}]   # "solo item" has no passage
    train_right = [json.loads(x) for x in (out / "train" / "right.jsonl").read_text().splitlines()]
    assert train_right == [{"query": "other", "positive": "brand: zzz"}]
    man = read_manifest(out)
    assert man["passage_fields"] == {"left": ["brand"], "right": ["brand"]}
    assert man["passage_contains_query"] is False
    assert man["corpus_dirs"] == {"left": out / "left", "right": out / "right"}
    assert man["train_files"]["left"] == out / "train" / "left.jsonl"


def test_split_is_seeded(tmp_path):
    a, _ = build(tmp_path / "a", seed=1)
    b, _ = build(tmp_path / "b", seed=1)
    qa = (tmp_path / "a" / "out" / "left" / "qrels" / "dev.tsv").read_text()
    qb = (tmp_path / "b" / "out" / "left" / "qrels" / "dev.tsv").read_text()
    assert qa == qb and a.queries == b.queries


def test_passage_fields_and_max_unmatched(tmp_path):
    s, out = build(tmp_path, passage_fields=["brand"], max_unmatched=1)
    assert s.corpus_sizes == {"left": 3, "right": 4}   # left: matched 0, 1 plus one of the unmatched 2, 3
    texts = [json.loads(x)["text"] for x in (out / "left" / "corpus.jsonl").read_text().splitlines()]
    assert texts[:2] == ["brand: acme", "brand: foo"]
    assert s.train_sizes["left"] in (0, 1)             # "solo item" has no brand -> no positive


def _passages_and_queries(out: Path, sides=("left", "right")):
    queries = load_beir(out / sides[0], split=None, load_corpus=False).queries
    passages = {side: {json.loads(x)["_id"]: json.loads(x)["text"]
                       for x in (out / side / "corpus.jsonl").read_text().splitlines()} for side in sides}
    return queries, passages


def test_default_passage_never_contains_the_title(tmp_path):
    s, out = build(tmp_path)
    queries, passages = _passages_and_queries(out)
    assert len(queries) == 5
    for side, docs in passages.items():
        for text in docs.values():
            assert "title" not in text and not any(q in text for q in queries.values())
    for line in (out / "train" / "left.jsonl").read_text().splitlines():
        row = json.loads(line)
        assert row["query"] not in row["positive"]


def test_title_included_is_an_explicit_identity_option(tmp_path):
    s, out = build(tmp_path, include_query_field=True)
    queries, passages = _passages_and_queries(out)
    assert passages["left"]["0"] == "title: acme widget; brand: acme"
    assert passages["left"]["3"] == "title: solo item"
    assert read_manifest(out)["passage_contains_query"] is True
    # naming the query field explicitly is the same choice
    s2, out2 = build(tmp_path / "explicit", passage_fields=["title", "brand"])
    assert _passages_and_queries(out2)[1] == passages
    assert read_manifest(out2)["passage_contains_query"] is True


def test_no_passage_column_besides_the_title_is_refused(tmp_path):
    src = write_src(tmp_path / "src", tableA_csv="id,title\n0,acme widget\n1,foo gadget\n2,bar thing\n")
    with pytest.raises(ConfigError, match="no column to put in a passage"):
        build_entity_matching(src, tmp_path / "out", EntityMatchingConfig(names=("l", "r")))


def _many_components(root: Path, n: int = 12) -> Path:
    a = "id,title,brand\n" + "".join(f"{i},item {i},b{i}\n" for i in range(n))
    b = "id,title,brand\n" + "".join(f"{100 + i},thing {i},c{i}\n" for i in range(n))
    pairs = "ltable_id,rtable_id,label\n" + "".join(f"{i},{100 + i},1\n" for i in range(n))
    return write_src(root, tableA_csv=a, tableB_csv=b, train_csv=pairs, valid_csv="ltable_id,rtable_id,label\n",
                     test_csv="ltable_id,rtable_id,label\n")


def test_seeded_splits_differ_across_seeds(tmp_path):
    src = _many_components(tmp_path / "src")
    dev = {}
    for seed in (0, 1, 2, 0):
        out = tmp_path / f"out{seed}"
        s = build_entity_matching(src, out, EntityMatchingConfig(names=("l", "r"), seed=seed))
        assert s.queries == {"dev": 12, "test": 12}
        d = set(load_beir(out / "l", split="dev", load_corpus=False).qrels)
        assert seed not in dev or dev[seed] == d     # same seed, same split
        dev[seed] = d
    assert dev[0] != dev[1] and dev[0] != dev[2] and dev[1] != dev[2]


def test_default_names_from_directory():
    assert default_names(Path("/x/walmart-amazon")) == ("walmart", "amazon")
    assert default_names(Path("/x/amazon_google")) == ("amazon", "google")
    assert default_names(Path("/x/tables")) == ("a", "b")


@pytest.mark.parametrize("over,file,line,needle", [
    ({"tableA.csv": "id,name\n0,x\n"}, "tableA.csv", 1, "no column 'title' (chosen by --query-field)"),
    ({"tableB.csv": "id,title,brand\n10,a,b\n11,c,d\n10,e,f\n"}, "tableB.csv", 4, "duplicate id '10'"),
    ({"valid.csv": "ltable_id,rtable_id,label\n1,11,1\n7,13,1\n"}, "valid.csv", 3, "ltable_id '7'"),
    ({"train.csv": "ltable_id,rtable_id,label\n0,99,1\n"}, "train.csv", 2, "rtable_id '99'"),
    ({"test.csv": "ltable_id,rtable_id\n2,12\n"}, "test.csv", 1, "missing column(s) label"),
    ({"test.csv": "ltable_id,rtable_id,label\n2,12,yes\n"}, "test.csv", 2, "label 'yes'"),
    ({"tableA.csv": b"id,title,brand\n0,acme,acme\n1,caf\xe9,x\n"}, "tableA.csv", 3, "not valid UTF-8"),
    ({"tableA.csv": "id,title,brand\n0,acme\n"}, "tableA.csv", 2, "2 fields but the header has 3"),
    ({"tableA.csv": ""}, "tableA.csv", 1, "empty"),
])
def test_bad_tables_raise_data_error_with_file_line_and_fix(tmp_path, over, file, line, needle):
    src = write_src(tmp_path / "src", **over)
    with pytest.raises(DataError) as ei:
        build_entity_matching(src, tmp_path / "out", EntityMatchingConfig(names=("l", "r")))
    err = ei.value
    assert Path(err.path).name == file and err.line == line and needle in err.message and err.fix
    assert not (tmp_path / "out").exists()               # nothing half-written


def test_missing_files_and_no_matches(tmp_path):
    src = write_src(tmp_path / "src")
    (src / "tableB.csv").unlink()
    with pytest.raises(DataError, match="file not found"):
        build_entity_matching(src, tmp_path / "out")
    src2 = write_src(tmp_path / "src2", train_csv="ltable_id,rtable_id,label\n0,10,0\n",
                     valid_csv="ltable_id,rtable_id,label\n", test_csv="ltable_id,rtable_id,label\n")
    with pytest.raises(DataError, match="no match"):
        build_entity_matching(src2, tmp_path / "out2")
    src3 = tmp_path / "src3"
    src3.mkdir()
    (src3 / "tableA.csv").write_text(TABLE_A)
    (src3 / "tableB.csv").write_text(TABLE_B)
    with pytest.raises(DataError, match="no labelled pair file"):
        build_entity_matching(src3, tmp_path / "out3")


@pytest.mark.slow
def test_real_tables_build(shared_data, tmp_path):
    s = build_entity_matching(shared_data / "walmart-amazon", tmp_path / "wa")
    assert s.names == ("walmart", "amazon")
    assert s.corpus_sizes == {"walmart": 2554, "amazon": 22074}
    assert s.matches == 962
    assert s.queries["dev"] + s.queries["test"] == 852 + 956   # distinct matched records of each side
    assert abs(s.queries["dev"] - s.queries["test"]) <= 4


@pytest.mark.slow
@pytest.mark.parametrize("bench,sizes", [("walmart-amazon", {"walmart": 2554, "amazon": 22074}),
                                         ("amazon-google", {"amazon": 1363, "google": 3226})])
def test_real_tables_default_passage_never_contains_the_title(shared_data, tmp_path, bench, sizes):
    s = build_entity_matching(shared_data / bench, tmp_path / bench)
    assert s.corpus_sizes == sizes                     # full size: no subsampling by default
    queries, passages = _passages_and_queries(tmp_path / bench, s.names)
    own = 0
    for side in s.names:
        qrels = {**load_beir(tmp_path / bench / side, split="dev", load_corpus=False).qrels,
                 **load_beir(tmp_path / bench / side, split="test", load_corpus=False).qrels}
        for q, docs in qrels.items():
            if q.startswith(side + "-"):
                own += sum(queries[q] in passages[side][d] for d in docs)
        assert not any(t.startswith("title:") or "; title:" in t for t in passages[side].values())
    assert own == 0
    assert read_manifest(tmp_path / bench)["passage_contains_query"] is False


def test_missing_query_field_names_the_option(tmp_path):
    src = write_src(tmp_path / "src", tableA_csv="id,name,brand\n0,acme widget,acme\n",
                    tableB_csv="id,name,brand\n10,acme widget pro,acme\n")
    with pytest.raises(DataError, match="chosen by --query-field") as ei:
        build_entity_matching(src, tmp_path / "out", EntityMatchingConfig(names=("l", "r")))
    assert "--query-field NAME" in ei.value.fix and "title" in str(ei.value)
    with pytest.raises(DataError, match="chosen by --passage-fields"):
        build_entity_matching(src, tmp_path / "out2", EntityMatchingConfig(names=("l", "r"), query_field="name",
                                                                           passage_fields=["color"]))


def test_qrels_only_load_logs_no_doc_count(tmp_path, caplog):
    import logging

    from drmix.evaluation.multi import load_multi_qrels

    _, out = build(tmp_path)
    with caplog.at_level(logging.INFO, logger="drmix.data.beir"):
        load_multi_qrels(read_manifest(out)["corpus_dirs"], "dev")
    assert "corpus not read" in caplog.text and " 0 docs" not in caplog.text
