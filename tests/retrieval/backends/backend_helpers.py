"""Small generated corpora for the backend tests: clustered unit vectors with awkward ids."""
from __future__ import annotations

import numpy as np

AWKWARD = ['say "hi"', "it's", "naïve ☃", "a\udc80b"]  # quotes, unicode, a lone surrogate


def vectors(n: int, dim: int = 16, seed: int = 0) -> np.ndarray:
    """``n`` unit vectors around 8 Gaussian centres (float32)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((8, dim))
    x = centres[rng.integers(0, 8, n)] + 0.3 * rng.standard_normal((n, dim))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def ids(n: int) -> list[str]:
    out = [f"d{i}" for i in range(n)]
    out[: len(AWKWARD)] = AWKWARD
    return out


def chunks(doc_ids: list[str], x: np.ndarray, size: int = 100, fail_after: int | None = None):
    """``(ids, vectors)`` chunks of ``size``; raises KeyboardInterrupt after ``fail_after`` chunks (a kill)."""
    for c, s in enumerate(range(0, len(doc_ids), size)):
        if fail_after is not None and c == fail_after:
            raise KeyboardInterrupt("killed")
        yield doc_ids[s:s + size], x[s:s + size]


def exact_top(x: np.ndarray, q: np.ndarray, doc_ids: list[str], k: int) -> tuple[np.ndarray, list[list[str]]]:
    s = q @ x.T
    order = np.argsort(-s, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(s, order, 1), [[doc_ids[j] for j in row] for row in order]
