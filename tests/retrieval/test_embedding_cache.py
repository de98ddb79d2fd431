"""drmix.retrieval.embedding_cache through encode_texts: a text is sent to the model once per model and
settings, a changed text or setting or weight is encoded again, shards survive a killed run, the size
bound, the opt-outs and the bad-setting error."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from drmix.errors import ConfigError
from drmix.retrieval.embedding_cache import EmbeddingCache, cache_dir, max_bytes, prune, text_keys
from drmix.retrieval.encode import encode_texts

TEXTS = [f"passage {i} about topic {i % 3} and retrieval" for i in range(10)]


@pytest.fixture
def model(tiny_model_path, tmp_path, monkeypatch):
    """A freshly loaded tiny model whose forward passes count the texts they encode, with its own cache."""
    from drmix.model.encoder import load_encoder

    monkeypatch.setenv("DRMIX_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("DRMIX_EMBEDDING_CACHE", raising=False)
    m = load_encoder(tiny_model_path, device="cpu")
    m.sent = 0
    forward = m.forward

    def counting(features, **kw):
        m.sent += int(features["input_ids"].shape[0])
        return forward(features, **kw)
    m.forward = counting
    return m


def encode(model, texts, **kw):
    return encode_texts(model, texts, batch_size=4, tokenize_num_proc=1, cache_embeddings=True, **kw)


def test_only_texts_not_seen_before_reach_the_model(model):
    plain = encode_texts(model, TEXTS, batch_size=4, tokenize_num_proc=1)
    assert model.sent == 10
    first = encode(model, TEXTS)
    assert model.sent == 20                                         # the first cached call encodes all ten
    again = encode(model, TEXTS)
    assert model.sent == 20                                         # the second none
    np.testing.assert_allclose(first, plain, atol=1e-6)
    assert np.array_equal(again, first)
    edited = TEXTS[:3] + ["passage 3 was edited"] + TEXTS[4:] + ["a new passage", "a new passage"]
    out = encode(model, edited)
    assert model.sent == 22                                         # the edited text and the new one (once)
    assert np.array_equal(out[[0, 1, 2, 4]], first[[0, 1, 2, 4]]) and np.array_equal(out[10], out[11])
    np.testing.assert_allclose(out[3], encode_texts(model, ["passage 3 was edited"])[0], atol=1e-6)


def test_another_setting_or_changed_weights_encode_again(model):
    encode(model, TEXTS)
    for kw in ({"prompt": "query: "}, {"max_length": 5}, {"normalize": True}):
        before = model.sent
        encode(model, TEXTS, **kw)
        assert model.sent == before + 10, kw
        encode(model, TEXTS, **kw)
        assert model.sent == before + 10, kw
    before = model.sent
    with torch.no_grad():
        next(model.parameters()).add_(0.5)                          # trained in place: another model
    encode(model, TEXTS)
    assert model.sent == before + 10


def test_a_killed_run_keeps_its_finished_chunks(model, monkeypatch):
    import drmix.retrieval.encode as enc

    monkeypatch.setattr(enc, "_SORT_CHUNK", 4)                     # chunks of 4: 4 + 4 + 2 texts
    forward = model.forward
    calls = {"n": 0}

    def dies_on_the_third_batch(features, **kw):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return forward(features, **kw)
    model.forward = dies_on_the_third_batch
    with pytest.raises(KeyboardInterrupt):
        encode(model, TEXTS)
    model.forward = forward
    sent = model.sent
    encode(model, TEXTS)
    assert model.sent - sent == 2                                   # only the unfinished chunk's two texts


@pytest.mark.parametrize("bad", [np.zeros((10, 16), dtype=np.uint8),      # an earlier version's 16-byte keys
                                 np.zeros((10, 5), dtype=np.float32),     # another dtype: no [n, 20] uint8 view
                                 np.zeros(7, dtype=np.uint8)])
def test_a_keys_file_of_the_wrong_shape_or_dtype_is_skipped_like_an_unreadable_one(model, bad, caplog):
    import logging

    encode(model, TEXTS)
    (keys_path,) = cache_dir().glob("*/*.keys.npy")
    np.save(keys_path, bad)
    with caplog.at_level(logging.WARNING, logger="drmix.retrieval.embedding_cache"):
        out = encode(model, TEXTS)
    assert model.sent == 20                                         # encoded again, not an error
    np.testing.assert_allclose(out, encode_texts(model, TEXTS), atol=1e-6)
    assert f"embedding cache shard {keys_path} holds {bad.dtype} {list(bad.shape)}, not [n, 20] uint8 keys; " \
           "ignored" in caplog.text


def test_opt_outs_write_nothing(model, monkeypatch):
    encode_texts(model, TEXTS, tokenize_num_proc=1)                 # the API's default: off
    assert not cache_dir().exists()
    monkeypatch.setenv("DRMIX_EMBEDDING_CACHE", "0")
    encode(model, TEXTS)
    assert not cache_dir().exists() and model.sent == 20


def test_size_bound_deletes_least_recently_used_shards(tmp_path):
    import os

    rng = np.random.default_rng(0)
    root = tmp_path / "embedding-cache"
    paths = []
    for i, folder in enumerate(["a", "a", "b"]):
        cache = EmbeddingCache.__new__(EmbeddingCache)
        cache.root, cache.folder, cache.used = root, root / folder, set()
        from drmix.io.atomic import atomic_write_bytes
        from drmix.retrieval.embedding_cache import _npy

        atomic_write_bytes(cache.folder / f"s{i}.emb.npy", _npy(rng.random((10, 4), dtype=np.float32)))
        atomic_write_bytes(cache.folder / f"s{i}.keys.npy", _npy(text_keys([f"t{i}{j}" for j in range(10)])))
        os.utime(cache.folder / f"s{i}.keys.npy", (1000 + i, 1000 + i))
        paths.append(cache.folder / f"s{i}.keys.npy")
    size = sum(p.stat().st_size + p.with_name(p.name.replace("keys", "emb")).stat().st_size for p in paths[:1])
    freed = prune(root, 2 * size + 1, keep={paths[0]})              # room for two: the oldest unkept one goes
    assert freed == size and [p.exists() for p in paths] == [True, False, True]
    assert not (root / "a" / "s1.emb.npy").exists()
    orphan, recent = root / "b" / "old.emb.npy", root / "b" / "new.emb.npy"   # no keys file: never completed
    orphan.write_bytes(b"x")
    recent.write_bytes(b"x")
    os.utime(orphan, (1000, 1000))
    prune(root, 10**9)
    assert not orphan.exists() and recent.exists()                  # a shard being written now is left alone


def test_bad_size_setting_names_the_variable(monkeypatch):
    monkeypatch.setenv("DRMIX_EMBEDDING_CACHE_GB", "lots")
    with pytest.raises(ConfigError, match="DRMIX_EMBEDDING_CACHE_GB") as e:
        max_bytes()
    assert "DRMIX_EMBEDDING_CACHE=0" in str(e.value)
    monkeypatch.setenv("DRMIX_EMBEDDING_CACHE_GB", "0.5")
    assert max_bytes() == 500_000_000


def test_eval_encodes_again_after_the_weights_were_rewritten_keeping_size_and_mtime(tiny_model_path, tmp_path,
                                                                                     monkeypatch):
    """``drmix eval --cache-embeddings`` after model.safetensors was replaced (rsync -t, cp -p) by other weights of
    its size, same inode and mtime: the texts are encoded with the new weights and score as the new weights do."""
    import json
    import shutil

    from conftest import build_tiny_model
    from stat_helpers import rewrite_keeping_stat
    from typer import Typer
    from typer.testing import CliRunner

    from drmix import fingerprint
    from drmix.cli.retrieval import register
    from drmix.data.beir import write_beir

    monkeypatch.setenv("DRMIX_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("DRMIX_EMBEDDING_CACHE", raising=False)
    monkeypatch.setattr(fingerprint, "_MEMO", {})
    monkeypatch.setattr(fingerprint, "SETTLE_NS", 0)       # the digests remembered the moment they are taken
    corpus = {f"d{i}": {"title": "", "text": t} for i, t in enumerate(TEXTS)}
    queries = {f"q{i}": ("about", "and", "topic", "passage", "retrieval", "of")[i] for i in range(6)}  # no answer
    data = write_beir(tmp_path / "toy", corpus, queries, {"test": {f"q{i}": {f"d{i}": 1} for i in range(6)}})
    model = shutil.copytree(tiny_model_path, tmp_path / "model")
    other = build_tiny_model(tmp_path / "other", seed=1)
    app = Typer()
    register(app)

    def evaluate(folder, out, *cache):
        result = CliRunner().invoke(app, ["eval", "--data", str(data), "--model", str(folder), "--output",
                                          str(tmp_path / out), "--tokenize-num-proc", "1", *cache])
        assert result.exit_code == 0, result.output
        return json.loads((tmp_path / out / "eval.json").read_text())["per_query"]["toy"]

    first = evaluate(model, "first", "--cache-embeddings")
    theirs = evaluate(other, "theirs")
    assert first != theirs
    rewrite_keeping_stat(model / "model.safetensors", (other / "model.safetensors").read_bytes())
    assert evaluate(model, "again", "--cache-embeddings") == theirs
    assert len(list((tmp_path / "cache" / "embedding-cache").iterdir())) == 2    # the new weights' own entries
