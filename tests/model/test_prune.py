"""Pruned decoder backbones: chosen layers kept, an exact Llama -> Gemma rewrite, bidirectional attention that
survives a save and a plain SentenceTransformer(path) load, narrower MLPs."""
from __future__ import annotations

import json

import pytest
import torch
import yaml
from tiny_llama import build_tiny_llama

from drmix.errors import ConfigError, ModelError
from drmix.model.prune import check_equivalence, default_layers, parse_layers, prune_decoder, \
    prune_to_sentence_transformer


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    return build_tiny_llama(tmp_path_factory.mktemp("llama") / "lm", layers=4)


@pytest.fixture(scope="module")
def llama_model(tiny_llama):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(tiny_llama)).eval()


def test_layer_choice():
    assert default_layers(30, 6) == [0, 6, 12, 17, 23, 29]
    assert default_layers(4, 2) == [0, 3]
    assert default_layers(5, 1) == [0]
    assert parse_layers("0,2-3", 4, None) == [0, 2, 3]
    assert parse_layers(None, 30, 3) == [0, 14, 29]
    for bad in ("0,9", "2,1", "a"):
        with pytest.raises(ConfigError):
            parse_layers(bad, 4, None)


def test_rewrite_is_exact_on_the_kept_layers(llama_model):
    pruned = prune_decoder(llama_model, [0, 2, 3], bidirectional=False)
    assert pruned.config.model_type == "gemma" and pruned.config.num_hidden_layers == 3
    # run the source's kept layers by hand and compare with the causal rewrite
    assert check_equivalence(llama_model, pruned, [0, 2, 3], atol=1e-4) < 1e-4
    src_layer = llama_model.model.layers[2]
    assert torch.equal(pruned.layers[1].self_attn.q_proj.weight, src_layer.self_attn.q_proj.weight)
    assert torch.allclose(pruned.layers[1].input_layernorm.weight + 1, src_layer.input_layernorm.weight)


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


def test_narrower_mlp_keeps_the_strongest_channels(llama_model):
    pruned = prune_decoder(llama_model, [1], mlp_keep=10)
    src = llama_model.model.layers[1].mlp
    assert pruned.layers[0].mlp.gate_proj.weight.shape == (10, 32)
    assert pruned.layers[0].mlp.down_proj.weight.shape == (32, 10)
    score = src.gate_proj.weight.norm(dim=1) * src.up_proj.weight.norm(dim=1) * src.down_proj.weight.norm(dim=0)
    keep = torch.sort(torch.topk(score, 10).indices).values
    assert torch.equal(pruned.layers[0].mlp.up_proj.weight, src.up_proj.weight[keep])
    with pytest.raises(ConfigError):
        prune_decoder(llama_model, [1], mlp_keep=10_000)


def test_non_llama_models_are_refused(tiny_model_path):
    from transformers import AutoModel

    bert = AutoModel.from_pretrained(tiny_model_path)
    with pytest.raises(ModelError, match="cannot be pruned"):
        prune_decoder(bert, [0])
