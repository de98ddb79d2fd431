"""Collections: named training sets of ``{query, positives, negatives}`` examples.

A collection is backed by a Hugging Face ``datasets.Dataset`` (Arrow, memory-mapped), so a 10-million-row
collection costs almost no RAM. :func:`load_collections` is the one entry point every command that trains
or reads training data uses (``train``, ``mine``, ``mixture optimize``, the pipelines). Sources:

* a file of rows: JSONL (read line by line, so an error names its line), JSON (an array), parquet, CSV, TSV,
  Arrow; the rows may be in any registered layout (:mod:`drmix.data.formats`: drmix, sentence-transformers,
  Tevatron, FlagEmbedding), detected from the first record's keys or the columns, or named with ``format``;
  ``columns`` maps roles to columns (``{"query": "question", "positive": "answer"}``);
* a saved ``datasets`` folder (``Dataset.save_to_disk``, or ``DatasetDict.save_to_disk`` with ``NAME:split``,
  default ``train``);
* a Hugging Face Hub dataset id ``owner/name`` (``owner/name:split``, ``owner/name:subset:split``) through
  ``datasets.load_dataset``;
* a BEIR directory (``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``): each query with its relevant
  documents (score > 0) as positives;
* a folder of any of these files (and saved datasets): one collection per file, named by the file stem;
* a YAML file listing collections: ``- {path: ..., name: ..., instruction: ..., weight: ..., format: ...,
  columns: ...}`` (a top-level list, or a mapping with a ``collections:`` list); relative paths are relative to
  the YAML file.

Rows are converted once into the canonical columns (``query``, ``positives``, ``negatives`` and, where the
source has teacher scores, ``positive_scores``/``negative_scores``: each either aligned with its texts or empty,
meaning no teacher score for that row) and cached as Arrow, keyed by the source's *content* and the conversion;
a saved dataset already in canonical columns is used as it is.
Malformed input stops with a :class:`~drmix.errors.DataError` naming the file, the line (or row) and the fix.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from drmix.data.formats import (CONVERTER_VERSION, LAYOUTS, Converter, Plan, PlanError, RecordConverter, RowError, canonical_features,
                                describe_error, plan_for)
from drmix.data.formats import sources as src
from drmix.data.pages import PageReleaser, dataset_files, release_mapped_pages
from drmix.data.spec import CollectionSpec, apply_instruction, parse_columns, split_suffix
from drmix.errors import DataError
from drmix.fingerprint import config_digest
from drmix.io.checks import cache_writes
from drmix.io.read import iter_jsonl, read_yaml

log = logging.getLogger(__name__)

COLUMNS = ("query", "positives", "negatives")
#: rows per Arrow record batch of a converted collection. Opening an Arrow stream file walks every batch's
#: header, and each touch maps the pages around it: 1,000-row batches (datasets' default) put ~200 MB of a
#: 3M-row file into the process while it opens, 10,000-row batches ~23 MB (docs/benchmarks.md, memory)
WRITER_BATCH_SIZE = 10_000
SCORE_COLUMNS = ("positive_scores", "negative_scores")


@dataclass
class Collection:
    """A named training collection."""

    name: str
    dataset: Any  # datasets.Dataset with columns query: str, positives: list[str], negatives: list[str]
    instruction: str | None = None
    weight: float | None = None
    source: str = ""
    layout: str = "drmix"
    document_prompt: str | None = None   # prepended to every positive and negative (E5's "passage: ")

    def __len__(self) -> int:
        return len(self.dataset)

    @property
    def has_scores(self) -> bool:
        """Whether the rows carry teacher scores (``positive_scores`` / ``negative_scores``, aligned lists)."""
        return all(c in self.dataset.column_names for c in SCORE_COLUMNS)

    def format_query(self, query: str) -> str:
        return apply_instruction(self.instruction, query)

    def format_document(self, text: str) -> str:
        """``document_prompt + text``, as sentence-transformers prepends a prompt (no separator added)."""
        return self.document_prompt + text if self.document_prompt else text

    def format_documents(self, texts: list[str] | None) -> list[str]:
        return [self.format_document(t) for t in texts or []] if self.document_prompt else list(texts or [])


# -- the conversion cache -------------------------------------------------------------------------------------

def _cache_dir() -> Path:
    from drmix.io.checks import cache_root

    return cache_root() / "collections"


def _conversion_key(content: str, plan: Plan, extra: Mapping[str, Any] | None = None) -> str:
    return config_digest({"content": content, "plan": plan.key(), **(extra or {})})


def _table_key(content: str, format: str | None, columns: Mapping[str, str] | None) -> str:
    """Key of a table's conversion: its content and what decides the plan (the columns follow from the content;
    pair rows with a label are read only under a scored-pair loss, so that is part of the key when on)."""
    from drmix.data.formats import scored_pairs_on

    payload = {"content": content, "format": format or "auto", "columns": dict(columns or {}),
               "version": CONVERTER_VERSION}
    if scored_pairs_on():
        payload["scored_pairs"] = True
    return config_digest(payload)


@cache_writes()
def _write_meta(key: str, conv: Converter, rows: int, source: str) -> None:
    from drmix.io.atomic import atomic_write_text

    d = _cache_dir()
    d.mkdir(parents=True, exist_ok=True)
    atomic_write_text(d / f"{key}.json", json.dumps({"source": source, "layout": conv.plan.layout,
                                                     "plan": conv.plan.describe(), "rows": rows,
                                                     "warnings": conv.warnings}, ensure_ascii=False))


def _cached(key: str) -> tuple[Any, dict[str, Any]] | None:
    """A converted collection and its record from the cache (its warnings repeated), or None."""
    import datasets

    target, meta_path = _cache_dir() / f"{key}.arrow", _cache_dir() / f"{key}.json"
    if not (target.is_file() and meta_path.is_file()):
        return None
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        out = datasets.Dataset.from_file(str(target))
    except Exception as e:  # noqa: BLE001 - a damaged cache is rebuilt, never trusted
        log.warning("cached collection %s unreadable (%s); rebuilding", target, e)
        return None
    out._fingerprint = key
    for w in meta.get("warnings", []):
        log.warning("%s", w)
    log.info("%s: read as %s (cached conversion %s)", meta.get("source"), meta.get("plan"), target)
    return out, meta


def _replay_warnings(key: str, conv: Converter) -> None:
    """Repeat the warnings of the run that built a cached conversion (the rows were not read again)."""
    try:
        meta = json.loads((_cache_dir() / f"{key}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    for w in meta.get("warnings", []):
        if w not in conv.warnings:
            conv.warnings.append(w)
            log.warning("%s", w)


def _file_fingerprint(path: Path) -> str:
    """Cache key of a collection file: its path and a hash of its *content*.

    Size and modification time are not enough: ``cp -p``, ``rsync -a`` and ``touch -r`` give a changed
    file the old ones, and the Arrow cache would then serve the old rows. Hashing streams the file once per
    version (:func:`drmix.fingerprint.file_digest`, remembered by path, size, times and inode -- the change time
    among them, which no copy can set back), far cheaper than parsing it on a cache miss.
    """
    from drmix.fingerprint import file_digest

    return config_digest({"path": str(path.resolve()), "content": file_digest(path)})


def _unwrap(e: BaseException) -> BaseException | None:
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, DataError):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None


def _log_plan(plan: Plan, source: Any) -> None:
    """Say how another tool's rows are read (drmix's own layout quietly: its extra keys are provenance)."""
    level = logging.DEBUG if plan.layout == "drmix" else logging.INFO
    log.log(level, "%s: read as %s", source, plan.describe())
    if plan.ignored:
        log.log(level, "%s: columns not read: %s", source, ", ".join(plan.ignored))


# -- JSONL: line by line ----------------------------------------------------------------------------------------

def _jsonl_rows(path: str, fingerprint: str, conv: Converter) -> Iterator[dict[str, Any]]:  # fingerprint: cache key
    p = Path(path)
    for line, obj in iter_jsonl(p):
        try:
            row = conv.row(obj)
        except RowError as e:
            raise describe_error(e, p, line=line) from None
        conv.rows += 1
        yield row


def parse_example(obj: dict[str, Any], path: Path, line: int) -> dict[str, Any]:
    """Validate one drmix JSONL record and return it in the canonical column layout."""
    try:
        plan = plan_for(list(obj), format="drmix")
        return Converter(plan, str(path)).row(obj)
    except (PlanError, RowError) as e:
        raise describe_error(e, path, line=line) from None


def load_jsonl_collection(path: str | Path, *, name: str | None = None, instruction: str | None = None,
                          weight: float | None = None, format: str | None = None,
                          columns: Mapping[str, str] | None = None) -> Collection:
    """Load one JSONL file (any row layout) into an Arrow-backed collection (streamed: rows never all sit in RAM)."""
    import datasets

    path = Path(path)
    if not path.is_file():
        raise DataError("collection file not found.", path=path, fix="check the path.")
    first = src.first_jsonl_record(path)
    if first is None:
        raise DataError("collection is empty.", path=path, fix="add at least one example line.")
    try:
        plan = plan_for(list(first[1]), format=format, columns=columns)
    except PlanError as e:
        raise describe_error(e, path, line=first[0]) from None
    _log_plan(plan, path)
    conv = RecordConverter(plan, str(path), columns)
    fingerprint = _file_fingerprint(path)
    key = _conversion_key(fingerprint, plan)
    try:
        with src.quiet():
            ds = datasets.Dataset.from_generator(
                _jsonl_rows, features=canonical_features(plan.has_scores),
                gen_kwargs={"path": str(path), "fingerprint": key, "conv": conv},
                writer_batch_size=WRITER_BATCH_SIZE)
    except Exception as e:  # datasets wraps generator errors; surface ours
        inner = _unwrap(e)
        if inner is not None:
            raise inner from None
        if "corresponds to no data" in str(e):  # the generator yielded nothing
            raise DataError("collection is empty.", path=path, fix="add at least one example line.") from None
        raise
    if conv.rows:
        conv.finish()
        _write_meta(key, conv, len(ds), str(path))
    else:
        _replay_warnings(key, conv)
    if len(ds) == 0:
        raise DataError("collection is empty.", path=path, fix="add at least one example line.")
    return Collection(name=name or path.stem, dataset=ds, instruction=instruction, weight=weight, source=str(path),
                      layout=plan.layout)


# -- tables: parquet, CSV/TSV, JSON arrays, Arrow, saved datasets, the Hub ---------------------------------------

def _feature_kind(f: Any) -> str:
    import datasets

    if isinstance(f, datasets.Value):
        d = str(f.dtype)
        if d in ("string", "large_string"):
            return "string"
        if d == "null":
            return "null"
        if d == "bool":
            return "bool"
        if d.startswith(("int", "uint", "float", "double")):
            return "number"
        return d
    if isinstance(f, (datasets.List, datasets.LargeList)):
        inner = _feature_kind(f.feature)
        return f"list<{inner}>"
    if isinstance(f, dict):
        if "text" in f:
            t = _feature_kind(f["text"])
            return "passage" if t in ("string", "null") else ("passages" if t == "list<string>" else "struct")
        return "struct"
    return type(f).__name__


_TEXT_KINDS = {"string", "null", "list<string>", "list<null>", "passage", "list<passage>", "passages"}


def _check_features(features: Any, plan: Plan, conv: Converter) -> None:
    """Column types against the plan, before any row is read: text where text goes, numbers where scores go;
    a string column where a list is expected is announced (and read as one text per row)."""
    def kind(c: str) -> str:
        return _feature_kind(features[c])

    q = kind(plan.query)
    if q not in ("string", "null"):
        raise PlanError(f'the query column "{plan.query}" holds {q}, not text.',
                        "name the query column with --columns query=COLUMN (sentence-transformers rows are read "
                        "by position: anchor first).")
    for role, cols in (("positive", plan.positives), ("negative", plan.negatives)):
        for c in cols:
            k = kind(c)
            if k not in _TEXT_KINDS:
                raise PlanError(f'the {role} column "{c}" holds {k}, not text or a list of texts.',
                                f"name the {role} column(s) with --columns (or drop the column).")
            if k == "string" and c in plan.lists:
                conv.warn_string_column(c, role)
    for c in (plan.positive_scores, plan.negative_scores, plan.label):
        if c and kind(c) not in ("number", "list<number>", "null"):
            raise PlanError(f'the score column "{c}" holds {kind(c)}, not numbers.',
                            f"pass --columns score= (or positive_scores= / negative_scores=) to ignore it.")


def _is_canonical(ds: Any, plan: Plan) -> bool:
    """A saved dataset already in drmix's columns and types (used as it is, no copy)."""
    if plan.layout != "drmix" or plan.has_scores or plan.positives != ("positives",) or plan.negatives != ("negatives",):
        return False
    f = ds.features
    return (_feature_kind(f["query"]) == "string" and _feature_kind(f["positives"]) == "list<string>"
            and _feature_kind(f["negatives"]) == "list<string>")


