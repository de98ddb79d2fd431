"""LoRA through peft: only adapters train; the output is a merged SentenceTransformer folder plus the adapter."""
import json

import numpy as np
import torch
from train_helpers import config, make_collections

from drmix.api import default_listeners
from drmix.train.trainer import Trainer


def test_lora_trains_adapters_and_saves_a_loadable_merged_model(tiny_model_path, tmp_path):
    from sentence_transformers import SentenceTransformer

    data = make_collections(tmp_path / "data", n=16)
    cfg = config(tiny_model_path, data, tmp_path / "run", max_steps=3, lora_r=4, lora_alpha=8,
                 lora_targets=["query", "value"])
    trainer = Trainer(cfg, listeners=default_listeners(cfg))   # with the card (drmix.api.train's listeners)
    trainable = [n for n, p in trainer.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    result = trainer.train()
    adapter = json.loads((tmp_path / "run" / "adapter" / "adapter_config.json").read_text())
    assert adapter["r"] == 4 and adapter["lora_alpha"] == 8 and sorted(adapter["target_modules"]) == ["query", "value"]

    merged = SentenceTransformer(str(result.model_dir), device="cpu")
    base = SentenceTransformer(tiny_model_path, device="cpu")
    m, b = dict(merged.named_parameters()), dict(base.named_parameters())
    assert m.keys() == b.keys()  # plain BERT weights, no lora_ names left
    q = next(n for n in m if n.endswith("attention.self.query.weight"))
    k = next(n for n in m if n.endswith("attention.self.key.weight"))
    assert not torch.equal(m[q], b[q])  # the adapted layer carries the merged update
    assert torch.equal(m[k], b[k])  # a layer without an adapter is unchanged
    texts = ["alpha beta", "gamma delta epsilon"]
    np.testing.assert_allclose(merged.encode(texts), trainer.model.encode(texts), atol=1e-5)
    # the merged model's card says it is a LoRA merge and cites LoRA; the last checkpoint loads as a model
    card = (result.model_dir / "README.md").read_text(encoding="utf-8")
    assert "LoRA-merged" in card and "- `lora_r`: 4" in card and "eprint = {2106.09685}" in card
    ckpt = SentenceTransformer(str(tmp_path / "run" / "checkpoints" / "step-3"), device="cpu")
    np.testing.assert_allclose(ckpt.encode(texts), merged.encode(texts), atol=1e-5)
