"""``drmix prune``: a decoder LM turned into a retriever backbone as DRAMA does it ("DRAMA: Diverse
Augmentation from Large Language Models to Smaller Dense Retrievers", Ma et al., ACL 2025, arXiv:2502.18460,
Sec. 3.2): the causal LM is loaded (:func:`drmix.llm.local.load_causal_lm`), pruned and rewritten
(:mod:`drmix.model.prune`), saved as a SentenceTransformer folder (:mod:`drmix.model.saving`) with its model
card (:mod:`drmix.report.card`) and a ``drmix_prune.json`` of what was done."""
from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from drmix.errors import DrmixError, ModelError
from drmix.model.prune import QUERY_PROMPT, check_equivalence, parse_layers, prune_decoder
from drmix.report.card import CardInfo

log = logging.getLogger(__name__)


def load_source_lm(source: str | Path | None) -> tuple[Any, Any, str]:
    """(model, tokenizer, model id) of the causal LM to prune (default: the packaged SmolLM2); a failure is a
    :class:`ModelError` (the LLM backend's error, re-labelled as a model problem)."""
    from drmix.llm.local import load_causal_lm

    try:
        return load_causal_lm(source)
    except ModelError:
        raise
    except DrmixError as e:
        raise ModelError(e.message, path=e.path, fix=e.fix) from None


def prune_card(model_id: str, layers: list[int], source_layers: int, mlp_width: int, source_mlp_width: int,
               params: int, non_embedding: int, *, bidirectional: bool, query_prompt: str) -> CardInfo:
    """What the model card of a pruned backbone says."""
    from drmix.report.card import current_command

    return CardInfo(
        base_model=str(model_id), kind="pruned", papers=["drama"],
        tags=["drmix", "pruned", "bidirectional" if bidirectional else "causal"], command=current_command(),
        summary=(f"A retrieval backbone pruned from {model_id} as in DRAMA (Sec. 3.2): not trained yet; fine-tune "
                 "it with drmix train before use."),
        notes=[f"layers kept: {layers} of {source_layers}", f"MLP width: {mlp_width} of {source_mlp_width}",
               f"parameters: {params:,} ({non_embedding:,} without embeddings)",
               f"attention: {'bidirectional' if bidirectional else 'causal'}; pooling: mean; query prompt: "
               f"{query_prompt!r}"])


def prune_to_sentence_transformer(source: str | Path | None, output: str | Path, *,
                                  layers: str | Sequence[int] | None = None, keep_layers: int | None = None,
                                  mlp_keep: int | None = None, bidirectional: bool = True,
                                  max_seq_length: int = 512, query_prompt: str = QUERY_PROMPT) -> dict[str, Any]:
    """Load a causal LM (folder, hub id, ``.gguf``; default: the packaged SmolLM2), prune it and save it as a
    SentenceTransformer folder with its model card. Returns what was done (also written as
    ``drmix_prune.json`` in the folder)."""
    from drmix.model.saving import save_sentence_transformer
    from drmix.report.card import write_model_card

    lm, tok, model_id = load_source_lm(source)
    n = lm.config.num_hidden_layers
    chosen = parse_layers(layers, n, keep_layers)
    pruned = prune_decoder(lm, chosen, bidirectional=bidirectional)
    diff = check_equivalence(lm, pruned, chosen)
    if mlp_keep is not None:
        pruned = prune_decoder(lm, chosen, mlp_keep=mlp_keep, bidirectional=bidirectional)
    params = sum(p.numel() for p in pruned.parameters())
    emb = pruned.embed_tokens.weight.numel()
    card = prune_card(model_id, chosen, n, pruned.config.intermediate_size, lm.config.intermediate_size, params,
                      params - emb, bidirectional=bidirectional, query_prompt=query_prompt)
    info = {"source": model_id, "source_layers": n, "layers": chosen, "mlp_width": pruned.config.intermediate_size,
            "source_mlp_width": lm.config.intermediate_size, "bidirectional": bidirectional, "pooling": "mean",
            "query_prompt": query_prompt, "parameters": params, "non_embedding_parameters": params - emb,
            "rewrite_max_abs_diff": diff}
    save_sentence_transformer(pruned, tok, output, max_seq_length=max_seq_length, query_prompt=query_prompt,
                              finish=lambda st, folder: write_model_card(st, folder, card),
                              json_files={"drmix_prune.json": info})
    log.info("pruned %s: kept layers %s of %d; %.1fM parameters (%.1fM without embeddings)", model_id, chosen, n,
             params / 1e6, (params - emb) / 1e6)
    return info