def _convert_batch(batch: dict[str, list], indices: list[int], conv: Converter, path: str,
                   names: tuple[str, ...], pages: Any = None) -> dict[str, list]:
    """``datasets.map`` function: canonical rows of one batch (row numbers in errors are 1-based).

    ``pages`` (a :class:`~drmix.data.pages.PageReleaser` of the source) hands the source's mapped pages back
    as the scan goes, so converting a large file does not leave all of it resident in this process.
    """
    if pages is not None:
        pages.tick()
    cols = [c for c in conv.plan.columns if c in batch]
    out: dict[str, list] = {k: [] for k in names}
    for i, idx in enumerate(indices):
        try:
            r = conv.row({c: batch[c][i] for c in cols})
        except RowError as e:
            raise describe_error(e, path, row=idx + 1) from None
        for k in names:
            out[k].append(r[k])
    conv.rows += len(indices)
    return out


@cache_writes()
def _canonical(ds: Any, plan: Plan, conv: Converter, key: str, label: str) -> Any:
    """``ds`` converted to canonical rows, cached as one Arrow file under the drmix cache (memory-mapped)."""
    import datasets

    cache = _cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    target = cache / f"{key}.arrow"
    features = canonical_features(plan.has_scores)
    try:
        with src.quiet():
            out = ds.map(_convert_batch, batched=True, batch_size=WRITER_BATCH_SIZE, with_indices=True,
                         writer_batch_size=WRITER_BATCH_SIZE,
                         remove_columns=list(ds.column_names), features=features, cache_file_name=str(target),
                         load_from_cache_file=False, new_fingerprint=key, desc=f"reading {label}",
                         fn_kwargs={"conv": conv, "path": label, "names": tuple(features),
                                    "pages": PageReleaser([ds], every=64)})
    except Exception as e:
        inner = _unwrap(e)
        if inner is not None:
            raise inner from None
        raise
    conv.finish()
    _write_meta(key, conv, len(out), label)
    return out


