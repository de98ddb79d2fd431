"""Pre-tokenised collections: token ids in Arrow, computed once per (tokenizer, lengths, prompts, content).

Tokenising a batch's documents on the fly costs more than an accelerator's step, while padding the same rows
from stored ids costs almost nothing (measured in docs/benchmarks.md, "Training input pipeline"). So a
collection is tokenised once, with ``datasets.Dataset.map``
over ``num_proc`` processes, into three Arrow columns of int32 ids::

    query_ids       list<int32>          query prompt + the collection's instruction + query, truncated
    positives_ids   list<list<int32>>    document prompt + the collection's document prompt + each positive, truncated
    negatives_ids   list<list<int32>>    document prompt + the collection's document prompt + each negative, truncated

saved under ``cache_root()/tokenized/<key>/`` (``datasets.save_to_disk``, written to a temporary folder and
renamed, so a killed run never leaves half a cache) and memory-mapped back. ``key`` hashes everything that
changes the ids: the collection's *content* fingerprint (``datasets``' own content hash, the same that keys
the JSONL Arrow cache of :mod:`drmix.data.collections`, which hashes the file's bytes), the tokenizer's
fingerprint (:func:`tokenizer_fingerprint`), both maximum lengths, both prompts, the instruction and the
collection's document prompt. Change
any of them and a new cache is built; nothing is ever rewritten in place.

Exactness. Ids are exactly what the on-the-fly path feeds the model: the trainer's
:class:`~drmix.train.inputs.Featurizer` checks (on the first batch of each length) that the fast tokenizer's
ids padded by :class:`~drmix.model.features.TextBatcher` equal ``model.preprocess``, and only then uses
pre-tokenised ids, padded by the same code. A model whose preprocessing is *not* plain tokenisation (a
tokenizer that pads on the left, an input module that adds features, a chat template, no fast tokenizer)
fails that check and trains from text as before (:func:`tokenizer_fingerprint` returns ``None`` for the
cases it can see without encoding). Rows are drawn by the same sampler and the builder makes the same random
choices (which positive, which negatives) from the stored counts, so a run from pre-tokenised data makes
the same batches, the same updates and the same checkpoints as one from text (tests/data/test_tokenized.py).

Hand-written: the cache key and the flat (offsets, values) view (:class:`Ragged`, the one view of every list
column); tokenisation is the model's fast tokenizer and storage/parallelism is ``datasets``.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from drmix.fingerprint import config_digest, texts_digest
from drmix.io.checks import cache_writes

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
COLUMNS = ("query_ids", "positives_ids", "negatives_ids")


def tokenizer_fingerprint(model: Any) -> str | None:
    """A hash of everything in ``model``'s tokenizer that changes ids; ``None`` when ids cannot be stored.

    Hashed: the fast tokenizer's full serialisation (vocabulary, normaliser, pre-tokeniser, model,
    post-processor: special tokens such as an appended EOS live there) with its mutable truncation and
    padding settings removed, its class, padding side and special-token map, and the model's module classes
    and ``max_seq_length``. ``None`` (train from text) when the model has no fast tokenizer or pads on the
    left (stored ids are right-padded; the trainer's check would refuse them anyway).
    """
    tok = getattr(model, "tokenizer", None)
    backend = getattr(tok, "backend_tokenizer", None)
    if tok is None or not getattr(tok, "is_fast", False) or backend is None:
        return None
    if getattr(tok, "padding_side", "right") != "right":
        return None
    spec = json.loads(backend.to_str())
    spec.pop("truncation", None)
    spec.pop("padding", None)
    modules = [type(m).__module__ + "." + type(m).__qualname__ for m in getattr(model, "_modules", {}).values()]
    extra = {
        "class": type(tok).__qualname__,
        "padding_side": getattr(tok, "padding_side", None),
        "special": {k: str(v) for k, v in sorted((getattr(tok, "special_tokens_map", None) or {}).items())},
        "add_bos": getattr(tok, "add_bos_token", None),
        "add_eos": getattr(tok, "add_eos_token", None),
        "modules": modules,
        "max_seq_length": getattr(model, "max_seq_length", None),
    }
    return config_digest({"tokenizer": spec, "extra": extra})


def cache_key(content: str, tokenizer: str, *, query_max_length: int, doc_max_length: int, query_prompt: str,
              doc_prompt: str, instruction: str | None, document_prompt: str | None = None) -> str:
    """The cache folder name: a hash of everything the stored ids depend on (a collection's ``document_prompt``
    only when it has one, so the ids stored before it existed keep their key)."""
    payload = {"version": FORMAT_VERSION, "content": content, "tokenizer": tokenizer, "q_len": int(query_max_length),
               "d_len": int(doc_max_length), "q_prompt": query_prompt, "d_prompt": doc_prompt,
               "instruction": instruction}
    if document_prompt:
        payload["document_prompt"] = document_prompt
    return config_digest(payload)


def _encode_rows(batch: dict[str, list], tokenizer: Any, instruction: str | None, q_prompt: str, d_prompt: str,
                 q_len: int, d_len: int) -> dict[str, list]:
    """``datasets.map`` function: the ids of one batch of rows (runs in a worker process)."""
    from drmix.data.collections import apply_instruction

    kw = {"add_special_tokens": True, "return_attention_mask": False, "return_token_type_ids": False,
          "truncation": True}

    def docs(lists: list[list[str]]) -> list[list[list[int]]]:
        flat = [d_prompt + t for texts in lists for t in (texts or [])]
        ids = tokenizer(flat, max_length=d_len, **kw)["input_ids"] if flat else []
        out, i = [], 0
        for texts in lists:
            n = len(texts or [])
            out.append(ids[i:i + n])
            i += n
        return out

    queries = [q_prompt + apply_instruction(instruction, q) for q in batch["query"]]
    return {"query_ids": tokenizer(queries, max_length=q_len, **kw)["input_ids"],
            "positives_ids": docs(batch["positives"]), "negatives_ids": docs(batch["negatives"])}


class Ragged:
    """Rows of different lengths as one flat array: row ``i`` is ``values[offsets[i]:offsets[i + 1]]``.

    The one view of every stored list column: ``values`` is an int32 array (``list<int32>``: one text's token ids
    per row) or itself a :class:`Ragged` (``list<list<int32>>``: several documents per row), so
    :meth:`item` reaches one document of a row.
    """

    def __init__(self, offsets: np.ndarray, values: "np.ndarray | Ragged") -> None:
        self.offsets = offsets
        self.values = values

    @classmethod
    def of(cls, column) -> "Ragged":
        """The view of a pyarrow ``list<int32>`` or ``list<list<int32>>`` column (chunks combined)."""
        import pyarrow as pa

        arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        if isinstance(arr, pa.ChunkedArray):  # combine_chunks of an empty chunked array
            arr = pa.concat_arrays(arr.chunks) if arr.num_chunks else pa.array([], type=column.type)
        offsets = np.asarray(arr.offsets, dtype=np.int64)
        flat = arr.flatten()
        values = (cls.of(flat) if pa.types.is_list(flat.type) or pa.types.is_large_list(flat.type)
                  else np.asarray(flat.to_numpy(zero_copy_only=False), dtype=np.int32))
        return cls(offsets - offsets[0], values)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def length(self, row: int) -> int:
        """The length of one row."""
        return int(self.offsets[row + 1] - self.offsets[row])

    def counts(self, rows: np.ndarray) -> np.ndarray:
        """The lengths of ``rows`` (int64 row indices)."""
        return self.offsets[rows + 1] - self.offsets[rows]

    def __getitem__(self, i: int) -> np.ndarray:
        """Row ``i`` of a ``list<int32>`` view."""
        return self.values[self.offsets[i]:self.offsets[i + 1]]

    def item(self, row: int, j: int) -> np.ndarray:
        """Entry ``j`` of row ``row`` of a ``list<list<int32>>`` view (the ids of the row's ``j``-th document)."""
        return self.values[int(self.offsets[row]) + j]

    def rows(self, start: int, stop: int) -> list[np.ndarray]:
        off, v = self.offsets, self.values
        return [v[off[i]:off[i + 1]] for i in range(start, stop)]


@dataclass(frozen=True)
class TokenKey:
    """What a set of stored ids was made for: ids are used only by a model and lengths that match it."""

    tokenizer: str
    query_max_length: int
    doc_max_length: int
    query_prompt: str
    doc_prompt: str


class TokenIds:
    """A collection's stored ids (memory-mapped Arrow) with vectorised row access."""

    def __init__(self, dataset: Any, path: Path | None = None, key: TokenKey | None = None) -> None:
        self.dataset = dataset
        self.path = path
        self.key = key
        table = dataset.data.table if hasattr(dataset.data, "table") else dataset.data
        if getattr(dataset, "_indices", None) is not None:
            table = table.take(dataset._indices.column(0))
        self.queries = Ragged.of(table.column("query_ids"))
        self.positives = Ragged.of(table.column("positives_ids"))
        self.negatives = Ragged.of(table.column("negatives_ids"))

    def __len__(self) -> int:
        return len(self.queries)

    def query(self, row: int) -> np.ndarray:
        return self.queries[row]

    def positive_counts(self, rows: np.ndarray) -> np.ndarray:
        return self.positives.counts(np.asarray(rows, dtype=np.int64))

    def negative_counts(self, rows: np.ndarray) -> np.ndarray:
        return self.negatives.counts(np.asarray(rows, dtype=np.int64))


@dataclass
class BatchTokens:
    """The stored ids of one batch: per example its query, its positive and its chosen negatives."""

    queries: list[np.ndarray]
    positives: list[np.ndarray]
    negatives: list[list[np.ndarray]]
    key: TokenKey | None

    def slice(self, start: int, stop: int) -> BatchTokens:
        return BatchTokens(self.queries[start:stop], self.positives[start:stop], self.negatives[start:stop], self.key)


class LazyTexts(Sequence):
    """A batch's texts, read (once, by ``fetch``) only when first used; the length is known without reading."""

    def __init__(self, n: int, fetch: Callable[[], list]) -> None:
        self._n = n
        self._fetch = fetch
        self._items: list | None = None

    def _all(self) -> list:
        if self._items is None:
            self._items = list(self._fetch())
        return self._items

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):
        if isinstance(i, slice):
            start, stop, step = i.indices(self._n)
            if step == 1:
                return LazyTexts(max(0, stop - start), lambda: self._all()[start:stop])
        return self._all()[i]

    def __iter__(self):
        return iter(self._all())

    def __eq__(self, other) -> bool:
        return list(self) == list(other) if isinstance(other, (list, LazyTexts)) else NotImplemented

    def __repr__(self) -> str:
        return f"LazyTexts({self._all()!r})" if self._items is not None else f"LazyTexts(<{self._n} unread>)"


def tokenized_cache_dir() -> Path:
    from drmix.io.checks import cache_root

    return cache_root() / "tokenized"


@cache_writes(also="or train from text without stored ids (--no-pretokenize)")
def tokenize_collection(collection: Any, model: Any, *, query_max_length: int, doc_max_length: int,
                        query_prompt: str = "", doc_prompt: str = "", num_proc: int | None = None,
                        cache_dir: Path | None = None) -> TokenIds | None:
    """The stored ids of ``collection`` for ``model`` (built and cached on first use); ``None`` when the
    model's preprocessing cannot be stored (:func:`tokenizer_fingerprint`)."""
    import datasets

    fp = tokenizer_fingerprint(model)
    if fp is None:
        return None
    tkey = TokenKey(fp, int(query_max_length), int(doc_max_length), query_prompt, doc_prompt)
    ds = collection.dataset
    content = getattr(ds, "_fingerprint", None)
    if not content:
        return None
    own = getattr(collection, "document_prompt", None) or ""    # the collection's, after --document-prompt
    key = cache_key(content, fp, query_max_length=query_max_length, doc_max_length=doc_max_length,
                    query_prompt=query_prompt, doc_prompt=doc_prompt, instruction=collection.instruction,
                    document_prompt=own)
    root = Path(cache_dir) if cache_dir is not None else tokenized_cache_dir()
    final = root / key
    if (final / "drmix-tokenized.json").exists():
        try:
            return TokenIds(datasets.load_from_disk(str(final)), final, tkey)
        except Exception as e:  # noqa: BLE001 - a damaged cache is rebuilt, never trusted
            log.warning("tokenised cache %s unreadable (%s); rebuilding", final, e)
    root.mkdir(parents=True, exist_ok=True)
    nproc = num_proc if num_proc and num_proc > 1 and len(ds) >= 2000 * num_proc else None
    bars = datasets.is_progress_bar_enabled()  # restored after: drmix's CLI switches them off unless -v
    datasets.disable_progress_bars()
    try:
        out = ds.map(_encode_rows, batched=True, batch_size=1000, num_proc=nproc,
                     remove_columns=list(ds.column_names), keep_in_memory=True,
                     fn_kwargs={"tokenizer": model.tokenizer, "instruction": collection.instruction,
                                "q_prompt": query_prompt, "d_prompt": doc_prompt + own, "q_len": int(query_max_length),
                                "d_len": int(doc_max_length)},
                     features=_features(), new_fingerprint=key, desc=f"tokenising {collection.name}")
    finally:
        if bars:
            datasets.enable_progress_bars()
    meta = {"version": FORMAT_VERSION, "collection": collection.name, "source": collection.source,
            "rows": len(out), "content": content, "tokenizer": fp, "query_max_length": query_max_length,
            "doc_max_length": doc_max_length, "query_prompt": query_prompt, "doc_prompt": doc_prompt,
            "instruction": collection.instruction, "document_prompt": own or None}
    _store(out, final, meta, indent=1)
    log.info("tokenised %s (%d rows) into %s", collection.name, len(out), final)
    return TokenIds(datasets.load_from_disk(str(final)), final, tkey)


def _encode_texts_map(batch: dict[str, list], tokenizer: Any, prompt: str, max_length: int | None) -> dict[str, list]:
    kw: dict[str, Any] = {"add_special_tokens": True, "return_attention_mask": False, "return_token_type_ids": False}
    if max_length:
        kw.update(truncation=True, max_length=int(max_length))
    return {"ids": tokenizer([prompt + t for t in batch["text"]], **kw)["input_ids"]}


@cache_writes()
def corpus_ids(model: Any, texts: Sequence[str], *, prompt: str = "", max_length: int | None = None,
               num_proc: int | None = None, cache_dir: Path | None = None) -> Ragged | None:
    """Stored ids of ``prompt + text`` for each text, truncated like the evaluation encoder truncates
    (``max_length``, default the model's ``max_seq_length``); cached under ``cache_root()/tokenized/`` by
    (texts' content hash, tokenizer fingerprint, prompt, length). ``None`` when ids cannot be stored."""
    import datasets

    fp = tokenizer_fingerprint(model)
    if fp is None:
        return None
    limit = max_length or getattr(model, "max_seq_length", None)
    key = config_digest({"version": FORMAT_VERSION, "kind": "texts", "content": texts_digest(texts), "tokenizer": fp,
                         "prompt": prompt, "max_length": limit})
    root = Path(cache_dir) if cache_dir is not None else tokenized_cache_dir()
    final = root / key
    if (final / "drmix-tokenized.json").exists():
        try:
            return _ragged(datasets.load_from_disk(str(final)))
        except Exception as e:  # noqa: BLE001 - a damaged cache is rebuilt
            log.warning("tokenised cache %s unreadable (%s); rebuilding", final, e)
    root.mkdir(parents=True, exist_ok=True)
    nproc = num_proc if num_proc and num_proc > 1 and len(texts) >= 5000 * num_proc else None
    bars = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        ds = datasets.Dataset.from_dict({"text": list(texts)})
        out = ds.map(_encode_texts_map, batched=True, batch_size=1000, num_proc=nproc, remove_columns=["text"],
                     keep_in_memory=True, fn_kwargs={"tokenizer": model.tokenizer, "prompt": prompt,
                                                     "max_length": limit},
                     features=datasets.Features({"ids": datasets.Sequence(datasets.Value("int32"))}),
                     new_fingerprint=key)
    finally:
        if bars:
            datasets.enable_progress_bars()
    _store(out, final, {"version": FORMAT_VERSION, "kind": "texts", "rows": len(out), "tokenizer": fp,
                        "prompt": prompt, "max_length": limit})
    return _ragged(datasets.load_from_disk(str(final)))


def _store(out: Any, final: Path, meta: dict[str, Any], *, indent: int | None = None) -> None:
    """Save the dataset ``out`` as the cache folder ``final`` with its ``drmix-tokenized.json``: built under a
    temporary name beside it, then renamed into place (a process that finished the same key first keeps its copy)."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        out.save_to_disk(str(tmp / "data"))
        (tmp / "data" / "drmix-tokenized.json").write_text(json.dumps(meta, indent=indent))
        try:
            os.replace(tmp / "data", final)
        except OSError:  # another process finished the same key first: keep its copy
            if not (final / "drmix-tokenized.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _ragged(ds: Any) -> Ragged:
    return Ragged.of(ds.data.table.column("ids") if hasattr(ds.data, "table") else ds.data.column("ids"))


def _features():
    import datasets

    ids = datasets.Sequence(datasets.Value("int32"))
    return datasets.Features({"query_ids": ids, "positives_ids": datasets.Sequence(ids),
                              "negatives_ids": datasets.Sequence(ids)})


__all__ = ["TokenIds", "TokenKey", "BatchTokens", "LazyTexts", "Ragged", "corpus_ids", "tokenize_collection",
           "tokenizer_fingerprint", "cache_key", "tokenized_cache_dir"]
