"""Small retriever backbones pruned from a decoder LM
(DRAMA ("DRAMA: Diverse Augmentation from Large Language Models to Smaller Dense Retrievers", Ma et al.,
ACL 2025, arXiv:2502.18460), Sec. 3.2 and 6.3).

DRAMA prunes Llama-3.2-1B with Sheared-LLaMA's learned masks plus continued pretraining (25B tokens), then
trains it as an encoder with *bidirectional* attention and *mean* pooling (Table 4: both beat causal attention
and last-token pooling), a ``"Query: "`` prefix on queries and none on documents. Learned-mask pruning with
continued pretraining is far beyond a CPU; :func:`prune_decoder` does the structured part that needs no
training: it keeps a chosen subset of layers (depth pruning) and, optionally, the ``mlp_keep`` most important
intermediate channels of every MLP (width pruning; importance = the product of the norms of a channel's
gate/up rows and its down column, a data-free magnitude criterion). Which layers to keep is our choice, as the
paper does not publish its masks: :func:`default_layers` keeps the first and the last layer and spreads the rest
evenly between them (docs/drama.md explains why).

How bidirectional attention survives a save and a plain ``SentenceTransformer(path)`` load without remote code:
a Llama-family model (Llama, SmolLM, Mistral without sliding windows, Qwen2 without biases...) is rewritten
*exactly* as a Gemma model. Gemma's layers are Llama's up to three reparametrisations, each undone here:
RMSNorm multiplies by ``1 + w`` (we store ``w - 1``), embeddings are scaled by ``sqrt(hidden)`` (we store
``E / sqrt(hidden)``), and the MLP activation is configurable (we keep Llama's ``silu``). Gemma's config carries
``use_bidirectional_attention`` (attention modules run non-causally) and transformers honours ``is_causal:
false`` when it builds the mask (padding masks without the causal triangle); both are set and saved in
``config.json``, so any stock transformers >= 5 loads the folder as a bidirectional encoder.
:func:`check_equivalence` verifies the rewrite numerically (causal Gemma == the source Llama layers).

This module is the transform only: :mod:`drmix.model.saving` writes the pruned encoder as a SentenceTransformer
folder, and :func:`drmix.recipes.prune.prune_to_sentence_transformer` loads the LLM, prunes, saves and writes
the model card.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

from drmix.errors import ConfigError, ModelError

log = logging.getLogger(__name__)

#: DRAMA's query prefix (documents get none)
QUERY_PROMPT = "Query: "
#: model types whose layers are Llama's and so rewrite exactly as Gemma
LLAMA_LIKE = {"llama", "mistral", "qwen2", "smollm3"}


def default_layers(num_layers: int, keep: int) -> list[int]:
    """``keep`` layer indices: the first, the last and the rest evenly spaced between them."""
    if not 1 <= keep <= num_layers:
        raise ConfigError(f"cannot keep {keep} of {num_layers} layers.", fix=f"keep between 1 and {num_layers}.")
    if keep == 1:
        return [0]
    return sorted({round(i * (num_layers - 1) / (keep - 1)) for i in range(keep)})


def parse_layers(text: str | Sequence[int] | None, num_layers: int, keep: int | None) -> list[int]:
    """Layer indices from ``"0,3,5-7"`` (0-based, ranges inclusive), or :func:`default_layers` for ``keep``."""
    if text is None or text == "":
        if keep is None:
            raise ConfigError("say which layers to keep.", fix="pass --layers 0,4,8 or --keep-layers N.")
        return default_layers(num_layers, keep)
    if isinstance(text, str):
        out: list[int] = []
        try:
            for part in text.split(","):
                if "-" in part:
                    a, b = part.split("-")
                    out.extend(range(int(a), int(b) + 1))
                elif part.strip():
                    out.append(int(part))
        except ValueError:
            raise ConfigError(f"cannot read layer list {text!r}.", fix="write 0-based indices like 0,4,8 or 0-3,29.") from None
    else:
        out = [int(x) for x in text]
    bad = [i for i in out if not 0 <= i < num_layers]
    if bad or not out:
        raise ConfigError(f"layer indices {bad or out} are outside 0..{num_layers - 1}.",
                          fix=f"the model has {num_layers} layers (0-based).")
    if len(set(out)) != len(out) or out != sorted(out):
        raise ConfigError(f"layer list {out} must be increasing without repeats.", fix="e.g. 0,10,20,29.")
    return out


def _mlp_importance(layer: Any) -> Any:
    import torch

    mlp = layer.mlp
    g = mlp.gate_proj.weight.norm(dim=1)
    u = mlp.up_proj.weight.norm(dim=1)
    d = mlp.down_proj.weight.norm(dim=0)
    return (g * u * d).to(torch.float32)


def gemma_config(src: Any, num_layers: int, intermediate: int, *, bidirectional: bool = True) -> Any:
    from transformers import GemmaConfig

    c = src
    if getattr(c, "attention_bias", False) or getattr(c, "mlp_bias", False):
        raise ModelError("models with attention or MLP biases cannot be rewritten exactly.",
                         fix="prune a Llama-style model without biases (Llama, SmolLM2, Mistral).")
    if getattr(c, "sliding_window", None) and getattr(c, "use_sliding_window", True) and c.model_type == "mistral":
        log.warning("sliding-window attention is dropped: the pruned model attends to the whole input")
    rope = dict(getattr(c, "rope_parameters", None) or {"rope_type": "default", "rope_theta": getattr(c, "rope_theta", 10000.0)})
    return GemmaConfig(
        vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=intermediate,
        num_hidden_layers=num_layers, num_attention_heads=c.num_attention_heads,
        num_key_value_heads=getattr(c, "num_key_value_heads", c.num_attention_heads),
        head_dim=getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads,
        hidden_act=getattr(c, "hidden_act", "silu"), max_position_embeddings=c.max_position_embeddings,
        rms_norm_eps=c.rms_norm_eps, rope_parameters=rope, attention_bias=False, tie_word_embeddings=True,
        pad_token_id=c.pad_token_id, bos_token_id=c.bos_token_id, eos_token_id=c.eos_token_id,
        use_bidirectional_attention=bidirectional, is_causal=not bidirectional, use_cache=False)


def prune_decoder(model: Any, layers: Sequence[int], *, mlp_keep: int | None = None,
                  bidirectional: bool = True) -> Any:
    """A ``GemmaModel`` holding ``layers`` of a Llama-style model (a ``*ForCausalLM`` or its base model).

    ``mlp_keep`` narrows every MLP to its most important channels (see the module docstring).
    """
    import torch
    from transformers import GemmaModel

    base = getattr(model, "model", model)
    cfg = base.config
    if cfg.model_type not in LLAMA_LIKE:
        raise ModelError(f"model type {cfg.model_type!r} cannot be pruned into a bidirectional encoder here.",
                         fix=f"use a Llama-style decoder ({', '.join(sorted(LLAMA_LIKE))}).")
    n = cfg.num_hidden_layers
    layers = list(layers)
    if not layers or any(not 0 <= i < n for i in layers):
        raise ConfigError(f"layers {layers} are outside 0..{n - 1}.", fix=f"the model has {n} layers.")
    inter = cfg.intermediate_size if mlp_keep is None else int(mlp_keep)
    if not 1 <= inter <= cfg.intermediate_size:
        raise ConfigError(f"--mlp-keep {mlp_keep} must be between 1 and {cfg.intermediate_size}.",
                          fix="pass a width at most the model's intermediate size.")
    new = GemmaModel(gemma_config(cfg, len(layers), inter, bidirectional=bidirectional))
    sd = base.state_dict()
    out: dict[str, Any] = {"embed_tokens.weight": sd["embed_tokens.weight"] / math.sqrt(cfg.hidden_size),
                           "norm.weight": sd["norm.weight"] - 1.0}
    for j, i in enumerate(layers):
        keep = None
        if inter < cfg.intermediate_size:
            keep = torch.sort(torch.topk(_mlp_importance(base.layers[i]), inter).indices).values
        prefix = f"layers.{i}."
        for key, value in sd.items():
            if not key.startswith(prefix):
                continue
            rest = key[len(prefix):]
            if "layernorm" in rest:
                value = value - 1.0
            elif keep is not None and rest in ("mlp.gate_proj.weight", "mlp.up_proj.weight"):
                value = value[keep]
            elif keep is not None and rest == "mlp.down_proj.weight":
                value = value[:, keep]
            out[f"layers.{j}.{rest}"] = value.clone()
    missing, unexpected = new.load_state_dict(out, strict=False)
    missing = [m for m in missing if "rotary" not in m]
    if missing or unexpected:
        raise ModelError(f"weights do not map onto the pruned model (missing {missing[:3]}, unexpected "
                         f"{unexpected[:3]}).", fix="prune a Llama-style model.")
    return new.eval()


def check_equivalence(model: Any, pruned: Any, layers: Sequence[int], *, atol: float = 1e-4) -> float:
    """Largest difference between ``pruned`` run causally and the source model's ``layers`` run in order on a
    fixed input (a full-width prune); raises :class:`ModelError` above ``atol``."""
    import copy

    import torch

    base = getattr(model, "model", model)
    src = copy.deepcopy(base)
    src.layers = torch.nn.ModuleList([src.layers[i] for i in layers])
    src.config.num_hidden_layers = len(layers)
    causal = copy.deepcopy(pruned)
    causal.config.is_causal = True
    causal.config.use_bidirectional_attention = False
    for layer in causal.layers:
        layer.self_attn.is_causal = True
    ids = torch.arange(3, 19).remainder(base.config.vocab_size).unsqueeze(0)
    with torch.inference_mode():
        a = src(input_ids=ids, use_cache=False).last_hidden_state
        b = causal(input_ids=ids, use_cache=False).last_hidden_state
    diff = float((a - b).abs().max())
    if diff > atol:
        raise ModelError(f"the rewritten model differs from the source by {diff:.2e}.",
                         fix="report this with the model's config; the architecture is not Llama-compatible.")
    return diff
