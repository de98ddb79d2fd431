"""Shared fixtures: a tiny random-weight BERT SentenceTransformer built from a config (no download)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SHARED_DATA = Path(os.environ.get("DRMIX_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def build_tiny_model(folder: Path, *, hidden: int = 32, layers: int = 2, seed: int = 0) -> Path:
    """Save a random-weight 2-layer BERT with mean pooling as a SentenceTransformer folder."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
    from transformers import AutoTokenizer, BertConfig, BertModel

    from drmix.model.encoder import default_model_path

    hf_dir = folder / "hf"
    hf_dir.mkdir(parents=True, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(default_model_path())  # the real 30k WordPiece vocabulary
    tok.save_pretrained(hf_dir)
    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=hidden, num_hidden_layers=layers,
                     num_attention_heads=2, intermediate_size=hidden * 2, max_position_embeddings=128,
                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    BertModel(cfg).save_pretrained(hf_dir)
    tr = Transformer(str(hf_dir), max_seq_length=64)
    model = SentenceTransformer(modules=[tr, Pooling(hidden, "mean"), Normalize()], device="cpu")
    out = folder / "st"
    model.save(str(out))
    return out


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory) -> str:
    """Path of a tiny random BERT SentenceTransformer folder, built once per test session."""
    return str(build_tiny_model(tmp_path_factory.mktemp("tiny-model")))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.exists():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


def pytest_sessionfinish(session, exitstatus):
    """Stop the embedded Milvus Lite servers the tests started while pytest's streams are still open (its own
    exit hook logs each stop to a stream pytest has closed by then)."""
    import sys

    manager = sys.modules.get("milvus_lite.server_manager")
    instance = getattr(manager, "server_manager_instance", None) if manager is not None else None
    release = getattr(instance, "release_all", None)
    if callable(release):
        import logging

        logging.getLogger("milvus_lite").setLevel(logging.WARNING)
        release()
