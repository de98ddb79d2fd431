"""``drmix prune`` end to end (drmix.recipes.prune): the saved folder loads as a bidirectional, mean-pooled
SentenceTransformer with DRAMA's query prompt and its own model card; --causal keeps earlier tokens blind."""
from __future__ import annotations

import json

import pytest
import torch
import yaml
from tiny_llama import build_tiny_llama

from drmix.errors import ModelError
from drmix.recipes.prune import load_source_lm, prune_to_sentence_transformer


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    return build_tiny_llama(tmp_path_factory.mktemp("llama") / "lm", layers=4)


def _states(st_model, ids, mask=None):
    auto = st_model[0].auto_model
    with torch.inference_mode():
        return auto(input_ids=ids, attention_mask=mask).last_hidden_state


def test_saved_folder_loads_as_a_bidirectional_mean_pooled_encoder(tiny_llama, tmp_path):
    from sentence_transformers import SentenceTransformer

    info = prune_to_sentence_transformer(str(tiny_llama), tmp_path / "st", layers="0,3", max_seq_length=32)
    assert info["layers"] == [0, 3] and info["bidirectional"]
    cfg = json.loads((tmp_path / "st" / "config.json").read_text())
    assert cfg["model_type"] == "gemma" and cfg["use_bidirectional_attention"] and cfg["is_causal"] is False
    assert "auto_map" not in cfg                                    # no remote code
    card = (tmp_path / "st" / "README.md").read_text(encoding="utf-8")  # the pruned model's own card
    meta = yaml.safe_load(card.split("---")[1])
    assert "pruned" in meta["tags"] and "Base model: Unknown" not in card
    assert "layers kept: [0, 3] of 4" in card and "eprint = {2502.18460}" in card  # DRAMA
    model = SentenceTransformer(str(tmp_path / "st"), device="cpu")
    assert model.prompts["query"] == "Query: "
    assert model[1].get_config_dict()["pooling_mode"] == "mean"
    assert len(model[0].auto_model.layers) == 2
    ids = torch.tensor([[101, 2054, 2003, 1037, 4937, 102]])
    later = ids.clone()
    later[0, 4] = 3899                                              # change a later token only
    a, b = _states(model, ids), _states(model, later)
    assert (a[0, 1] - b[0, 1]).abs().max() > 1e-4                  # an earlier token sees it: bidirectional
    # with a padding mask the same holds, and padding itself is never attended to
    mask = torch.ones_like(ids)
    assert (_states(model, ids, mask)[0, 1] - _states(model, later, mask)[0, 1]).abs().max() > 1e-4
    padded = torch.cat([ids, torch.zeros(1, 2, dtype=torch.long)], dim=1)
    pmask = torch.cat([mask, torch.zeros(1, 2, dtype=torch.long)], dim=1)
    assert torch.allclose(_states(model, padded, pmask)[0, :6], _states(model, ids, mask)[0], atol=1e-5)


def test_causal_option_keeps_earlier_tokens_blind(tiny_llama, tmp_path):
    from sentence_transformers import SentenceTransformer

    prune_to_sentence_transformer(str(tiny_llama), tmp_path / "causal", keep_layers=2, bidirectional=False)
    model = SentenceTransformer(str(tmp_path / "causal"), device="cpu")
    ids = torch.tensor([[101, 2054, 2003, 1037, 4937, 102]])
    later = ids.clone()
    later[0, 4] = 3899
    assert torch.allclose(_states(model, ids)[0, :4], _states(model, later)[0, :4], atol=1e-6)


def test_a_source_that_cannot_load_is_a_model_error(tmp_path):
    with pytest.raises(ModelError, match="GGUF file not found"):
        load_source_lm(tmp_path / "missing.gguf")
