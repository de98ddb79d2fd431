"""``drmix search`` as library calls: the queries (texts, a query file, or a BEIR split's judged queries), the
index of any backend with its query model, the hits shaped as rows, and the run written as JSONL or TREC.

* :func:`open_searched` opens an index with its backend and loads the model it records (or the one given, which
  must be the same: :func:`drmix.retrieval.backends.base.check_model`);
* :func:`select_queries` gives the queries of ``--query`` / ``--queries`` / ``--data``, restricted to the queries
  a split's (``--split``) or a file's (``--qrels``) relevance judgements name -- exactly those, as BEIR's
  evaluation and ranx / pytrec_eval expect a run to hold;
* :func:`search_results` and :func:`multi_corpus_rows` answer them as rows
  ``{"query_id", "query", "hits": [{"rank", "doc_id", "score", "text"?}]}``; :func:`write_run` writes the rows.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from drmix.errors import ConfigError, DataError, ModelError
from drmix.retrieval.backends.base import Index, backend_for, check_model

log = logging.getLogger(__name__)


def location_path(location: str | None) -> Path | None:
    """The folder or file on this machine that holds the index at ``location`` (for the output checks)."""
    from drmix.retrieval.build import local_path

    return None if location is None else local_path(backend_for(location), location)


def index_model(stored: str | None, where: Path | str) -> str | None:
    """The model an index names, checked: a local path that is gone is a clear error, not a Hub lookup."""
    if not stored or stored == "default":
        return None
    p = Path(stored).expanduser()
    if p.exists() or (stored.count("/") == 1 and not stored.startswith((".", "/", "~"))) or "/" not in stored:
        return stored  # a folder, or a hub id ("org/name", "name")
    meta = Path(where) / "meta.json" if Path(where).is_dir() else where
    raise ModelError(f"the index was built with the model {stored}, which does not exist here"
                     + ("" if p.is_absolute() else f" (a relative path, read from {Path.cwd()})") + ".",
                     path=meta, fix="pass --model with the model folder, or rebuild the index with drmix index.")


def open_searched(location: str, model: str | None, model_kwargs: dict[str, Any] | None = None) -> tuple[Index, Any]:
    """Open the index at ``location`` with its backend and load its query model: ``model``, else the one the
    index records; refused when it is not the model the index was built with."""
    from drmix.model.encoder import load_encoder

    index = backend_for(location).open(location)
    encoder = load_encoder(model or index_model(index.metadata.get("model"), location_path(location) or location),
                           model_kwargs=model_kwargs or {})
    check_model(index.metadata, encoder, where=location)
    return index, encoder


# ----------------------------------------------------------------------------------------------- queries

def read_query_file(path: Path) -> dict[str, str]:
    """Queries from ``.jsonl`` (``_id``, ``text``) or a text file with one query per line (ids 1, 2, ...)."""
    from drmix.data.beir import read_queries
    from drmix.io.read import iter_lines

    path = Path(path).expanduser()
    if path.suffix == ".jsonl":
        queries = read_queries(path)
    else:
        queries = {str(i): text.strip() for i, (_, text) in enumerate(iter_lines(path), start=1)}
    if not queries:
        raise DataError("query file holds no queries.", path=path, fix="write one query per line (.txt) or "
                        'one {"_id", "text"} object per line (.jsonl).')
    return queries


def select_queries(*, query: Sequence[str] | None = None, queries: Path | None = None, data: Path | None = None,
                   split: str | None = None, qrels: Path | None = None) -> dict[str, str]:
    """The queries to search, ``{id: text}``: the texts of ``query`` (ids 1, 2, ...), the file ``queries``, or
    the BEIR directory ``data``'s queries judged in its ``split`` (default test); with ``qrels`` (a qrels TSV),
    exactly the queries it judges, in its order."""
    from drmix.data.beir import load_beir, read_qrels

    given = [flag for flag, value in (("--query", query), ("--queries", queries), ("--data", data)) if value]
    if len(given) != 1:
        raise ConfigError(f"give the queries one way; {'got ' + ', '.join(given) if given else 'none given'}.",
                          fix="pass --query TEXT (repeatable), --queries FILE, or --data BEIR_DIR [--split NAME].")
    if split is not None and data is None:
        raise ConfigError("--split names a split of a BEIR directory: give --data.",
                          fix="pass --data BEIR_DIR --split NAME, or --queries FILE --qrels QRELS.tsv.")
    if qrels is not None and query:
        raise ConfigError("--qrels selects the judged queries of a query file; --query texts have no ids.",
                          fix="pass --queries FILE (or --data BEIR_DIR) with --qrels.")
    if query:
        return {str(i): q for i, q in enumerate(query, 1)}
    if data is not None and qrels is None:
        dataset = load_beir(data, split or "test", load_corpus=False)
        log.info("searching the %d queries judged in %s's %s split", len(dataset.queries), dataset.name,
                 dataset.split)
        return dataset.queries
    texts = read_query_file(queries) if queries is not None else load_beir(data, None, load_corpus=False).queries
    if qrels is None:
        return texts
    judged = read_qrels(qrels)
    missing = [q for q in judged if q not in texts]
    if missing:
        raise DataError(f"the qrels judge {len(missing)} queries that are not among the {len(texts)} queries given "
                        f"(first: {missing[0]!r}).", path=qrels,
                        fix="pass the query file these judgements are for.")
    log.info("searching the %d queries judged in %s (of %d given)", len(judged), qrels, len(texts))
    return {q: texts[q] for q in judged}


def search_prompt(model: Any, instruction: str | None, prompt_name: str | None) -> str | None:
    """The query prompt of ``drmix search``: the model's query prompt + ``instruction``, else the folder's prompt
    named ``prompt_name``, else None (the model's query prompt)."""
    from drmix.model.instructions import query_prompt_for

    if instruction is not None and prompt_name is not None:
        raise ConfigError("give --query-instruction or --prompt-name, not both.", fix="drop one of them.")
    if instruction is not None:
        return query_prompt_for(model, None, explicit=instruction)
    if prompt_name is not None:
        prompts = getattr(model, "prompts", None) or {}
        if prompt_name not in prompts:
            raise ConfigError(f"the model has no prompt named {prompt_name!r}.",
                              fix=f"use one of {sorted(prompts) or '(none saved)'}, or --query-instruction TEXT.")
        return prompts[prompt_name]
    return None


# ----------------------------------------------------------------------------------------------- hits

def search_results(model: Any, index: Any, queries: Mapping[str, str], k: int, *, batch_size: int = 64,
                   with_text: bool = True, precision: str = "auto", prompt: str | None = None) -> list[dict[str, Any]]:
    """Search and shape the hits: ``[{"query_id", "query", "hits": [{"rank", "doc_id", "score", ...}]}]``."""
    from drmix.data.beir import doc_text
    from drmix.retrieval.index import search_queries

    run = search_queries(model, index, queries, k=k, batch_size=batch_size, precision=precision, prompt=prompt)
    rows = []
    for qid, docs in run.items():
        hits = []
        for rank, (doc_id, score) in enumerate(sorted(docs.items(), key=lambda kv: -kv[1]), start=1):
            hit: dict[str, Any] = {"rank": rank, "doc_id": doc_id, "score": round(score, 6)}
            doc = index.doc(doc_id) if with_text else None
            if doc is not None:
                hit["text"] = doc_text(doc)
            hits.append(hit)
        rows.append({"query_id": qid, "query": queries[qid], "hits": hits})
    return rows


def multi_corpus_rows(encoder: Any, corpus: list[str], texts: dict[str, str], prompt: str | None, *, k: int,
                      allocation: str, depth: int, batch_size: int, with_text: bool = True) -> list[dict[str, Any]]:
    """``drmix search --corpus``: the hits of ``texts`` over several corpora (the rows show the texts as given)."""
    from drmix.model.encoder import query_prompt
    from drmix.retrieval.multi import multi_search, parse_corpus_args

    shown = texts
    if prompt is not None:  # the searchers add the model's query prompt; the instruction goes after it
        base = query_prompt(encoder)
        if not prompt.startswith(base):
            raise ConfigError("this prompt cannot be combined with --corpus.",
                              fix="use --query-instruction, or search one --index.")
        texts = {q: prompt[len(base):] + t for q, t in texts.items()}
    rows = multi_search(encoder, parse_corpus_args(corpus), texts, k=k, allocation=allocation, depth=depth,
                        batch_size=batch_size, with_text=with_text)
    for r in rows:
        r["query"] = shown.get(r["query_id"], r["query"])
    return rows


def write_run(rows: list[dict[str, Any]], run_format: str, output: Path) -> str:
    """Write the rows to ``output`` as a run file: ``jsonl`` (the rows without their texts) or ``trec``; returns
    the one-line summary of what was written."""
    from drmix.io.atomic import write_jsonl_atomic
    from drmix.retrieval.trec import write_trec_run

    if run_format == "trec":
        write_trec_run(output, rows)
    else:
        write_jsonl_atomic(output, [{**r, "hits": [{k: v for k, v in h.items() if k != "text"} for h in r["hits"]]}
                                    for r in rows])
    hits = sum(len(r["hits"]) for r in rows)
    return f"wrote {hits} hits of {len(rows)} queries to {output} ({run_format})"
