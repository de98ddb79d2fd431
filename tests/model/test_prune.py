"""The pruning transform (drmix.model.prune): chosen layers kept, an exact Llama -> Gemma rewrite, narrower MLPs.
Saving and the model card: tests/model/test_saving.py and tests/recipes/test_prune.py."""
from __future__ import annotations

import pytest
import torch
from tiny_llama import build_tiny_llama

from drmix.errors import ConfigError, ModelError
from drmix.model.prune import LLAMA_LIKE, check_equivalence, default_layers, parse_layers, prune_decoder


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
    assert bert.config.model_type not in LLAMA_LIKE
    with pytest.raises(ModelError, match="cannot be pruned"):
        prune_decoder(bert, [0])