def load_table_collection(ds: Any, *, source: str, content: str | Callable[[], str], name: str,
                          instruction: str | None = None, weight: float | None = None, format: str | None = None,
                          columns: Mapping[str, str] | None = None, as_is: bool = True) -> Collection:
    """A collection from a ``datasets.Dataset`` of rows in any layout (``content``, or a function computing it,
    keys the conversion cache).

    With ``as_is`` a dataset already in canonical columns is used without a copy (``ds`` must outlive the run).
    """
    if len(ds) == 0:
        raise DataError("collection is empty.", path=source, fix="add examples.")
    try:
        plan = plan_for(list(ds.column_names), format=format, columns=columns)
        conv = Converter(plan, source)
        if as_is and _is_canonical(ds, plan):
            _log_plan(plan, source)
            return Collection(name=name, dataset=ds, instruction=instruction, weight=weight, source=source,
                              layout=plan.layout)
        key = _table_key(content() if callable(content) else content, format, columns)
        hit = _cached(key)
        if hit is not None:
            return Collection(name=name, dataset=hit[0], instruction=instruction, weight=weight, source=source,
                              layout=hit[1].get("layout", plan.layout))
        _check_features(ds.features, plan, conv)
    except PlanError as e:
        raise describe_error(e, source) from None
    _log_plan(plan, source)
    ds = _canonical(ds, plan, conv, key, source)
    return Collection(name=name, dataset=ds, instruction=instruction, weight=weight, source=source, layout=plan.layout)


