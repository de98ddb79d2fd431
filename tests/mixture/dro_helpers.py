"""The hand-computed batch the DRO tests share (tests/mixture/test_dro.py, test_dro_cases.py)."""
import numpy as np

from drmix.mixture.dro import DROConfig, DROStrategy, build_dro_strategy

NAMES = ["a", "b", "c"]
# One mixed batch: two examples of each collection.
IDS = np.array([0, 0, 1, 1, 2, 2])
PROXY = np.array([1.0, 3.0, 2.0, 2.0, 1.0, 0.5])
REF = np.array([1.0, 1.0, 2.0, 2.0, 0.5, 0.5])


def make(strategy: str, **cfg) -> DROStrategy:
    s = build_dro_strategy(strategy, DROConfig(**cfg))
    s.setup(NAMES, [10, 20, 30])
    return s
