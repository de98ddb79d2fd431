"""drmix.retrieval.encode: length-sorted encoding in input order, the tokenise-once shortcut checked against
``preprocess``, prompts, truncation, normalisation and the model's training mode."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from drmix.errors import ConfigError
from drmix.model.features import TextBatcher
from drmix.retrieval.encode import embedding_dim, encode_texts, length_order, token_lengths

TEXTS = ["a short one", "a much longer text that has quite a few more words in it than the others", "mid size text",
         "x", "another fairly long sentence about retrieval and indexes"]


@pytest.fixture(scope="module")
def tiny(tiny_model_path):
    from drmix.model.encoder import load_encoder

    return load_encoder(tiny_model_path, device="cpu")


@pytest.fixture(scope="module")
def minilm():
    """The real MiniLM (loads in well under a second): the tiny random model maps all texts to nearly
    the same vector, so tests that must tell texts apart use this one."""
    from drmix.model.encoder import load_encoder

    return load_encoder(None, device="cpu")


def test_length_order_is_longest_first_and_stable():
    assert length_order(np.array([3, 5, 5, 1])).tolist() == [1, 2, 0, 3]


def testtoken_lengths_count_prompt_special_tokens_and_truncation(tiny):
    # [CLS] hello world [SEP] = 4; the prompt "query:" adds "query" and ":" = 6; max_length caps.
    assert token_lengths(tiny, ["hello world"], "", None).tolist() == [4]
    assert token_lengths(tiny, ["hello world"], "query: ", None).tolist() == [6]
    assert token_lengths(tiny, ["hello world"], "query: ", 3).tolist() == [3]


def test_encode_texts_restores_input_order(minilm):
    batched = encode_texts(minilm, TEXTS, batch_size=2)  # token-sorted batches: (1, 4), (0, 2), (3)
    assert batched.dtype == np.float32 and batched.shape == (5, 384)
    reference = minilm.encode(TEXTS, batch_size=5, convert_to_numpy=True)  # one batch, input order
    np.testing.assert_allclose(batched, reference, atol=1e-5)
    assert np.abs(batched[0] - batched[1]).max() > 0.05  # the texts really do embed differently


def test_pretokenised_batches_match_preprocess_or_fall_back(minilm):
    texts = TEXTS * 3
    batcher = TextBatcher(minilm, "query: ", 16)
    ids = batcher.tokenize(texts[:4])
    assert [len(x) for x in ids] == token_lengths(minilm, texts[:4], "query: ", 16).tolist()
    reference = minilm.preprocess(texts[:4], prompt="query: ",
                                  processing_kwargs={"text": {"max_length": 16, "truncation": True}})
    first = batcher.features(texts[:4], ids)
    assert batcher.fast is True and first.keys() == reference.keys()
    padded = batcher.features(texts[:4], ids)  # built by hand now
    assert padded.keys() == reference.keys() and padded["prompt_length"] == reference["prompt_length"]
    for key in ("input_ids", "attention_mask", "token_type_ids"):
        assert torch.equal(padded[key], reference[key])
    expected = minilm.encode(texts, batch_size=4, prompt="query: ")
    module = minilm[0]
    saved = module.processing_kwargs
    # preprocess now pads to a multiple of 8 tokens: the shortcut must notice and step aside
    module.processing_kwargs = {**saved, "text": {**saved.get("text", {}), "pad_to_multiple_of": 8}}
    try:
        odd = ["one two three", "four five"]  # 5 and 4 tokens: preprocess pads to 8, the shortcut to 5
        fallback = TextBatcher(minilm, "", None)
        assert fallback.features(odd, fallback.tokenize(odd))["input_ids"].shape == (2, 8)
        assert fallback.fast is False
        np.testing.assert_allclose(encode_texts(minilm, texts, batch_size=4, prompt="query: "), expected, atol=1e-5)
    finally:
        module.processing_kwargs = saved


def test_encode_texts_prompt_max_length_and_normalize(minilm, tiny):
    prompted = encode_texts(minilm, ["hello world"], prompt="query: ")
    np.testing.assert_allclose(prompted, encode_texts(minilm, ["query: hello world"]), atol=1e-5)
    assert not np.allclose(prompted, encode_texts(minilm, ["hello world"]), atol=1e-2)
    long_text = "alpha beta gamma " + "delta " * 40
    capped = encode_texts(minilm, [long_text], max_length=5)  # [CLS] + 3 words + [SEP]
    np.testing.assert_allclose(capped, encode_texts(minilm, ["alpha beta gamma"]), atol=1e-5)
    assert not np.allclose(capped, encode_texts(minilm, [long_text]), atol=1e-2)
    raw = encode_texts(tiny, TEXTS, normalize=True)
    np.testing.assert_allclose(np.linalg.norm(raw, axis=1), 1.0, atol=1e-5)
    assert encode_texts(tiny, []).shape == (0, 32)


def test_encode_texts_restores_training_mode(tiny):
    tiny.train()
    encode_texts(tiny, ["a"])
    assert tiny.training
    tiny.eval()
    encode_texts(tiny, ["a"])
    assert not tiny.training
    with pytest.raises(ConfigError):
        encode_texts(tiny, ["a"], batch_size=0)


def test_chunks_keep_the_input_order(minilm, monkeypatch):
    """Several length-sorted chunks (the next tokenised on a thread) give the rows of one chunk."""
    import drmix.retrieval.encode as encode

    whole = encode_texts(minilm, TEXTS * 2, batch_size=3)
    monkeypatch.setattr(encode, "_SORT_CHUNK", 4)
    np.testing.assert_allclose(encode_texts(minilm, TEXTS * 2, batch_size=3), whole, atol=1e-5)
    assert embedding_dim(minilm) == 384


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of 7 texts and worker processes from the first text, so a few texts cross every path."""
    import drmix.retrieval.encode as enc

    monkeypatch.setattr(enc, "_SORT_CHUNK", 7)
    monkeypatch.setattr(enc, "_PROC_MIN_TEXTS", 0)