@cache_writes()
def load_file_collection(path: Path, kind: str, *, name: str | None = None, **kw: Any) -> Collection:
    """A parquet / CSV / TSV / JSON-array / Arrow file (read with ``datasets``, converted once, cached)."""
    from drmix.io.checks import cache_root

    content = _file_fingerprint(path)
    hit = _cached(_table_key(content, kw.get("format"), kw.get("columns")))
    if hit is not None:  # converted before: datasets need not read the file again
        return Collection(name=name or path.stem, dataset=hit[0], instruction=kw.get("instruction"),
                          weight=kw.get("weight"), source=str(path), layout=hit[1].get("layout", "drmix"))
    root = cache_root() / "sources"
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".read-", dir=root))
    try:
        ds = src.load_table(kind, path, tmp)
        release_mapped_pages(dataset_files(ds))  # datasets walked its new Arrow copy while opening it
        return load_table_collection(ds, source=str(path), content=content, name=name or path.stem, as_is=False, **kw)
    finally:
        ds = None  # the converted copy is read from the drmix cache; datasets' own copy is not kept
        shutil.rmtree(tmp, ignore_errors=True)


def load_saved_collection(root: str | Path, *, split: str = "train", name: str | None = None, **kw: Any) -> Collection:
    """A ``save_to_disk`` folder (a Dataset, or the ``split`` of a DatasetDict) in any row layout."""
    root = Path(root)
    ds = src.load_saved(root, split)
    is_dict = src.is_saved_dataset_dict(root)
    label = f"{root}:{split}" if is_dict else str(root)
    default = root.name + (f"-{split}" if is_dict and split != "train" else "")
    return load_table_collection(ds, source=label, content=lambda: src.dataset_content_key(ds), name=name or default,
                                 **kw)


