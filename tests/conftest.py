"""Shared fixtures: a tiny random-weight BERT SentenceTransformer built from a config (no download)."""
from __future__ import annotations

import contextlib
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


@pytest.fixture(scope="session")
def milvus_server(tmp_path_factory):
    """A Milvus 2.3 standalone server (the ``milvus`` package: ``pip install -e '.[test]'``), started once per
    test session on free ports (every port it opens: proxy, coordinators, nodes, metrics, embedded etcd), its data
    under the session's temporary folder; stopped and removed at the end. Skipped, saying why, only where the
    package is missing or its server cannot start here."""
    from milvus_helpers import local_milvus

    with local_milvus(tmp_path_factory.mktemp("milvus-server")) as server:
        yield server


@contextlib.contextmanager
def milvus_location(kind: str, request, folder: Path):
    """A Milvus location to build collections in: ``lite``, a Milvus Lite folder ``folder/index.db``; ``server``,
    a database of its own on the session's server (``http://127.0.0.1:PORT/DB``), dropped with its collections at
    the end, so the tests' collection names never meet."""
    pytest.importorskip("pymilvus")
    if kind == "lite":
        pytest.importorskip("milvus_lite")
        yield str(folder / "index.db")
        return
    import uuid

    from pymilvus import MilvusClient

    server = request.getfixturevalue("milvus_server")
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = MilvusClient(uri=server.uri, token=os.environ.get("MILVUS_TOKEN", ""))
    admin.create_database(name)
    try:
        yield f"{server.uri}/{name}"
    finally:
        mine = MilvusClient(uri=f"{server.uri}/{name}", token=os.environ.get("MILVUS_TOKEN", ""))
        for collection in mine.list_collections():
            mine.drop_collection(collection)
        admin.drop_database(name)


@pytest.fixture(params=["lite", "server"])
def milvus_target(request, tmp_path):
    """A Milvus location for one test, once on Milvus Lite and once on the session's Milvus server."""
    with milvus_location(request.param, request, tmp_path) as where:
        yield where


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
