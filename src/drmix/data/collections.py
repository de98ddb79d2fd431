"""Collections: named training sets of ``{query, positives, negatives}`` examples.

A collection is backed by a Hugging Face ``datasets.Dataset`` (Arrow, memory-mapped), so a
10-million-row collection costs almost no RAM. Sources:

* a JSONL file: one object per line, ``{"query": str, "positive": str | [str, ...], "negatives": [str, ...]}``
  (``"positives"`` is accepted for ``"positive"``; ``"negatives"`` is optional);
* a directory of ``*.jsonl`` files: one collection per file, named by the file stem;
* a BEIR directory (``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``): each query with its
  relevant documents (score > 0) as positives;
* a saved ``datasets`` directory (``Dataset.save_to_disk``) with the same three columns;
* a YAML file listing collections: ``- {path: ..., name: ..., instruction: ..., weight: ...}``
  (a top-level list, or a mapping with a ``collections:`` list); relative paths are relative to the YAML file.

Malformed input stops with a :class:`~drmix.errors.DataError` naming the file, the line and the fix.
"""
from __future__ import annotations

import hashlib
import logging

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from drmix.config import CollectionSpec, read_yaml
from drmix.data.pages import dataset_files, release_mapped_pages
from drmix.errors import DataError
from drmix.io import iter_jsonl

log = logging.getLogger(__name__)

COLUMNS = ("query", "positives", "negatives")


@dataclass
class Collection:
    """A named training collection."""

    name: str
    dataset: Any  # datasets.Dataset with columns query: str, positives: list[str], negatives: list[str]
    instruction: str | None = None
    weight: float | None = None
    source: str = ""

    def __len__(self) -> int:
        return len(self.dataset)

    def format_query(self, query: str) -> str:
        return apply_instruction(self.instruction, query)


def apply_instruction(instruction: str | None, query: str) -> str:
    """Prepend an instruction; a separating space is added unless it ends in whitespace."""
    if not instruction:
        return query
    return instruction + query if instruction[-1].isspace() else f"{instruction} {query}"


def _as_text_list(value: Any, field: str, path: Path, line: int, *, allow_empty: bool) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise DataError(f'"{field}" must be a string or a list of strings.', path=path, line=line,
                        fix=f'write "{field}": "text" or "{field}": ["text", ...].')
    value = [v for v in value if v.strip()]
    if not value and not allow_empty:
        raise DataError(f'"{field}" is empty.', path=path, line=line, fix=f'give at least one non-empty "{field}".')
    return value


def parse_example(obj: dict[str, Any], path: Path, line: int) -> dict[str, Any]:
    """Validate one JSONL record and return it in the canonical column layout."""
    query = obj.get("query")
    if not isinstance(query, str) or not query.strip():
        raise DataError('missing or empty "query" (a non-empty string).', path=path, line=line,
                        fix='every line needs {"query": ..., "positive": ...}.')
    if "positive" in obj:
        pos = obj["positive"]
    elif "positives" in obj:
        pos = obj["positives"]
    else:
        raise DataError('missing "positive".', path=path, line=line,
                        fix='add "positive": "relevant text" (or a list of them).')
    positives = _as_text_list(pos, "positive", path, line, allow_empty=False)
    negatives = _as_text_list(obj.get("negatives", obj.get("negative", [])) or [], "negatives", path, line,
                              allow_empty=True)
    return {"query": query, "positives": positives, "negatives": negatives}


def _features():
    import datasets

    return datasets.Features({
        "query": datasets.Value("string"),
        "positives": datasets.Sequence(datasets.Value("string")),
        "negatives": datasets.Sequence(datasets.Value("string")),
    })


def _jsonl_rows(path: str, fingerprint: str) -> Iterator[dict[str, Any]]:  # fingerprint: cache key only
    p = Path(path)
    for line, obj in iter_jsonl(p):
        yield parse_example(obj, p, line)


def _file_fingerprint(path: Path) -> str:
    """Cache key of a collection file: its path and a hash of its *content*.

    Size and modification time are not enough: ``cp -p``, ``rsync -a`` and ``touch -r`` give a changed
    file the old ones, and the Arrow cache would then serve the old rows. Hashing streams the file once
    (BLAKE2b, about 1 GB/s), far cheaper than parsing it on a cache miss.
    """
    from drmix.io import file_digest

    return hashlib.sha1(f"{path.resolve()}:{file_digest(path)}".encode()).hexdigest()


def _unwrap(e: BaseException) -> BaseException | None:
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, DataError):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None


def load_jsonl_collection(path: str | Path, *, name: str | None = None, instruction: str | None = None,
                          weight: float | None = None) -> Collection:
    """Load one JSONL file into an Arrow-backed collection (streamed: rows never all sit in RAM)."""
    import datasets

    path = Path(path)
    if not path.is_file():
        raise DataError("collection file not found.", path=path, fix="check the path.")
    datasets.disable_progress_bars()
    try:
        ds = datasets.Dataset.from_generator(
            _jsonl_rows, features=_features(),
            gen_kwargs={"path": str(path), "fingerprint": _file_fingerprint(path)})
    except Exception as e:  # datasets wraps generator errors; surface ours
        inner = _unwrap(e)
        if inner is not None:
            raise inner from None
        if "corresponds to no data" in str(e):  # the generator yielded nothing
            raise DataError("collection is empty.", path=path, fix="add at least one example line.") from None
        raise
    finally:
        datasets.enable_progress_bars()
    if len(ds) == 0:
        raise DataError("collection is empty.", path=path, fix="add at least one example line.")
    return Collection(name=name or path.stem, dataset=ds, instruction=instruction, weight=weight, source=str(path))


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
    ds = datasets.Dataset.from_dict(rows, features=_features())
    return Collection(name=name or root.name, dataset=ds, instruction=instruction, weight=weight, source=str(root))