def load_hub_collection(repo_id: str, *, subset: str | None = None, split: str = "train", name: str | None = None,
                        **kw: Any) -> Collection:
    """A Hugging Face Hub dataset (``datasets.load_dataset``; fails in seconds without the Hub)."""
    ds = src.load_hub(repo_id, subset, split)
    label = f"{repo_id}{':' + subset if subset else ''}:{split}"
    default = repo_id.split("/")[-1] + (f"-{subset}" if subset else "") + (f"-{split}" if split != "train" else "")
    content = json.dumps([repo_id, subset, split, getattr(ds, "_fingerprint", "")])
    return load_table_collection(ds, source=label, content=content, name=name or default, **kw)


def load_beir_collection(root: str | Path, *, split: str = "train", name: str | None = None,
                         instruction: str | None = None, weight: float | None = None) -> Collection:
    """Turn a BEIR directory's qrels split into query -> relevant documents examples."""
    import datasets

    from drmix.data.beir import doc_text, load_beir

    root = Path(root)
    beir = load_beir(root, split=split)
    rows = {"query": [], "positives": [], "negatives": []}
    for qid in sorted(beir.qrels):
        pos = [doc_text(beir.corpus[d]) for d, rel in sorted(beir.qrels[qid].items()) if rel > 0]
        pos = [p for p in pos if p]
        if not pos or not beir.queries.get(qid, "").strip():
            continue
        rows["query"].append(beir.queries[qid])
        rows["positives"].append(pos)
        rows["negatives"].append([])
    if not rows["query"]:
        raise DataError(f"split '{split}' has no query with a relevant document.", path=root / "qrels" / f"{split}.tsv",
                        fix="use a split whose qrels have scores > 0.")
    ds = datasets.Dataset.from_dict(rows, features=canonical_features(False))
    return Collection(name=name or root.name, dataset=ds, instruction=instruction, weight=weight, source=str(root),
                      layout="beir")


# -- specs: paths, folders, YAML lists ---------------------------------------------------------------------------

def _is_beir_dir(p: Path) -> bool:
    return (p / "corpus.jsonl").exists() and (p / "queries.jsonl").exists() and (p / "qrels").is_dir()


