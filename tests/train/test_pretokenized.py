"""Training and encoding from stored token ids give exactly what training and encoding from text give."""
from __future__ import annotations

import numpy as np
import torch
from train_helpers import config, make_collections, params

from drmix.train.trainer import Trainer


def test_run_from_stored_ids_gives_the_same_weights_as_from_text(tiny_model_path, tmp_path, monkeypatch):
    monkeypatch.setenv("DRMIX_CACHE", str(tmp_path / "cache"))
    data = make_collections(tmp_path / "data")
    runs = {}
    for pre in (False, True):
        t = Trainer(config(tiny_model_path, data, tmp_path / f"out-{pre}", max_steps=5, num_negatives=1,
                           query_max_length=6, doc_max_length=9, pretokenize=pre))
        assert (t.builder.tokens is not None) is pre
        t.train()
        runs[pre] = params(t.model)
    assert torch.equal(runs[False], runs[True])
    assert len(list((tmp_path / "cache" / "tokenized").iterdir())) == 2  # one per collection
    # a second run reuses the stored ids (no new cache folder) and still matches
    t = Trainer(config(tiny_model_path, data, tmp_path / "out-again", max_steps=5, num_negatives=1,
                       query_max_length=6, doc_max_length=9))
    t.train()
    assert torch.equal(runs[False], params(t.model))
    assert len(list((tmp_path / "cache" / "tokenized").iterdir())) == 2


def test_stored_ids_that_differ_from_the_tokenizer_are_refused(tiny_model_path, caplog):
    from drmix.model.encoder import load_encoder
    from drmix.train.inputs import Featurizer

    model = load_encoder(tiny_model_path)
    f = Featurizer(model, pad_multiple=1)
    texts = ["alpha beta gamma", "delta"]
    wrong = [np.array([101, 7, 102], dtype=np.int32), np.array([101, 8, 102], dtype=np.int32)]
    first = f.from_ids(texts, wrong, 16)
    again = f.from_ids(texts, wrong, 16)
    reference = model.preprocess(texts)
    for feats in (first, again):
        assert torch.equal(feats["input_ids"], reference["input_ids"])
    assert "differ" in caplog.text


def test_encoder_from_cached_corpus_ids_equals_fresh_tokenisation(tiny_model_path, tmp_path, monkeypatch):
    from drmix.data.tokenized import corpus_ids
    from drmix.model.encoder import load_encoder
    from drmix.retrieval.encode import encode_texts

    monkeypatch.setenv("DRMIX_CACHE", str(tmp_path / "cache"))
    model = load_encoder(tiny_model_path)
    rng = np.random.default_rng(0)
    words = "retrieval dense sparse query passage corpus token model batch pad".split()
    texts = [" ".join(rng.choice(words, size=int(rng.integers(1, 40)))) for _ in range(70)]
    fresh = encode_texts(model, texts, batch_size=16, prompt="passage: ", max_length=20)
    cached = encode_texts(model, texts, batch_size=16, prompt="passage: ", max_length=20, cache_ids=True)
    again = encode_texts(model, texts, batch_size=16, prompt="passage: ", max_length=20, cache_ids=True)
    np.testing.assert_array_equal(fresh, cached)
    np.testing.assert_array_equal(fresh, again)
    assert len(list((tmp_path / "cache" / "tokenized").iterdir())) == 1
    stored = corpus_ids(model, texts, prompt="passage: ", max_length=20)
    ref = model.preprocess(["passage: " + t for t in texts[:5]],
                           processing_kwargs={"text": {"max_length": 20, "truncation": True}})
    for i in range(5):
        assert stored[i].tolist() == ref["input_ids"][i][ref["attention_mask"][i].bool()].tolist()
    # another prompt or length is another cache
    corpus_ids(model, texts, prompt="", max_length=20)
    corpus_ids(model, texts, prompt="passage: ", max_length=21)
    corpus_ids(model, texts[:-1], prompt="passage: ", max_length=20)
    assert len(list((tmp_path / "cache" / "tokenized").iterdir())) == 4
