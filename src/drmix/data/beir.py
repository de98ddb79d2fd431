"""BEIR-format retrieval datasets: load, validate and write.

A BEIR directory holds ``corpus.jsonl`` (``_id``, ``title``, ``text``), ``queries.jsonl`` (``_id``,
``text``) and ``qrels/{split}.tsv`` (header ``query-id<TAB>corpus-id<TAB>score``), the layout of the
BEIR benchmark (Thakur et al., 2021). The official files use CRLF line endings in the qrels; both
CRLF and LF are read.

Written by hand rather than with ``beir.datasets.GenericDataLoader`` because that loader neither
reports the file and line of a bad record nor checks that qrels name existing ids, and the ``beir``
package pulls in heavy extras; the format is three small line-oriented files.

Conventions (same as BEIR's loader): a document's text for encoding is ``(title + " " + text).strip()``
(:func:`doc_text`); when a split is given only the queries that appear in that split's qrels are
kept; qrels rows with score 0 are kept (they are judged non-relevant, which nDCG and the binary
metrics handle).
"""
from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from drmix.errors import DataError
from drmix.io.atomic import atomic_dir
from drmix.io.read import iter_jsonl, iter_lines

log = logging.getLogger(__name__)

CORPUS_FILE = "corpus.jsonl"
QUERIES_FILE = "queries.jsonl"
QRELS_DIR = "qrels"
QRELS_HEADER = ("query-id", "corpus-id", "score")


@dataclass
class BeirDataset:
    """One BEIR dataset held in memory. ``corpus`` is empty when loaded with ``load_corpus=False``."""

    root: Path
    corpus: dict[str, dict[str, str]] = field(default_factory=dict)
    queries: dict[str, str] = field(default_factory=dict)
    qrels: dict[str, dict[str, int]] = field(default_factory=dict)
    split: str | None = None

    @property
    def name(self) -> str:
        """The directory name (``scifact`` for ``.../scifact``), used as the dataset's label."""
        return self.root.name


def doc_text(doc: Mapping[str, str]) -> str:
    """BEIR convention: ``(title + " " + text).strip()``."""
    return (f"{doc.get('title') or ''} {doc.get('text') or ''}").strip()


def available_splits(root: str | Path) -> list[str]:
    """Names of the splits with a ``qrels/{split}.tsv`` file, sorted (empty when there is none)."""
    qdir = Path(root) / QRELS_DIR
    if not qdir.is_dir():
        return []
    return sorted(p.stem for p in qdir.glob("*.tsv") if p.is_file())


def load_beir(root: str | Path, split: str | None = "test", *, load_corpus: bool = True) -> BeirDataset:
    """Load and validate a BEIR directory.

    With ``split=None`` every query is loaded and ``qrels`` is empty. With ``load_corpus=False`` the
    corpus is not read (and qrels document ids are not checked against it).
    Raises :class:`DataError` naming the file and line for any malformed or inconsistent record.
    """
    from drmix.errors import path_argument, wrong_argument

    root = path_argument("load_beir", "root", root, fix="pass a BEIR folder: load_beir('beir/scifact').").expanduser()
    if split is not None and not isinstance(split, str):
        raise wrong_argument("load_beir", "split", split, "a split name or None",
                             fix="pass split='test' (a qrels/{split}.tsv file), or None for every query.")
    if not root.is_dir():
        raise DataError("BEIR directory not found.", path=root,
                        fix="pass a directory holding corpus.jsonl, queries.jsonl and qrels/{split}.tsv.")
    qrels: dict[str, dict[str, int]] = {}
    qrels_path = None
    if split is not None:
        qrels_path = _qrels_path(root, split)
        qrels = read_qrels(qrels_path)
    queries = read_queries(root / QUERIES_FILE)
    corpus = read_corpus(root / CORPUS_FILE) if load_corpus else {}
    if qrels_path is not None:
        _check_qrels_ids(qrels_path, qrels, queries, corpus if load_corpus else None)
        queries = {qid: queries[qid] for qid in qrels}
    docs = f"{len(corpus)} docs" if load_corpus else "corpus not read"
    log.info("loaded %s: %s, %d queries, %d judged queries (split %s)", root, docs, len(queries), len(qrels), split)
    return BeirDataset(root=root, corpus=corpus, queries=queries, qrels=qrels, split=split)


