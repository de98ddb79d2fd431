"""TREC run files: what ``trec_eval``, pyserini and ranx read and write.

One line per retrieved document, six whitespace-separated fields::

    query_id Q0 doc_id rank score tag

``drmix search --format trec`` writes them (:func:`trec_lines`, :func:`write_trec_run`) and ``drmix eval --run``
scores them (:func:`read_run`, which also reads the JSONL run ``drmix search --output`` writes). trec_eval ranks by
score, not by the rank column, so the score is written with every digit drmix has; the rank column is 1-based.
A hit of a multi-corpus search (``--corpus NAME=DIR``) is written as ``NAME/doc_id``, as the tables show it.
"""
from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from enum import Enum
from pathlib import Path
from typing import Any

from drmix.errors import DataError

class RunFormat(str, Enum):
    """The choices of ``drmix search --format``."""

    jsonl = "jsonl"
    trec = "trec"


#: the last field of every line when no tag is given
DEFAULT_TAG = "drmix"


def _check_field(value: str, what: str) -> str:
    if not value or any(c.isspace() for c in value):
        raise DataError(f"a TREC run {what} cannot be empty or hold whitespace ({value!r}).",
                        fix="give ids without spaces (a TREC run separates its fields by whitespace).")
    return value


def trec_lines(rows: Iterable[Mapping[str, Any]], *, tag: str = DEFAULT_TAG) -> list[str]:
    """The run lines of ``drmix search`` result rows (``{"query_id", "hits": [{"rank", "doc_id", "score"}]}``)."""
    _check_field(tag, "tag")
    out = []
    for row in rows:
        qid = _check_field(str(row["query_id"]), "query id")
        for i, hit in enumerate(row["hits"], start=1):
            doc = f"{hit['corpus']}/{hit['doc_id']}" if "corpus" in hit else str(hit["doc_id"])
            out.append(f"{qid} Q0 {_check_field(doc, 'document id')} {hit.get('rank', i)} {float(hit['score'])!r} "
                       f"{tag}")
    return out


def write_trec_run(path: str | Path, rows: Iterable[Mapping[str, Any]], *, tag: str = DEFAULT_TAG) -> None:
    """Write the rows as a TREC run file, atomically (a reader never sees half of it)."""
    from drmix.io.atomic import atomic_write_text

    lines = trec_lines(rows, tag=tag)
    atomic_write_text(path, "".join(line + "\n" for line in lines))


def read_trec_run(path: str | Path) -> dict[str, dict[str, float]]:
    """``{query_id: {doc_id: score}}`` from a TREC run file; a malformed line is a :class:`DataError` naming it."""
    from drmix.io.read import iter_lines

    run: dict[str, dict[str, float]] = {}
    for n, line in iter_lines(path):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        if len(fields) != 6:
            raise DataError(f"a TREC run line has 6 fields (query_id Q0 doc_id rank score tag), this one has "
                            f"{len(fields)}.", path=path, line=n,
                            fix="write the run in TREC format (drmix search --format trec writes one).")
        qid, _, doc, _, score, _ = fields
        try:
            value = float(score)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise DataError(f"the score {score!r} is not a finite number.", path=path, line=n,
                            fix="the fifth field of a TREC run line is the document's score.")
        docs = run.setdefault(qid, {})
        if doc in docs:
            raise DataError(f"document {doc!r} is listed twice for query {qid!r}.", path=path, line=n,
                            fix="keep one line per query and document.")
        docs[doc] = value
    if not run:
        raise DataError("the run file holds no ranking.", path=path,
                        fix="pass a TREC run (query_id Q0 doc_id rank score tag per line) or a drmix search "
                            "--output JSONL file.")
    return run


def read_jsonl_run(path: str | Path) -> dict[str, dict[str, float]]:
    """``{query_id: {doc_id: score}}`` from the JSONL run ``drmix search --output`` writes."""
    from drmix.io.read import iter_lines

    run: dict[str, dict[str, float]] = {}
    for n, line in iter_lines(path):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            hits = row["hits"]
            docs = {(f"{h['corpus']}/{h['doc_id']}" if "corpus" in h else str(h["doc_id"])): float(h["score"])
                    for h in hits}
            run[str(row["query_id"])] = docs
        except (ValueError, KeyError, TypeError) as e:
            raise DataError(f"not a drmix search result line ({type(e).__name__}: {e}).", path=path, line=n,
                            fix='each line needs {"query_id": ..., "hits": [{"doc_id": ..., "score": ...}]}; '
                                "or pass a TREC run file.") from None
    if not run:
        raise DataError("the run file holds no ranking.", path=path,
                        fix="pass a TREC run or a drmix search --output JSONL file.")
    return run


def read_run(path: str | Path) -> dict[str, dict[str, float]]:
    """A TREC run file, or a drmix JSONL run (a first non-blank character ``{``)."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise DataError("run file not found.", path=p, fix="pass the file drmix search --output (or trec_eval's "
                                                           "tools) wrote.")
    with p.open("rb") as f:
        head = f.read(4096).lstrip()
    return read_jsonl_run(p) if head.startswith(b"{") else read_trec_run(p)
