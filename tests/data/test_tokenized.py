"""Pre-tokenised collections: ids equal the model's own preprocessing, the cache key covers everything that
changes ids, and the builder draws the same examples from ids as from text."""
from __future__ import annotations

import json

import numpy as np
import pytest

from drmix.data.collections import load_jsonl_collection
from drmix.data.sampling import BatchBuilder
from drmix.data.tokenized import LazyTexts, tokenize_collection, tokenizer_fingerprint

ROWS = [
    {"query": "what is a dense retriever", "positive": ["a retriever that embeds queries and documents " * 6,
                                                         "second relevant passage"],
     "negatives": ["a sparse method such as BM25", "an unrelated cooking recipe", "third negative text"]},
    {"query": "bi-encoder training " * 20, "positive": "contrastive loss with in-batch negatives",
     "negatives": ["hard negative one"]},
    {"query": "short", "positive": "x", "negatives": []},
    {"query": "unicode: naïve café ﬁve", "positive": "Ünïcödé normalisation matters", "negatives": ["z" * 300]},
]


@pytest.fixture()
def model(tiny_model_path):
    from drmix.model.encoder import load_encoder

    return load_encoder(tiny_model_path)


@pytest.fixture()
def coll(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return load_jsonl_collection(path, instruction="Represent the question:")


def preprocess_ids(model, texts, max_length):
    """Per text, the ids ``model.preprocess`` feeds the model (padding removed by the attention mask)."""
    f = model.preprocess(list(texts), processing_kwargs={"text": {"max_length": max_length, "truncation": True}})
    return [ids[m.bool()].tolist() for ids, m in zip(f["input_ids"], f["attention_mask"])]


def test_ids_equal_model_preprocess_for_queries_documents_prompts_and_truncation(model, coll, tmp_path):
    t = tokenize_collection(coll, model, query_max_length=8, doc_max_length=12, query_prompt="query: ",
                            doc_prompt="passage: ", cache_dir=tmp_path / "cache")
    assert len(t) == len(ROWS)
    queries = ["query: " + coll.format_query(r["query"]) for r in ROWS]
    assert [t.query(i).tolist() for i in range(len(ROWS))] == preprocess_ids(model, queries, 8)
    assert max(len(t.query(i)) for i in range(len(ROWS))) == 8  # truncation happened and matches
    for i, r in enumerate(ROWS):
        pos = r["positive"] if isinstance(r["positive"], list) else [r["positive"]]
        assert [t.positives.item(i, j).tolist() for j in range(len(pos))] == preprocess_ids(
            model, ["passage: " + p for p in pos], 12)
        negs = r["negatives"]
        assert int(t.negative_counts(np.array([i]))[0]) == len(negs)
        if negs:
            assert [t.negatives.item(i, j).tolist() for j in range(len(negs))] == preprocess_ids(
                model, ["passage: " + n for n in negs], 12)
    # the instruction is joined as the text path joins it (with a space)
    assert coll.format_query("q") == "Represent the question: q"


def test_cache_is_reused_and_invalidated_by_everything_that_changes_ids(model, coll, tmp_path):
    cache = tmp_path / "cache"
    kw = dict(query_max_length=8, doc_max_length=12, query_prompt="", doc_prompt="", cache_dir=cache)
    first = tokenize_collection(coll, model, **kw)
    again = tokenize_collection(coll, model, **kw)
    assert again.path == first.path and len(list(cache.iterdir())) == 1
    variants = [dict(kw, query_max_length=9), dict(kw, doc_max_length=13), dict(kw, query_prompt="q: "),
                dict(kw, doc_prompt="d: ")]
    paths = {first.path} | {tokenize_collection(coll, model, **v).path for v in variants}
    assert len(paths) == 5
    coll.instruction = "Other instruction:"
    paths.add(tokenize_collection(coll, model, **kw).path)
    assert len(paths) == 6
    # content: one changed character in the file gives a new cache
    src = coll.source
    text = open(src).read().replace("cooking", "baking")
    open(src, "w").write(text)
    changed = load_jsonl_collection(src, instruction="Other instruction:")
    paths.add(tokenize_collection(changed, model, **kw).path)
    assert len(paths) == 7
    # tokenizer: one vocabulary entry changed gives another fingerprint
    fp = tokenizer_fingerprint(model)
    model.tokenizer.add_tokens(["brandnewtoken"])
    assert tokenizer_fingerprint(model) != fp
    assert tokenize_collection(changed, model, **kw).path not in paths


def test_no_stored_ids_for_left_padding_tokenizers(model, coll, tmp_path):
    model.tokenizer.padding_side = "left"
    assert tokenizer_fingerprint(model) is None
    assert tokenize_collection(coll, model, query_max_length=8, doc_max_length=8, cache_dir=tmp_path) is None


def test_builder_draws_the_same_examples_from_ids_as_from_text(model, coll, tmp_path):
    t = tokenize_collection(coll, model, query_max_length=64, doc_max_length=64, cache_dir=tmp_path)
    text = BatchBuilder([coll], 2, seed=3)
    ids = BatchBuilder([coll], 2, seed=3, tokens=[t])
    for _ in range(5):
        pairs = [(0, int(r)) for r in np.random.default_rng(len(_ * "x")).integers(0, len(ROWS), size=6)]
        a, b = text.build(pairs), ids.build(pairs)
        assert isinstance(b.queries, LazyTexts) and a.tokens is None
        assert list(b.queries) == a.queries and list(b.positives) == a.positives and list(b.negatives) == a.negatives
        assert [q.tolist() for q in b.tokens.queries] == preprocess_ids(model, a.queries, 64)
        assert [p.tolist() for p in b.tokens.positives] == preprocess_ids(model, a.positives, 64)
        for negs_ids, negs in zip(b.tokens.negatives, a.negatives):
            assert [n.tolist() for n in negs_ids] == (preprocess_ids(model, negs, 64) if negs else [])
        assert text.state_dict() == ids.state_dict()
    half = b.slice(1, 4)
    assert len(half.queries) == 3 and list(half.queries) == a.queries[1:4]
    assert [q.tolist() for q in half.tokens.queries] == [q.tolist() for q in b.tokens.queries[1:4]]


def test_lazy_texts_read_only_when_used():
    calls = []
    lazy = LazyTexts(3, lambda: calls.append(1) or ["a", "b", "c"])
    part = lazy[1:3]
    assert len(lazy) == 3 and len(part) == 2 and not calls
    assert list(part) == ["b", "c"] and lazy[0] == "a" and calls == [1]


def test_ragged_is_the_one_view_of_list_and_list_of_list_columns():
    import pyarrow as pa

    from drmix.data.tokenized import Ragged

    ids = pa.chunked_array([pa.array([[1, 2], [3]], type=pa.list_(pa.int32())), pa.array([[], [4, 5, 6]],
                                                                                         type=pa.list_(pa.int32()))])
    r = Ragged.of(ids)
    assert len(r) == 4 and r.lengths.tolist() == [2, 1, 0, 3] and r.length(3) == 3
    assert [x.tolist() for x in r.rows(0, 4)] == [[1, 2], [3], [], [4, 5, 6]] and r[3].tolist() == [4, 5, 6]
    docs = pa.array([[[7], [8, 9]], [], [[10, 11, 12]]], type=pa.list_(pa.list_(pa.int32()))).slice(1)
    d = Ragged.of(docs)                               # a slice: offsets start past 0 in the buffer
    assert len(d) == 2 and d.counts(np.array([0, 1])).tolist() == [0, 1]
    assert d.item(1, 0).tolist() == [10, 11, 12] and d.values.values.dtype == np.int32


def test_a_collections_document_prompt_follows_the_global_one_in_ids_texts_and_cache_key(model, coll, tmp_path):
    import hashlib

    from drmix.data.tokenized import FORMAT_VERSION, cache_key

    kw = dict(query_max_length=64, doc_max_length=64, query_prompt="", doc_prompt="d: ", cache_dir=tmp_path)
    plain = tokenize_collection(coll, model, **kw)
    coll.document_prompt = "passage: "
    t = tokenize_collection(coll, model, **kw)
    assert t.path != plain.path
    assert [t.positives.item(0, j).tolist() for j in range(2)] == preprocess_ids(
        model, ["d: passage: " + p for p in ROWS[0]["positive"]], 64)
    assert [t.negatives.item(1, 0).tolist()] == preprocess_ids(model, ["d: passage: hard negative one"], 64)
    assert t.query(2).tolist() == preprocess_ids(model, [coll.format_query("short")], 64)[0]   # queries untouched
    # the text path prefixes the same way (the global prompt is the featurizer's), so both draw the same texts
    text, ids = BatchBuilder([coll], 2, seed=3), BatchBuilder([coll], 2, seed=3, tokens=[t])
    a, b = text.build([(0, 0), (0, 1), (0, 2)]), ids.build([(0, 0), (0, 1), (0, 2)])
    assert a.positives[2] == "passage: x" and a.negatives[1] == ["passage: hard negative one"]
    assert list(b.positives) == a.positives and list(b.negatives) == a.negatives
    assert [p.tolist() for p in b.tokens.positives] == preprocess_ids(model, ["d: " + p for p in a.positives], 64)
    # no document prompt: the key of the ids stored before the option existed
    old = {"version": FORMAT_VERSION, "content": "c", "tokenizer": "t", "q_len": 1, "d_len": 2, "q_prompt": "",
           "d_prompt": "", "instruction": None}
    digest = hashlib.blake2b(json.dumps(old, sort_keys=True).encode(), digest_size=20).hexdigest()
    args = dict(query_max_length=1, doc_max_length=2, query_prompt="", doc_prompt="", instruction=None)
    assert cache_key("c", "t", **args) == cache_key("c", "t", document_prompt=None, **args) == digest
    assert cache_key("c", "t", document_prompt="passage: ", **args) != digest