def _qrels_path(root: Path, split: str) -> Path:
    path = root / QRELS_DIR / f"{split}.tsv"
    if not path.is_file():
        splits = available_splits(root)
        fix = (f"use one of the available splits: {', '.join(splits)}." if splits
               else "add qrels/{split}.tsv with the header query-id<TAB>corpus-id<TAB>score.")
        raise DataError(f"split {split!r} has no qrels file.", path=path, fix=fix)
    return path


def _record_id(path: Path, line: int, obj: dict) -> str:
    if "_id" not in obj:
        raise DataError("record has no '_id'.", path=path, line=line, fix='give every record an "_id" field.')
    value = obj["_id"]
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise DataError(f"'_id' must be a string, got {type(value).__name__}.", path=path, line=line,
                        fix='write ids as JSON strings, e.g. "_id": "42".')
    value = str(value)
    if not value:
        raise DataError("'_id' is empty.", path=path, line=line, fix="give every record a non-empty id.")
    return value


def _string_field(path: Path, line: int, obj: dict, key: str, *, required: bool) -> str:
    if key not in obj or obj[key] is None:
        if required:
            raise DataError(f"record has no {key!r}.", path=path, line=line,
                            fix=f'give every record a "{key}" string field.')
        return ""
    value = obj[key]
    if not isinstance(value, str):
        raise DataError(f"{key!r} must be a string, got {type(value).__name__}.", path=path, line=line,
                        fix=f'write "{key}" as a JSON string.')
    return value


def read_corpus(path: str | Path) -> dict[str, dict[str, str]]:
    """Read ``corpus.jsonl`` into ``{doc_id: {"title", "text"}}`` (extra fields such as metadata dropped)."""
    path = Path(path)
    if not path.is_file():
        raise DataError("corpus file not found.", path=path,
                        fix='write corpus.jsonl with one {"_id", "title", "text"} object per line.')
    corpus: dict[str, dict[str, str]] = {}
    first_line: dict[str, int] = {}
    for line, obj in iter_jsonl(path):
        doc_id = _record_id(path, line, obj)
        if doc_id in corpus:
            raise DataError(f"duplicate document id {doc_id!r} (first on line {first_line[doc_id]}).", path=path,
                            line=line, fix="give every document a unique _id.")
        corpus[doc_id] = {"title": _string_field(path, line, obj, "title", required=False),
                          "text": _string_field(path, line, obj, "text", required=True)}
        first_line[doc_id] = line
    if not corpus:
        raise DataError("corpus is empty.", path=path, fix="add at least one document.")
    return corpus


#: the id that opens a BEIR record as BEIR writes it (``{"_id": "42", ...``): plain, without escapes
_LEADING_ID = re.compile(rb'\s*\{\s*"_id"\s*:\s*"([^"\\]*)"')


def read_corpus_ids(path: str | Path) -> set[str]:
    """The document ids of ``corpus.jsonl`` without parsing its texts: the id that opens a line is read by a
    pattern, any other line is parsed whole (:func:`_record_id`'s errors)."""
    path = Path(path)
    ids: set[str] = set()
    with open(path, "rb") as f:
        for line, raw in enumerate(f, start=1):
            m = _LEADING_ID.match(raw)
            if m is not None:
                ids.add(m.group(1).decode("utf-8", "replace"))
            elif raw.strip():
                try:
                    obj = json.loads(raw)
                except ValueError:
                    raise DataError("line is not valid JSON.", path=path, line=line,
                                    fix="write one JSON object per line.") from None
                if isinstance(obj, dict):
                    ids.add(_record_id(path, line, obj))
    return ids


def read_queries(path: str | Path) -> dict[str, str]:
    """Read ``queries.jsonl`` into ``{query_id: text}``."""
    path = Path(path)
    if not path.is_file():
        raise DataError("queries file not found.", path=path,
                        fix='write queries.jsonl with one {"_id", "text"} object per line.')
    queries: dict[str, str] = {}
    first_line: dict[str, int] = {}
    for line, obj in iter_jsonl(path):
        qid = _record_id(path, line, obj)
        if qid in queries:
            raise DataError(f"duplicate query id {qid!r} (first on line {first_line[qid]}).", path=path, line=line,
                            fix="give every query a unique _id.")
        queries[qid] = _string_field(path, line, obj, "text", required=True)
        first_line[qid] = line
    return queries