def test_worker_processes_give_the_in_process_embeddings_bit_for_bit(minilm, small_chunks):
    texts = [f"{i}: " + TEXTS[i % 5] * (1 + i % 9) for i in range(23)]  # 4 chunks; some cut at max_length 8
    one = encode_texts(minilm, texts, batch_size=4, max_length=8, tokenize_num_proc=1)
    two = encode_texts(minilm, texts, batch_size=4, max_length=8, tokenize_num_proc=2)
    assert one.dtype == two.dtype == np.float32
    assert np.abs(one - two).max() == 0.0
    cos = (one * two).sum(1) / np.linalg.norm(one, axis=1) / np.linalg.norm(two, axis=1)
    assert cos.min() >= 0.9999


def test_encode_defaults_set_the_workers_of_calls_that_leave_them_unset(tiny, small_chunks, monkeypatch):
    import drmix.retrieval.encode as enc

    seen = []
    real = enc._ChunkTokens.__init__

    def spy(self, *args, **kwargs):
        real(self, *args, **kwargs)
        seen.append(self.num_proc)
    monkeypatch.setattr(enc._ChunkTokens, "__init__", spy)
    with enc.encode_defaults(tokenize_num_proc=1):
        encode_texts(tiny, TEXTS)
        encode_texts(tiny, TEXTS, tokenize_num_proc=2)             # an explicit value wins
        with enc.encode_defaults(cache_embeddings=False):           # unset here: the outer default stays
            encode_texts(tiny, TEXTS)
    assert seen == [1, 2, 1]
    assert enc._DEFAULTS.get() == enc.EncodeDefaults()
    encode_texts(tiny, TEXTS)                                       # no default set: every available core
    from drmix.retrieval.tokenize_pool import available_cpus

    assert seen[-1] == available_cpus()


def test_progress_bar_counts_passages(tiny, monkeypatch):
    import tqdm.auto

    bars = []

    class Bar:
        def __init__(self, **kwargs):
            self.kwargs, self.n = kwargs, 0
            bars.append(self)

        def update(self, k):
            self.n += k

        def close(self):
            pass
    monkeypatch.setattr(tqdm.auto, "tqdm", Bar)
    encode_texts(tiny, TEXTS * 3, batch_size=4, show_progress=True)
    [bar] = bars
    assert bar.kwargs["total"] == 15 and bar.kwargs["unit"] == "passage" and bar.n == 15
    assert bar.kwargs["disable"] is False


def test_a_dead_tokenising_worker_falls_back_to_the_process(tiny, small_chunks, monkeypatch):
    from concurrent.futures.process import BrokenProcessPool

    from drmix.retrieval.tokenize_pool import TokenizePool

    def broken(self, handle):
        raise BrokenProcessPool("killed")
    expected = encode_texts(tiny, TEXTS * 3, tokenize_num_proc=1)
    monkeypatch.setattr(TokenizePool, "result", broken)
    assert np.array_equal(encode_texts(tiny, TEXTS * 3, tokenize_num_proc=2), expected)