def _specs_from_yaml(path: Path) -> list[CollectionSpec]:
    raw = read_yaml(path, what="collection list", error=DataError)
    _allowed = list(CollectionSpec.model_fields)
    if isinstance(raw, dict) and "collections" in raw:
        raw = raw["collections"]
    if not isinstance(raw, list) or not raw:
        raise DataError("expected a non-empty list of collections.", path=path,
                        fix="write `- {path: a.jsonl, name: a}` items (or `collections:` with such a list).")
    specs = []
    for i, item in enumerate(raw, start=1):
        if isinstance(item, str):
            item = {"path": item}
        if not isinstance(item, dict) or "path" not in item:
            raise DataError(f"collection #{i} needs a 'path'.", path=path, fix="give each item a path: field.")
        unknown = sorted(str(k) for k in item if k not in _allowed)
        if unknown:
            raise DataError(f"collection #{i} has unknown key(s) {', '.join(unknown)}.", path=path,
                            fix=f"allowed keys: {', '.join(_allowed)}.")
        try:
            spec = CollectionSpec.model_validate(item)
        except Exception as e:  # pydantic ValidationError
            errs = e.errors() if hasattr(e, "errors") else []
            what = "; ".join(f"{'.'.join(map(str, x['loc']))}: {x['msg']}" for x in errs) or str(e)
            raise DataError(f"collection #{i} is invalid ({what}).",
                            path=path, fix=f"allowed keys: {', '.join(_allowed)}.") from None
        p = Path(spec.path).expanduser()
        if not p.is_absolute():
            local = path.parent / p
            if _local_target(str(local)) is not None or _hub_target(spec.path) is None:
                spec = spec.model_copy(update={"path": str(local)})
        specs.append(spec)
    return specs


def _hub_target(path: str) -> tuple[str, str | None, str | None] | None:
    """``(repo_id, subset, split)`` when ``path`` is a Hub dataset id (``id``, ``id:split``, ``id:subset:split``)."""
    if src.looks_like_hub_id(path):
        return path, None, None
    head, split = split_suffix(path)
    if split is None:
        return None
    if src.looks_like_hub_id(head):
        return head, None, split
    head2, subset = split_suffix(head)
    if subset is not None and src.looks_like_hub_id(head2):
        return head2, subset, split
    return None


def _local_target(path: str) -> tuple[Path, str | None] | None:
    """``(path, split)`` of a local ``PATH`` or ``PATH:split``; None when nothing is there."""
    p = Path(path).expanduser()
    if p.exists() or p.is_symlink():
        return p, None
    head, split = split_suffix(path)
    if split is not None and Path(head).expanduser().exists():
        return Path(head).expanduser(), split
    return None


def _folder_entries(p: Path) -> list[Path]:
    """The collection files (and saved-dataset folders) of a folder, sorted."""
    out = []
    for f in sorted(p.iterdir()):
        if f.name.startswith("."):
            continue
        if f.is_file() and f.suffix.lower() in src.FILE_KINDS:
            out.append(f)
        elif f.is_dir() and (src.is_saved_dataset(f) or src.is_saved_dataset_dict(f)):
            out.append(f)
    return out


def _load_file(p: Path, *, name: str | None, fmt: str | None, columns: dict[str, str],
               kw: dict[str, Any]) -> Collection:
    if fmt == "beir":
        raise DataError("--format beir names a BEIR folder, but this is a file.", path=p,
                        fix="pass the BEIR folder (corpus.jsonl, queries.jsonl, qrels/), or drop --format.")
    kind = src.file_kind(p)
    if kind is None:
        with open(p, "rb") as f:
            head = f.read(64).lstrip()
        if not head.startswith(b"{"):
            raise DataError(f"unknown collection file type {p.suffix or '(no extension)'!r}.", path=p,
                            fix=f"use one of {', '.join(sorted(src.FILE_KINDS))} (JSONL if unsure).")
        kind = "jsonl"
    if kind == "jsonl":
        return load_jsonl_collection(p, name=name, format=fmt, columns=columns, **kw)
    return load_file_collection(p, kind, name=name, format=fmt, columns=columns, **kw)