def read_qrels(path: str | Path) -> dict[str, dict[str, int]]:
    """Read a BEIR qrels TSV (``query-id corpus-id score``, header optional, CRLF tolerated)."""
    path = Path(path)
    qrels: dict[str, dict[str, int]] = {}
    first = True
    for line, text in iter_lines(path):
        cols = text.split("\t")
        if len(cols) != 3:
            raise DataError(f"expected 3 tab-separated columns (query-id, corpus-id, score), got {len(cols)}.",
                            path=path, line=line, fix="write one 'query-id<TAB>corpus-id<TAB>score' row per line.")
        qid, did, score = (c.strip() for c in cols)
        try:
            rel = int(score)
        except ValueError:
            if first:  # a header row (BEIR writes query-id, corpus-id, score)
                first = False
                continue
            raise DataError(f"score {score!r} is not an integer.", path=path, line=line,
                            fix="write relevance scores as integers (0, 1, 2, ...).") from None
        first = False
        if not qid or not did:
            raise DataError("empty query or corpus id.", path=path, line=line, fix="fill in both ids.")
        qrels.setdefault(qid, {})[did] = rel
    if not qrels:
        raise DataError("qrels file has no judgements (empty split).", path=path,
                        fix="add 'query-id<TAB>corpus-id<TAB>score' rows, or choose another split.")
    return qrels


def _check_qrels_ids(path: Path, qrels: dict[str, dict[str, int]], queries: Mapping[str, str],
                     corpus: Mapping[str, object] | None) -> None:
    """Raise naming the first qrels line whose query (or document) id is unknown."""
    bad_q = next((q for q in qrels if q not in queries), None)
    bad_d = None
    if corpus is not None:
        bad_d = next(((q, d) for q, docs in qrels.items() for d in docs if d not in corpus), None)
    if bad_q is None and bad_d is None:
        return
    for line, text in iter_lines(path):
        cols = [c.strip() for c in text.split("\t")]
        if bad_q is not None and cols[0] == bad_q:
            n = sum(q not in queries for q in qrels)
            raise DataError(f"qrels name query id {bad_q!r} that is not in {QUERIES_FILE} ({n} unknown queries).",
                            path=path, line=line, fix=f"add the query to {QUERIES_FILE} or remove its qrels rows.")
        if bad_d is not None and bad_q is None and cols[0] == bad_d[0] and cols[1] == bad_d[1]:
            raise DataError(f"qrels name document id {bad_d[1]!r} that is not in {CORPUS_FILE}.", path=path,
                            line=line, fix=f"add the document to {CORPUS_FILE} or remove its qrels rows.")
    # not reached: the offending row is always found above
    raise DataError("qrels name unknown ids.", path=path, fix="check the ids against corpus and queries.")


def write_beir(root: str | Path, corpus: Mapping[str, Mapping[str, str]], queries: Mapping[str, str],
               qrels: Mapping[str, Mapping[str, Mapping[str, int]]]) -> Path:
    """Write a BEIR directory atomically; ``qrels`` maps split name -> query id -> doc id -> score."""
    import json

    root = Path(root)
    with atomic_dir(root) as tmp:
        with open(tmp / CORPUS_FILE, "w", encoding="utf-8", newline="\n") as f:
            for doc_id, doc in corpus.items():
                row = {"_id": str(doc_id), "title": doc.get("title", "") or "", "text": doc.get("text", "") or ""}
                row.update({k: v for k, v in doc.items() if k not in row and k != "_id"})
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        with open(tmp / QUERIES_FILE, "w", encoding="utf-8", newline="\n") as f:
            for qid, text in queries.items():
                f.write(json.dumps({"_id": str(qid), "text": text}, ensure_ascii=False) + "\n")
        (tmp / QRELS_DIR).mkdir()
        for split, split_qrels in qrels.items():
            with open(tmp / QRELS_DIR / f"{split}.tsv", "w", encoding="utf-8", newline="\n") as f:
                f.write("\t".join(QRELS_HEADER) + "\n")
                for qid, docs in split_qrels.items():
                    for did, score in docs.items():
                        f.write(f"{qid}\t{did}\t{int(score)}\n")
    return root
