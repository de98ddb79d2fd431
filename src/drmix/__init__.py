"""drmix: train dense retrievers that stay good across domains.

The main entry points, importable from the top level (loaded lazily, so ``import drmix`` stays fast)::

    from drmix import TrainConfig, train, load_collections, load_encoder, evaluate_model, DenseIndex
    from drmix import AuditConfig, run_audit       # drmix mixture audit: which collections help, which hurt
"""
from __future__ import annotations

import importlib
import types
from typing import Any

__version__ = "0.1.0"

from drmix.errors import DrmixError  # noqa: E402

_LAZY = {
    "TrainConfig": "drmix.config",
    "CollectionSpec": "drmix.data.spec",
    "train": "drmix.api",
    "Trainer": "drmix.train.trainer",
    "TrainResult": "drmix.train.saving",
    "load_collections": "drmix.data.collections",
    "Collection": "drmix.data.collections",
    "load_encoder": "drmix.model.encoder",
    "info_nce": "drmix.model.losses",
    "Strategy": "drmix.mixture.base",
    "StaticStrategy": "drmix.mixture.static",
    "evaluate_model": "drmix.evaluation.evaluate",
    "evaluate_run": "drmix.evaluation.metrics",
    "load_beir": "drmix.data.beir",
    "DenseIndex": "drmix.retrieval.index",
    "AuditConfig": "drmix.recipes.audit",
    "run_audit": "drmix.recipes.audit",
}


class CallablePackage(types.ModuleType):
    """A subpackage named like an entry point of :data:`_LAZY` (``drmix.train``): importing it sets the
    ``drmix.train`` attribute to the package, so the package calls the entry point (``drmix.train(config)``)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        name = self.__name__.rpartition(".")[2]
        return getattr(importlib.import_module(_LAZY[name]), name)(*args, **kwargs)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'drmix' has no attribute {name!r}")


__all__ = ["DrmixError", "__version__", *_LAZY]