def load_collection_spec(spec: str | CollectionSpec, *, split: str | None = None, format: str | None = None,
                         columns: Mapping[str, str] | str | None = None,
                         _yaml_stack: tuple[Path, ...] = ()) -> list[Collection]:
    """Load the collection(s) one spec names (a folder or a YAML file gives several).

    ``format`` and ``columns`` apply where the spec sets none (``--format`` / ``--columns``). The spec's
    ``document_prompt`` goes to each collection that a YAML list it names gives none.
    """
    if isinstance(spec, (str, os.PathLike)):
        spec = CollectionSpec(path=str(spec))
    elif not isinstance(spec, CollectionSpec):
        from drmix.errors import wrong_argument

        raise wrong_argument("load_collection_spec", "spec", spec, "a path or a CollectionSpec",
                             fix="pass paths (str or Path), Hub ids or CollectionSpec(path=..., name=...).")
    out = _load_spec(spec, split=split, format=format, columns=columns, _yaml_stack=_yaml_stack)
    for c in out:
        if c.document_prompt is None:
            c.document_prompt = spec.document_prompt
    return out


def _load_spec(spec: CollectionSpec, *, split: str | None, format: str | None,
               columns: Mapping[str, str] | str | None, _yaml_stack: tuple[Path, ...]) -> list[Collection]:
    fmt = spec.format or format
    fmt = None if fmt == "auto" else fmt
    cols = spec.columns if spec.columns is not None else parse_columns(columns)
    kw = {"instruction": spec.instruction, "weight": spec.weight}
    local = _local_target(spec.path)
    if local is None:
        hub = _hub_target(spec.path)
        if hub is not None:
            repo_id, subset, hub_split = hub
            return [load_hub_collection(repo_id, subset=subset, split=hub_split or split or spec.split,
                                        name=spec.name, format=fmt, columns=cols, **kw)]
        raise DataError("collection path does not exist.", path=Path(spec.path).expanduser(),
                        fix="give a collection file (JSONL, JSON, parquet, CSV/TSV, Arrow), a folder of them, a saved "
                            "dataset, a BEIR directory, a YAML list or a Hub dataset id (owner/name).")
    p, path_split = local
    split = path_split or split or spec.split
    if p.is_file() and p.suffix in {".yaml", ".yml"}:
        key = p.resolve()
        if key in _yaml_stack:
            chain = " -> ".join(str(x) for x in (*_yaml_stack, key))
            raise DataError(f"collection lists include each other in a cycle ({chain}).", path=p,
                            fix="remove the entry that lists a file already on the way.")
        out = []
        for sub in _specs_from_yaml(p):
            out.extend(load_collection_spec(sub, split=split if split != "train" else None, format=fmt,
                                            columns=cols, _yaml_stack=(*_yaml_stack, key)))
        return out
    if p.is_file():
        return [_load_file(p, name=spec.name, fmt=fmt, columns=cols, kw=kw)]
    if not p.is_dir():
        raise DataError("collection path is neither a file nor a folder.", path=p,
                        fix="give a collection file, a folder of them, a saved dataset, a BEIR directory or a "
                            "YAML list.")
    if _is_beir_dir(p) and fmt in (None, "beir"):
        return [load_beir_collection(p, split=split, name=spec.name, **kw)]
    if (p / "corpus.jsonl").is_file() and (p / "queries.jsonl").is_file() and fmt in (None, "beir"):
        raise DataError("BEIR folder has corpus.jsonl and queries.jsonl but no qrels: training needs judged "
                        "query-document pairs.", path=p / "qrels" / f"{split}.tsv",
                        fix=f"add qrels/{split}.tsv (header query-id<TAB>corpus-id<TAB>score); for an unlabelled "
                            "corpus, build a collection with `drmix augment crop` (or generate) and `drmix augment "
                            "mine`.")
    if fmt == "beir":
        raise DataError("--format beir, but the folder is not a BEIR folder (corpus.jsonl, queries.jsonl, qrels/).",
                        path=p, fix="pass a BEIR folder, or drop --format.")
    if src.is_saved_dataset(p) or src.is_saved_dataset_dict(p):
        return [load_saved_collection(p, split=split, name=spec.name, format=fmt, columns=cols, **kw)]
    entries = _folder_entries(p)
    if not entries:
        raise DataError("folder holds no collection files (JSONL, JSON, parquet, CSV/TSV, Arrow, saved datasets) and is "
                        "not a BEIR directory.", path=p,
                        fix="put one file per collection in it, or point at a BEIR directory.")
    if spec.name and len(entries) > 1:
        log.warning("name %r ignored for directory %s with %d collections", spec.name, p, len(entries))
    name = spec.name if len(entries) == 1 else None
    out = []
    for f in entries:
        if f.is_dir():
            out.append(load_saved_collection(f, split=split, name=name, format=fmt, columns=cols, **kw))
        else:
            out.append(_load_file(f, name=name, fmt=fmt, columns=cols, kw=kw))
    return out


