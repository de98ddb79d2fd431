"""Backward through the accelerator and the FSDP/ZeRO saving path (drmix.train.sharding)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from train_helpers import config, make_collections
from tiny_decoder import build_tiny_decoder

import drmix.train.trainer as trainer_mod
from drmix.train.trainer import Trainer


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return str(build_tiny_decoder(tmp_path_factory.mktemp("llama") / "lm", arch="llama"))


def test_backward_goes_through_the_accelerator(tiny_model_path, tmp_path, monkeypatch):
    data = make_collections(tmp_path / "data", n=8)
    trainer = Trainer(config(tiny_model_path, data, tmp_path / "run", max_steps=2, gradient_accumulation_steps=2))
    calls = []
    real = trainer.accelerator.backward

    def spy(loss, **kw):
        calls.append(float(loss.detach()))
        return real(loss, **kw)

    monkeypatch.setattr(trainer.accelerator, "backward", spy)
    trainer.train()
    assert len(calls) == 4  # every micro-step of both steps


def test_sharded_run_saves_the_gathered_full_state_dict(llama, tmp_path, monkeypatch):
    """Under FSDP/ZeRO (sharding_kind says so) the folder is written from accelerator.get_state_dict, loaded
    strictly into a model rebuilt as training built it (LoRA merged); no checkpoint is written."""
    from sentence_transformers import SentenceTransformer

    monkeypatch.setattr(trainer_mod, "sharding_kind", lambda acc: "fsdp")
    data = make_collections(tmp_path / "data", n=8)
    trainer = Trainer(config(llama, data, tmp_path / "run", max_steps=2, save_every=1, query_max_length=64,
                             doc_max_length=64))
    assert trainer.sharding == "fsdp" and trainer.lora_r == 8
    gathered = []
    real = trainer.accelerator.get_state_dict

    def spy(model, unwrap=True):
        state = real(model, unwrap=unwrap)
        gathered.append(sorted(state))
        return state

    monkeypatch.setattr(trainer.accelerator, "get_state_dict", spy)
    result = trainer.train()
    assert gathered and all(k.startswith("model.") for k in gathered[0])
    assert any("lora_A" in k for k in gathered[0])  # the adapters travel in the gathered state
    assert not (tmp_path / "run" / "checkpoints").exists() or not any((tmp_path / "run" / "checkpoints").iterdir())
    trained = trainer.model  # the live (unsaved, unmerged) model: the rebuilt one was saved instead
    trained.eval()
    texts = ["alpha beta gamma", "delta"]
    with torch.no_grad():
        want = trained.encode(texts)
    got = SentenceTransformer(str(result.model_dir), device="cpu").encode(texts)
    np.testing.assert_allclose(got, want, atol=1e-5)
    base = SentenceTransformer(str(result.model_dir), device="cpu")
    assert base[1].pooling_mode == "lasttoken"
