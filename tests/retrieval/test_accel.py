"""Encoding precision (bf16 autocast, CPU int8) and sharded encoding over several devices."""
import numpy as np
import pytest

from drmix.errors import ConfigError
from drmix.retrieval.encode import encode_texts

TEXTS = [f"{w} number {i} of the test texts" for i, w in enumerate("alpha beta gamma delta epsilon zeta eta".split())]


@pytest.fixture(scope="module")
def tiny(tiny_model_path):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(tiny_model_path, device="cpu")


def test_sharded_encoding_equals_one_device(tiny):
    one = encode_texts(tiny, TEXTS, batch_size=2)
    two = encode_texts(tiny, TEXTS, batch_size=2, devices=["cpu", "cpu"])
    np.testing.assert_allclose(two, one, atol=1e-6)
    three = encode_texts(tiny, TEXTS, batch_size=2, devices=["cpu", "cpu", "cpu"])
    np.testing.assert_allclose(three, one, atol=1e-6)


def test_int8_and_bf16_stay_close_to_fp32_and_leave_the_model_alone(tiny):
    ref = encode_texts(tiny, TEXTS, precision="fp32")
    assert np.array_equal(encode_texts(tiny, TEXTS), ref)  # auto is fp32 on CPU
    q = encode_texts(tiny, TEXTS, precision="int8")
    b = encode_texts(tiny, TEXTS, precision="bf16")
    for other in (q, b):
        cos = (other * ref).sum(1) / np.linalg.norm(other, axis=1) / np.linalg.norm(ref, axis=1)
        assert cos.min() > 0.99
        assert not np.array_equal(other, ref)  # the precision did change the arithmetic
    import torch

    assert all(isinstance(m, torch.nn.Linear) for m in tiny.modules() if "Linear" in type(m).__name__)
    assert np.array_equal(encode_texts(tiny, TEXTS, precision="fp32"), ref)
    with pytest.raises(ConfigError, match="unknown precision"):
        encode_texts(tiny, TEXTS, precision="fp8")


def test_bf16_encoding_on_a_cpu_without_bf16_units_says_so_once(tiny, monkeypatch, caplog):
    import logging

    from drmix import device

    monkeypatch.setattr(device, "_warned", set())
    monkeypatch.setattr(device, "cpu_bf16", lambda: {"avx512_bf16": False, "amx": False, "arm_bf16": False,
                                                     "fast": False})
    with caplog.at_level(logging.WARNING, logger="drmix.device"):
        encode_texts(tiny, TEXTS, precision="fp32")
        assert caplog.text == ""
        b = encode_texts(tiny, TEXTS, precision="bf16")
        encode_texts(tiny, TEXTS, precision="bf16")
    assert caplog.text.count("without bf16 matrix units (no AMX, no AVX512-BF16)") == 1
    assert "pass --precision fp32 for fp32" in caplog.text
    assert b.shape == (len(TEXTS), 32)  # encoded as asked, in bf16


def test_prefetched_chunks_keep_the_input_order(tiny, monkeypatch):
    import drmix.retrieval.encode as index

    ref = encode_texts(tiny, TEXTS, batch_size=3)
    monkeypatch.setattr(index, "_SORT_CHUNK", 2)  # several chunks: the next is tokenised on a thread
    np.testing.assert_allclose(encode_texts(tiny, TEXTS, batch_size=3), ref, atol=1e-6)