def collection_folder_entries(path: str | Path) -> list[Path] | None:
    """The collections of a plain folder (files and saved datasets, one collection each), or None when
    ``path`` is one collection itself (a file, a saved dataset, a BEIR folder, a Hub id)."""
    p = Path(path).expanduser()
    if not p.is_dir() or _is_beir_dir(p) or src.is_saved_dataset(p) or src.is_saved_dataset_dict(p):
        return None
    return _folder_entries(p)


def check_sources(specs: list[str | CollectionSpec]) -> None:
    """Fail early (without reading rows) when a spec names nothing: no local path and no Hub id."""
    for spec in specs:
        path = spec.path if isinstance(spec, CollectionSpec) else str(spec)
        if _local_target(path) is None and _hub_target(path) is None:
            raise DataError("collection path does not exist.", path=Path(path).expanduser(),
                            fix="pass existing collection files or folders, or a Hub dataset id (owner/name).")


def load_collections(specs: list[str | CollectionSpec], *, split: str | None = None,
                     max_size: int | None = None, seed: int = 0, format: str | None = None,
                     columns: Mapping[str, str] | str | None = None) -> list[Collection]:
    """Load every collection the specs name; names must be unique. ``max_size`` caps each (seeded sample).

    ``format`` (``--format``) and ``columns`` (``--columns``) apply to the specs that set none.
    """
    from drmix.errors import wrong_argument

    if isinstance(specs, (str, os.PathLike, CollectionSpec)):   # one collection, not its path's characters
        specs = [specs]
    elif not isinstance(specs, (list, tuple)):
        raise wrong_argument("load_collections", "specs", specs, "a list of paths or CollectionSpecs",
                             fix="pass load_collections(['data/a.jsonl', CollectionSpec(path=..., name=...)]).")
    if not specs:
        raise DataError("no training data given.",
                        fix="pass --data PATH (a collection file, folder, saved dataset, BEIR dir, YAML list or Hub id).")
    for i, spec in enumerate(specs):
        if not isinstance(spec, (str, os.PathLike, CollectionSpec)):
            raise wrong_argument("load_collections", f"specs[{i}]", spec, "a path or a CollectionSpec",
                                 fix="pass paths (str or Path), Hub ids or CollectionSpec(path=..., name=...).")
    out: list[Collection] = []
    for spec in specs:
        out.extend(load_collection_spec(spec, split=split, format=format, columns=columns))
    seen: dict[str, str] = {}
    for c in out:
        if c.name in seen:
            raise DataError(f"two collections are named '{c.name}' ({seen[c.name]} and {c.source}).", path=c.source,
                            fix="give them distinct names (name: in a YAML list or CollectionSpec).")
        seen[c.name] = c.source
        if max_size is not None and len(c) > max_size:
            rng = np.random.default_rng([seed, int(hashlib.md5(c.name.encode()).hexdigest()[:8], 16)])
            c.dataset = c.dataset.select(np.sort(rng.choice(len(c), size=max_size, replace=False)))
    # opening an Arrow stream file walks every record batch, which maps most of the file into this process
    release_mapped_pages([f for c in out for f in dataset_files(c.dataset)])
    log.info("loaded %d collections: %s", len(out), ", ".join(f"{c.name} ({len(c)}, {c.layout})" for c in out))
    return out


def collections_for(config: Any, **kw: Any) -> list[Collection]:
    """The training collections of a config: its ``data`` part (collections, format, columns,
    max_collection_size) and its seed."""
    d = config.data
    return load_collections(d.collections, max_size=d.max_collection_size, seed=config.optim.seed,
                            format=d.format, columns=d.columns, **kw)


__all__ = ["Collection", "load_collections", "collections_for", "load_collection_spec", "load_jsonl_collection",
           "load_table_collection", "load_file_collection", "load_saved_collection", "load_hub_collection",
           "load_beir_collection", "check_sources", "collection_folder_entries", "parse_example", "apply_instruction", "LAYOUTS"]
