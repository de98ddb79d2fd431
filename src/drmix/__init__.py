"""drmix: train dense retrievers that stay good across domains."""
from __future__ import annotations

__version__ = "0.1.0"

from drmix.errors import DrmixError  # noqa: E402

__all__ = ["DrmixError", "__version__"]