def load_saved_collection(root: str | Path, *, name: str | None = None, instruction: str | None = None,
                          weight: float | None = None) -> Collection:
    import datasets

    root = Path(root)
    ds = datasets.load_from_disk(str(root))
    missing = [c for c in COLUMNS if c not in ds.column_names]
    if missing:
        raise DataError(f"saved dataset lacks columns {missing}.", path=root,
                        fix="save a dataset with columns query, positives, negatives.")
    if len(ds) == 0:
        raise DataError("collection is empty.", path=root, fix="add examples.")
    return Collection(name=name or root.name, dataset=ds, instruction=instruction, weight=weight, source=str(root))


def _is_beir_dir(p: Path) -> bool:
    return (p / "corpus.jsonl").exists() and (p / "queries.jsonl").exists() and (p / "qrels").is_dir()


def _is_saved_dataset(p: Path) -> bool:
    return (p / "dataset_info.json").exists() or (p / "state.json").exists()


def _specs_from_yaml(path: Path) -> list[CollectionSpec]:
    raw = read_yaml(path)
    _allowed = set(CollectionSpec.model_fields)
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
            spec = spec.model_copy(update={"path": str(path.parent / p)})
        specs.append(spec)
    return specs


def load_collection_spec(spec: str | CollectionSpec, *, split: str | None = None,
                         _yaml_stack: tuple[Path, ...] = ()) -> list[Collection]:
    """Load the collection(s) one spec names (a directory of JSONL files or a YAML file gives several)."""
    if isinstance(spec, str):
        spec = CollectionSpec(path=spec)
    split = split or spec.split
    p = Path(spec.path).expanduser()
    kw = {"instruction": spec.instruction, "weight": spec.weight}
    if not p.exists():
        raise DataError("collection path does not exist.", path=p,
                        fix="give a JSONL file, a directory of JSONL files, a BEIR directory or a YAML list.")
    if p.is_file() and p.suffix in {".yaml", ".yml"}:
        key = p.resolve()
        if key in _yaml_stack:
            chain = " -> ".join(str(x) for x in (*_yaml_stack, key))
            raise DataError(f"collection lists include each other in a cycle ({chain}).", path=p,
                            fix="remove the entry that lists a file already on the way.")
        out = []
        for sub in _specs_from_yaml(p):
            out.extend(load_collection_spec(sub, split=split if split != "train" else None,
                                            _yaml_stack=(*_yaml_stack, key)))
        return out
    if p.is_file():
        return [load_jsonl_collection(p, name=spec.name, **kw)]
    if _is_beir_dir(p):
        return [load_beir_collection(p, split=split, name=spec.name, **kw)]
    if (p / "corpus.jsonl").is_file() and (p / "queries.jsonl").is_file():  # BEIR without judgements
        raise DataError("BEIR folder has corpus.jsonl and queries.jsonl but no qrels: training needs judged "
                        "query-document pairs.", path=p / "qrels" / f"{split}.tsv",
                        fix=f"add qrels/{split}.tsv (header query-id<TAB>corpus-id<TAB>score); for an unlabelled "
                            "corpus, build a collection with `drmix augment crop` (or generate) and `drmix augment "
                            "mine`.")
    if not p.is_dir():
        raise DataError("collection path is neither a file nor a folder.", path=p,
                        fix="give a JSONL file, a directory of JSONL files, a BEIR directory or a YAML list.")
    if _is_saved_dataset(p):
        return [load_saved_collection(p, name=spec.name, **kw)]
    files = sorted(f for f in p.iterdir() if f.suffix == ".jsonl" and f.is_file())
    if not files:
        raise DataError("directory holds no *.jsonl collections and is not a BEIR directory.", path=p,
                        fix="put one JSONL file per collection in it, or point at a BEIR directory.")
    if spec.name and len(files) > 1:
        log.warning("name %r ignored for directory %s with %d files", spec.name, p, len(files))
    return [load_jsonl_collection(f, name=spec.name if len(files) == 1 else None, **kw) for f in files]


def load_collections(specs: list[str | CollectionSpec], *, split: str | None = None,
                     max_size: int | None = None, seed: int = 0) -> list[Collection]:
    """Load every collection the specs name; names must be unique. ``max_size`` caps each (seeded sample)."""
    if not specs:
        raise DataError("no training data given.", fix="pass --data PATH (JSONL, directory, BEIR dir or YAML list).")
    out: list[Collection] = []
    for spec in specs:
        out.extend(load_collection_spec(spec, split=split))
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
    log.info("loaded %d collections: %s", len(out), ", ".join(f"{c.name} ({len(c)})" for c in out))
    return out


__all__ = ["Collection", "load_collections", "load_collection_spec", "load_jsonl_collection",
           "load_beir_collection", "parse_example", "apply_instruction"]

