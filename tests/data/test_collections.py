"""Loading collections, and every bad-input path naming file, line and fix."""
import json

import numpy as np
import pytest

from drmix.data.collections import apply_instruction, load_collections
from drmix.errors import ConfigError, DataError
from drmix.mixture.static import file_mixture_weights, initial_weights


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_jsonl_positive_string_or_list_and_optional_negatives(tmp_path):
    f = write_jsonl(tmp_path / "qa.jsonl", [
        {"query": "q1", "positive": "p1"},
        {"query": "q2", "positive": ["p2a", "p2b"], "negatives": ["n1", "n2"]},
    ])
    [c] = load_collections([str(f)])
    assert c.name == "qa" and len(c) == 2
    assert c.dataset["positives"] == [["p1"], ["p2a", "p2b"]]
    assert c.dataset["negatives"] == [[], ["n1", "n2"]]
    assert c.columns == ("query", "positive", "negatives")  # what the rows hold, for the model card
    assert load_collections([str(f)])[0].columns == ("query", "positive", "negatives")  # from the cached conversion


def test_a_collection_names_the_columns_it_was_read_from_converted_or_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("DRMIX_CACHE", str(tmp_path / "cache"))
    f = tmp_path / "st.csv"
    f.write_text("anchor,positive,negative\nq1,p1,n1\nq2,p2,n2\n", encoding="utf-8")
    for _ in range(2):  # converted, then from the conversion cache
        [c] = load_collections([str(f)])
        assert c.columns == ("anchor", "positive", "negative") and c.dataset["negatives"] == [["n1"], ["n2"]]


def test_directory_gives_one_collection_per_file_sorted(tmp_path):
    write_jsonl(tmp_path / "b.jsonl", [{"query": "q", "positive": "p"}])
    write_jsonl(tmp_path / "a.jsonl", [{"query": "q", "positive": "p"}] * 3)
    cols = load_collections([str(tmp_path)])
    assert [(c.name, len(c)) for c in cols] == [("a", 3), ("b", 1)]


def test_yaml_list_with_names_instructions_weights_and_relative_paths(tmp_path):
    write_jsonl(tmp_path / "x.jsonl", [{"query": "what is up", "positive": "p"}])
    (tmp_path / "mix.yaml").write_text(
        "- {path: x.jsonl, name: first, instruction: 'Represent the question:', weight: 2}\n"
        "- path: x.jsonl\n  name: second\n", encoding="utf-8")
    cols = load_collections([str(tmp_path / "mix.yaml")])
    assert [c.name for c in cols] == ["first", "second"]
    assert cols[0].weight == 2 and cols[1].weight is None
    assert cols[0].format_query("what is up") == "Represent the question: what is up"
    assert cols[1].format_query("what is up") == "what is up"


def test_document_prompt_per_collection_from_a_yaml_list_or_a_spec(tmp_path):
    from drmix.data.spec import CollectionSpec

    write_jsonl(tmp_path / "x.jsonl", [{"query": "q", "positive": "p", "negatives": ["n"]}])
    (tmp_path / "mix.yaml").write_text(
        "- {path: x.jsonl, name: e5, document_prompt: 'passage: '}\n"
        "- {path: x.jsonl, name: bare}\n", encoding="utf-8")
    e5, bare = load_collections([str(tmp_path / "mix.yaml")])
    assert (e5.document_prompt, bare.document_prompt) == ("passage: ", None)
    assert e5.format_documents(["p", "n"]) == ["passage: p", "passage: n"]      # prepended as is, no space added
    assert bare.format_documents(["p"]) == ["p"] and bare.format_documents(None) == []
    # a spec naming the list gives its prompt to the items that set none; an item's own one stays
    e5, bare = load_collections([CollectionSpec(path=str(tmp_path / "mix.yaml"), document_prompt="doc: ")])
    assert (e5.document_prompt, bare.document_prompt) == ("passage: ", "doc: ")
    [one] = load_collections([CollectionSpec(path=str(tmp_path / "x.jsonl"), document_prompt="passage: ")])
    assert one.document_prompt == "passage: "


def test_instruction_separator():
    assert apply_instruction("query: ", "x") == "query: x"
    assert apply_instruction("Find docs:", "x") == "Find docs: x"
    assert apply_instruction(None, "x") == "x"


