"""Training collections from ``datasets`` objects in memory, as ``SentenceTransformerTrainer(train_dataset=...)``
takes them: a ``Dataset`` (one collection, named ``train``), or a ``DatasetDict`` / ``{name: Dataset}`` (one
collection per entry, in its order). Any row layout ``--data`` reads is accepted (drmix's, sentence-transformers'
``anchor/positive/negative[_N]`` columns, Tevatron's, FlagEmbedding's; :mod:`drmix.data.formats`), converted once
and cached by the dataset's fingerprint; a dataset already in drmix's columns is used as it is."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drmix.data.collections import Collection, load_table_collection
from drmix.data.formats import sources as src
from drmix.errors import DataError

_FIX = "pass a datasets.Dataset, a DatasetDict or a dict of Datasets (one training collection each)."


def _is_dataset(obj: Any) -> bool:
    try:
        from datasets import Dataset
    except ImportError:  # pragma: no cover - datasets is a dependency
        return False
    return isinstance(obj, Dataset)


def collections_from_datasets(data: Any, *, format: str | None = None,
                              columns: Mapping[str, str] | None = None) -> list[Collection]:
    """One :class:`~drmix.data.collections.Collection` per dataset of ``data`` (see the module docstring);
    ``format`` / ``columns`` as ``--format`` / ``--columns``."""
    if _is_dataset(data):
        items = [("train", data)]
    elif isinstance(data, Mapping):
        items = [(str(k), v) for k, v in data.items()]
    else:
        raise DataError(f"train_dataset is a {type(data).__name__}.", fix=_FIX)
    if not items:
        raise DataError("train_dataset holds no dataset.", fix=_FIX)
    out = []
    for name, ds in items:
        if not _is_dataset(ds):
            raise DataError(f"train_dataset[{name!r}] is a {type(ds).__name__}, not a datasets.Dataset.", fix=_FIX)
        out.append(load_table_collection(ds, source=f"train_dataset[{name!r}]", name=name, format=format,
                                         columns=columns, content=lambda ds=ds: src.dataset_content_key(ds)))
    return out
