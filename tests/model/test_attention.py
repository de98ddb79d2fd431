"""Encoders load with PyTorch's scaled-dot-product attention where transformers supports it."""
from __future__ import annotations


def test_bert_encoders_use_sdpa_attention(tiny_model_path):
    from drmix.model.encoder import load_encoder

    model = load_encoder(tiny_model_path)
    assert model[0].auto_model.config._attn_implementation == "sdpa"