@pytest.mark.parametrize("content, line, words", [
    ('{"query": "a", "positive": "b"}\n{"query": "a", "positive": "b"\n', 2, "invalid JSON"),
    ('{"query": "a", "positive": "b"}\n\n{"positive": "b"}\n', 3, '"query"'),
    ('{"query": "a"}\n', 1, '"positive"'),
    ('{"query": "a", "positive": ""}\n', 1, "empty"),
    ('{"query": "a", "positive": "b", "negatives": [1, 2]}\n', 1, '"negatives"'),
    ('["query", "positive"]\n', 1, "JSON object"),
])
def test_malformed_jsonl_names_file_and_line(tmp_path, content, line, words):
    f = tmp_path / "bad.jsonl"
    f.write_text(content, encoding="utf-8")
    with pytest.raises(DataError) as e:
        load_collections([str(f)])
    assert e.value.path == str(f) and e.value.line == line
    assert words in e.value.message and e.value.fix


def test_non_utf8_line(tmp_path):
    f = tmp_path / "latin.jsonl"
    f.write_bytes(b'{"query": "a", "positive": "b"}\n{"query": "caf\xe9", "positive": "b"}\n')
    with pytest.raises(DataError) as e:
        load_collections([str(f)])
    assert e.value.line == 2 and "UTF-8" in e.value.message


def test_empty_collection_and_missing_path(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n\n", encoding="utf-8")
    with pytest.raises(DataError, match="empty"):
        load_collections([str(tmp_path / "empty.jsonl")])
    with pytest.raises(DataError, match="does not exist"):
        load_collections([str(tmp_path / "nope.jsonl")])
    with pytest.raises(DataError, match="no training data"):
        load_collections([])


def test_duplicate_names_are_rejected(tmp_path):
    f = write_jsonl(tmp_path / "x.jsonl", [{"query": "q", "positive": "p"}])
    with pytest.raises(DataError, match="two collections"):
        load_collections([str(f), str(f)])


def test_max_size_caps_with_a_seeded_sample(tmp_path):
    f = write_jsonl(tmp_path / "x.jsonl", [{"query": f"q{i}", "positive": "p"} for i in range(50)])
    a = load_collections([str(f)], max_size=10, seed=1)[0].dataset["query"]
    b = load_collections([str(f)], max_size=10, seed=1)[0].dataset["query"]
    assert len(a) == 10 and a == b


def test_beir_directory_train_qrels_become_pairs(tmp_path):
    root = tmp_path / "tiny-beir"
    (root / "qrels").mkdir(parents=True)
    write_jsonl(root / "corpus.jsonl", [{"_id": "d1", "title": "T1", "text": "one"},
                                        {"_id": "d2", "title": "", "text": "two"}])
    write_jsonl(root / "queries.jsonl", [{"_id": "q1", "text": "first?"}, {"_id": "q2", "text": "second?"}])
    (root / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\r\nq1\td1\t1\r\nq1\td2\t1\r\nq2\td2\t0\r\n")
    [c] = load_collections([str(root)])
    assert c.name == "tiny-beir"
    assert c.dataset["query"] == ["first?"]  # q2 has no relevant document
    assert c.dataset["positives"] == [["T1 one", "two"]]


def test_beir_qrels_naming_unknown_document(tmp_path):
    root = tmp_path / "b"
    (root / "qrels").mkdir(parents=True)
    write_jsonl(root / "corpus.jsonl", [{"_id": "d1", "title": "", "text": "one"}])
    write_jsonl(root / "queries.jsonl", [{"_id": "q1", "text": "first?"}])
    (root / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td9\t1\n")
    with pytest.raises(DataError) as e:
        load_collections([str(root)])
    assert e.value.line == 3 and "d9" in e.value.message


def test_initial_weights_by_hand():
    sizes = [100, 400, 900]
    assert initial_weights(sizes, "uniform").tolist() == pytest.approx([1 / 3] * 3)
    assert initial_weights(sizes, "size").tolist() == pytest.approx([100 / 1400, 400 / 1400, 900 / 1400])
    # tau = 2: sqrt sizes 10, 20, 30 -> 1/6, 2/6, 3/6
    assert initial_weights(sizes, "temperature", temperature=2.0).tolist() == pytest.approx([1 / 6, 2 / 6, 3 / 6])


def test_weights_file_plain_mapping_and_strategy_output(tmp_path):
    (tmp_path / "w.json").write_text(json.dumps({"a": 1, "b": 3, "c": 0}))
    assert file_mixture_weights(tmp_path / "w.json", ["a", "b", "c"]).tolist() == [0.25, 0.75, 0.0]
    (tmp_path / "s.json").write_text(json.dumps({"collections": ["a", "b"], "weights": [0.2, 0.8],
                                                 "final": {"a": 0.5, "b": 0.5}}))
    assert np.allclose(file_mixture_weights(tmp_path / "s.json", ["a", "b"]), [0.2, 0.8])  # "weights" is the output
    with pytest.raises(ConfigError, match="no weight for training collection"):
        file_mixture_weights(tmp_path / "w.json", ["a", "zzz"])
