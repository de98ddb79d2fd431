"""Prompt templates: a user's JSON file, or the one packaged in ``drmix/augment/data``."""
from __future__ import annotations

from importlib import resources
from pathlib import Path

from drmix.errors import DataError


def read_template(path: str | Path | None, packaged: str) -> tuple[str, str]:
    """``(text, source)`` of the template at ``path``, or of the packaged file ``packaged`` when ``path`` is None."""
    if path is None:
        return (resources.files("drmix.augment").joinpath(f"data/{packaged}").read_text(encoding="utf-8"),
                f"packaged {packaged}")
    p = Path(path)
    if not p.is_file():
        raise DataError("template file not found.", path=p, fix="check the path.")
    return p.read_text(encoding="utf-8"), str(p)
