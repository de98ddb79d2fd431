"""CLI commands ``drmix index``, ``drmix search`` and ``drmix eval``.

Each command body only parses options and calls library functions (:mod:`drmix.retrieval.encode`,
:mod:`drmix.retrieval.index`, :mod:`drmix.evaluation.evaluate`), so other front ends (multi-corpus search) can
reuse the same calls.
Errors are :class:`drmix.errors.DrmixError`; the main app turns them into one line and exit code 2.
"""
from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Any, Optional

import typer

from drmix.cli.areas import CommandArea, register_area
from drmix.cli.encoding import cache_embeddings_option, encoding, tokenize_num_proc_option
from drmix.cli.options import (ATTN_HELP, PROMPTS_HELP, QUERY_INSTRUCTION_HELP, TORCH_DTYPE_HELP, model_kwargs,
                               report_output_option, report_overwrite_option)
from drmix.data.corpus import corpus_file as resolve_corpus_file
from drmix.errors import ConfigError, DataError
from drmix.retrieval.backends.base import DEFAULT_BACKEND
from drmix.retrieval.multi.registry import search_policy_usage
from drmix.retrieval.trec import RunFormat

SNIPPET_CHARS = 160


class IndexKind(str, Enum):
    flat = "flat"
    hnsw = "hnsw"
    ivf = "ivf"
    ivf_pq = "ivf-pq"
    ivf_flat = "ivf-flat"
    ivf_sq8 = "ivf-sq8"
    hnsw_sq = "hnsw-sq"


class IndexBackend(str, Enum):
    """The built-in index backends (drmix.retrieval.backends); a plug-in backend is used from Python."""

    memory = "memory"
    faiss_disk = "faiss-disk"
    milvus = "milvus"


KIND_HELP = ("Index type. memory: flat (exact, default), hnsw, ivf; faiss-disk: ivf-pq (default), ivf-flat; "
             "milvus: flat (default), ivf-flat, ivf-sq8, hnsw, hnsw-sq (docs/evaluation.md).")
BACKEND_HELP = ("Where the index lives: memory (a folder loaded into RAM), faiss-disk (a folder of on-disk IVF "
                "lists, memory-mapped at search) or milvus (a collection in Milvus Lite for --uri PATH.db, or in "
                "a Milvus server for --uri http://HOST:19530; token from MILVUS_TOKEN).")
LOCATION_HELP = ("An index: a folder written by drmix index (memory or faiss-disk), or a Milvus collection as "
                 "PATH.db#COLLECTION or http://HOST:19530#COLLECTION (#COLLECTION may be left out when the URI "
                 "holds one).")


class EncodingPrecision(str, Enum):
    """The choices of --precision (encoding; training precision is drmix.train.precision.Precision)."""

    auto = "auto"
    fp32 = "fp32"
    fp16 = "fp16"
    bf16 = "bf16"
    int8 = "int8"
    onnx = "onnx"
    onnx_int8 = "onnx-int8"


PRECISION_HELP = ("Encoding precision: auto (fp16/bf16 on a GPU, fp32 on CPU), fp32, fp16, bf16, int8 "
                  "(CPU, torch dynamic quantisation), onnx or onnx-int8 (CPU, ONNX Runtime, fp32 or per-channel "
                  "int8; needs drmix[onnx]). Quality changes: docs/benchmarks.md.")


def _console():
    from drmix.cli import make_console

    return make_console()


def read_query_file(path: Path) -> dict[str, str]:
    """Queries from ``.jsonl`` (``_id``, ``text``) or a text file with one query per line (ids 1, 2, ...)."""
    from drmix.data.beir import read_queries
    from drmix.io import iter_lines

    path = path.expanduser()
    if path.suffix == ".jsonl":
        queries = read_queries(path)
    else:
        queries = {str(i): text.strip() for i, (_, text) in enumerate(iter_lines(path), start=1)}
    if not queries:
        raise DataError("query file holds no queries.", path=path, fix="write one query per line (.txt) or "
                        'one {"_id", "text"} object per line (.jsonl).')
    return queries


def _search_prompt(model: Any, instruction: str | None, prompt_name: str | None) -> str | None:
    """The query prompt of drmix search: the model's query prompt + --query-instruction, else the folder's
    --prompt-name, else None (the model's query prompt)."""
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


def search_results(model: Any, index: Any, queries: dict[str, str], k: int, *, batch_size: int = 64,
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


def _print_results(rows: list[dict[str, Any]]) -> None:
    from rich.table import Table

    console = _console()
    for row in rows:
        table = Table(title=f"[{row['query_id']}] {row['query']}", title_justify="left")
        table.add_column("rank", justify="right")
        table.add_column("id")
        table.add_column("score", justify="right")
        table.add_column("text")
        for hit in row["hits"]:
            text = hit.get("text", "")
            snippet = text if len(text) <= SNIPPET_CHARS else text[:SNIPPET_CHARS - 1] + "…"
            doc_id = f"{hit['corpus']}/{hit['doc_id']}" if "corpus" in hit else hit["doc_id"]
            table.add_row(str(hit["rank"]), doc_id, f"{hit['score']:.4f}", snippet)
        console.print(table)


def print_report(report: Any) -> None:
    from rich.table import Table

    table = Table(title=f"{report.model} — {report.split}", title_justify="left")
    table.add_column("dataset")
    for m in report.metrics:
        table.add_column(m, justify="right")
    for name, row in report.rows():
        table.add_row(report.label(name) if hasattr(report, "label") else name,
                      *(f"{row[m]:.4f}" if m in row else "" for m in report.metrics))
    _console().print(table)


def index_command(
    corpus: Path = typer.Option(..., "--corpus", help="BEIR directory (its corpus.jsonl is used) or a corpus "
                                                      ".jsonl file with _id, title, text."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Directory to write the index to "
                                          "(backends memory and faiss-disk; replaced atomically; a non-empty folder "
                                          "that is not an index is refused)."),
    backend: IndexBackend = typer.Option(IndexBackend(DEFAULT_BACKEND), "--backend", help=BACKEND_HELP),
    uri: Optional[str] = typer.Option(None, "--uri", help="milvus: a Milvus Lite file (a path ending in .db, "
                                      "created when missing) or a server's http://HOST:19530."),
    collection: Optional[str] = typer.Option(None, "--collection", help="milvus: the collection to write "
                                             "(default: the corpus folder's name)."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="SentenceTransformer folder, drmix run "
                                                                   "directory or hub id; default all-MiniLM-L6-v2."),
    kind: Optional[IndexKind] = typer.Option(None, "--kind", help=KIND_HELP),
    batch_size: int = typer.Option(64, "--batch-size", min=1, help="Texts per encoding batch."),
    max_length: Optional[int] = typer.Option(None, "--max-length", min=1, help="Token cap per document "
                                                                              "(default: the model's)."),
    hnsw_m: int = typer.Option(32, "--hnsw-m", min=2, help="HNSW: neighbours per node."),
    ef_construction: int = typer.Option(200, "--ef-construction", min=1, help="HNSW: build-time candidate list."),
    ef_search: int = typer.Option(128, "--ef-search", min=1, help="HNSW: search-time candidate list "
                                                                   "(raised to k when smaller)."),
    nlist: Optional[int] = typer.Option(None, "--nlist", min=1, help="IVF: clusters (default 4*sqrt(n), at most "
                                                                    "n/39)."),
    nprobe: Optional[int] = typer.Option(None, "--nprobe", min=1, help="IVF: clusters searched per query "
                                         "(default 16 in memory, 32 for faiss-disk and milvus)."),
    pq_m: Optional[int] = typer.Option(None, "--pq-m", min=1, help="faiss-disk ivf-pq: sub-quantisers, bytes per "
                                       "vector (default: the largest divisor of the dimension <= dim/8, 48 for "
                                       "384-d)."),
    rerank: int = typer.Option(10, "--rerank", min=0, help="faiss-disk ivf-pq: re-score the top rerank*k PQ "
                               "candidates exactly from the vectors kept on disk (0: PQ scores only, the vectors "
                               "are not kept)."),
    chunk_size: int = typer.Option(100_000, "--chunk-size", min=1, help="faiss-disk and milvus: documents encoded "
                                   "and added per chunk (the vectors held in RAM while building)."),
    no_texts: bool = typer.Option(False, "--no-texts", help="Do not store document texts (search then shows ids "
                                                           "and scores only)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a non-empty --output folder that is not "
                                                             "an index (its contents are deleted)."),
    precision: EncodingPrecision = typer.Option(EncodingPrecision.auto, "--precision", help=PRECISION_HELP),
    torch_dtype: Optional[str] = typer.Option(None, "--torch-dtype", help=TORCH_DTYPE_HELP),
    attn_implementation: Optional[str] = typer.Option(None, "--attn-implementation", help=ATTN_HELP),
    tokenize_num_proc: Optional[int] = tokenize_num_proc_option(),
    cache_embeddings: bool = cache_embeddings_option(),
    estimate: bool = typer.Option(False, "--estimate", help="Print the hours encoding this corpus takes on one GPU "
                                  "and on --gpus GPUs, then stop: at the rate --model encodes its passages on the "
                                  "GPU here (measured: seconds), else at an assumed rate and, measured, on this "
                                  "machine's CPU; each rate says which."),
    gpus: int = typer.Option(8, "--gpus", min=1, help="With --estimate: the GPU count to estimate besides one."),
    passages_per_s: Optional[float] = typer.Option(None, "--passages-per-s", min=0.001, help="With --estimate: "
                                                   "your measured passages/s per GPU (default: measured on the GPU "
                                                   "here, else an assumed 900, one H200)."),
) -> None:
    """Encode a corpus into an index that drmix search can query: in RAM (exact torch search, FAISS HNSW/IVF),
    FAISS IVF on disk, or a Milvus collection (embedded Milvus Lite or a Milvus server).

    Under torchrun / accelerate launch every process encodes one shard of the corpus into OUTPUT.shards
    (a rerun encodes only the missing shards) and the first merges them into the index (memory backend) or
    streams them, --chunk-size rows at a time, into the faiss-disk or milvus index."""
    if estimate:
        from drmix.cli.sharded import print_estimate

        return print_estimate(resolve_corpus_file(corpus), gpus=gpus, rate=passages_per_s, echo=typer.echo,
                              model=model, max_length=max_length)
    if backend is not IndexBackend.memory:
        with encoding(tokenize_num_proc, cache_embeddings):
            return _index_backend(corpus, output, backend.value, uri=uri, collection=collection, model=model,
                                  kind=kind.value if kind else None, batch_size=batch_size, max_length=max_length,
                                  params={"M": hnsw_m, "ef_construction": ef_construction, "ef_search": ef_search,
                                          "nlist": nlist, "nprobe": nprobe, "pq_m": pq_m, "rerank": rerank,
                                          "chunk_size": chunk_size},
                                  store_texts=not no_texts, overwrite=overwrite, precision=precision.value,
                                  kwargs=model_kwargs(torch_dtype, attn_implementation))
    if output is None or uri is not None or collection is not None:
        raise ConfigError("the memory backend writes a folder: give --output DIR (--uri and --collection are for "
                          "--backend milvus).", fix="pass --output DIR, or --backend milvus --uri PATH.db.")
    kind = kind or IndexKind.flat
    if kind not in (IndexKind.flat, IndexKind.hnsw, IndexKind.ivf):
        raise ConfigError(f"--kind {kind.value} is not a memory index type.",
                          fix="pass --kind flat, hnsw or ivf, or --backend faiss-disk / milvus.")
    nprobe = 16 if nprobe is None else nprobe
    params: dict[str, Any] = {}
    if kind is IndexKind.hnsw:
        params = {"M": hnsw_m, "ef_construction": ef_construction, "ef_search": ef_search}
    elif kind is IndexKind.ivf:
        params = {"nlist": nlist, "nprobe": nprobe}
    with encoding(tokenize_num_proc, cache_embeddings):
        _index_memory(corpus, output, model, kind.value, params, batch_size=batch_size, max_length=max_length,
                      store_texts=not no_texts, precision=precision.value, overwrite=overwrite,
                      kwargs=model_kwargs(torch_dtype, attn_implementation))


def _index_memory(corpus: Path, output: Path, model: str | None, kind: str, params: dict[str, Any], *,
                  batch_size: int, max_length: int | None, store_texts: bool, precision: str, overwrite: bool,
                  kwargs: dict[str, Any]) -> None:
    """``drmix index`` into a memory index folder: one process, or sharded under torchrun / accelerate launch."""
    from drmix.data.beir import read_corpus
    from drmix.model.encoder import load_encoder
    from drmix.outputs import check_output_dir
    from drmix.retrieval.backends import check_index_room
    from drmix.retrieval.index import index_corpus
    from drmix.retrieval.ranks import launched

    corpus_file = resolve_corpus_file(corpus)
    if launched():
        from drmix.cli.sharded import index_sharded

        return index_sharded(
            output=output, corpus=corpus, corpus_file=corpus_file, overwrite=overwrite,
            load=lambda: load_encoder(model, model_kwargs=kwargs),
            check_room=lambda enc, docs: check_index_room(output, docs, enc, store_texts=store_texts),
            index_kwargs={"kind": kind, "batch_size": batch_size, "max_length": max_length,
                          "store_texts": store_texts, "precision": precision, **params},
            metadata={"model": stored_model_name(model), "corpus": str(corpus_file.resolve())},
            echo=_console().print)
    check_output_dir(output, "index", overwrite=overwrite, inputs=[corpus])
    metadata = {"model": stored_model_name(model), "corpus": str(corpus_file.resolve())}
    docs = read_corpus(corpus_file)
    encoder = load_encoder(model, model_kwargs=kwargs)
    check_index_room(output, docs, encoder, store_texts=store_texts)
    index = index_corpus(encoder, docs, kind=kind, batch_size=batch_size, max_length=max_length,
                         store_texts=store_texts, precision=precision, metadata=metadata, **params)
    index.save(output)
    _console().print(f"indexed {len(index)} documents ({index.kind}, dim {index.dim}) into {output}")
    _console().print(f"index written to {output.resolve()}; search it with: drmix search --index {output} "
                     "--query TEXT", soft_wrap=True)


def _index_backend(corpus: Path, output: Path | None, backend: str, *, uri: str | None, collection: str | None,
                   model: str | None, kind: str | None, batch_size: int, max_length: int | None,
                   params: dict[str, Any], store_texts: bool, overwrite: bool, precision: str,
                   kwargs: dict[str, Any]) -> None:
    """``drmix index --backend faiss-disk|milvus``: refuse the target before encoding, then encode in chunks
    and stream them into the backend (:func:`drmix.retrieval.backends.build_index`)."""
    from drmix.data.beir import read_corpus
    from drmix.model.encoder import load_encoder
    from drmix.retrieval.backends import backend as get_backend
    from drmix.retrieval.backends import build_encoded, check_index_room, encode_chunks, resolve_kind
    from drmix.retrieval.ranks import launched

    spec = get_backend(backend)
    kind = resolve_kind(spec, kind)
    corpus_file = resolve_corpus_file(corpus)
    if backend == "milvus":
        from drmix.retrieval.backends.milvus import default_collection

        if uri is None or output is not None:
            raise ConfigError("--backend milvus writes a collection: give --uri (not --output).",
                              fix="pass --uri runs/x/index.db (Milvus Lite) or --uri http://HOST:19530.")
        target = f"{uri}#{collection or default_collection(corpus_file)}"
    else:
        if output is None or uri is not None or collection is not None:
            raise ConfigError(f"--backend {backend} writes a folder: give --output DIR (--uri and --collection "
                              "are for --backend milvus).", fix="pass --output DIR.")
        from drmix.outputs import check_output_dir

        check_output_dir(output, "index", overwrite=overwrite, inputs=[corpus])
        target = str(output)
    meta: dict[str, Any] = {"model": stored_model_name(model), "corpus": str(corpus_file.resolve())}

    def build(encoder: Any, docs: dict[str, dict[str, str]], chunks: Any) -> str:
        where = build_encoded(spec, target, encoder, chunks, docs, meta, kind=kind, params=params,
                              overwrite=overwrite, store_texts=store_texts, max_length=max_length,
                              precision=precision)
        return f"indexed {len(docs)} documents ({backend} {kind}, dim {meta.get('dim')}) into {where}"

    def check_room(encoder: Any, docs: dict[str, dict[str, str]]) -> None:
        if backend != "milvus":
            check_index_room(output, docs, encoder, store_texts=store_texts)

    if launched():  # every process encodes a shard; the first streams the shards' rows into the backend
        return _index_backend_sharded(corpus, corpus_file, output, target, spec, meta, model=model, build=build,
                                      check_room=check_room, batch_size=batch_size, max_length=max_length,
                                      precision=precision, chunk_size=params["chunk_size"], overwrite=overwrite,
                                      kwargs=kwargs)
    spec.check(target, meta, overwrite)  # a Milvus collection that exists is refused before encoding
    docs = read_corpus(corpus_file)
    encoder = load_encoder(model, model_kwargs=kwargs)
    check_room(encoder, docs)
    chunks = encode_chunks(encoder, docs, chunk_size=params["chunk_size"], batch_size=batch_size,
                           max_length=max_length, precision=precision)
    done = build(encoder, docs, chunks)
    where = target if backend == "milvus" else str(output)
    _console().print(f"{done}; search it with: drmix search --index {where} --query TEXT", soft_wrap=True)


def _index_backend_sharded(corpus: Path, corpus_file: Path, output: Path | None, target: str, spec: Any,
                           meta: dict[str, Any], *, model: str | None, build: Any, check_room: Any, batch_size: int,
                           max_length: int | None, precision: str, chunk_size: int, overwrite: bool,
                           kwargs: dict[str, Any]) -> None:
    """``drmix index --backend faiss-disk|milvus`` under torchrun / accelerate launch: shards beside the output
    (``OUTPUT.shards``; for Milvus ``PATH.db.shards``, or the drmix cache for a server), streamed into the
    backend by rank 0 ``--chunk-size`` rows at a time."""
    from drmix.cli.sharded import index_sharded, shard_folder, shards_root
    from drmix.model.encoder import load_encoder
    from drmix.outputs import check_output_dir
    from drmix.retrieval.backends.milvus import is_uri, split_location

    def claim() -> None:
        if output is not None:
            check_output_dir(output, "index", overwrite=overwrite, inputs=[corpus])
        spec.check(target, meta, overwrite)

    if output is not None:
        folder = shard_folder(output)
    else:
        uri, name = split_location(target)
        folder = shards_root(None, str(name), folder=False) if is_uri(uri) else shard_folder(Path(uri))
    index_sharded(output=output, corpus=corpus, corpus_file=corpus_file, folder=folder, claim=claim, build=build,
                  load=lambda: load_encoder(model, model_kwargs=kwargs), check_room=check_room,
                  overwrite=overwrite, chunk_size=chunk_size, metadata=meta,
                  echo=lambda line: _console().print(line, soft_wrap=True),
                  index_kwargs={"batch_size": batch_size, "max_length": max_length, "precision": precision})


def stored_model_name(model: str | None) -> str:
    """What ``meta.json`` records: an absolute path for a local model (an index is searched from anywhere),
    ``default`` for the bundled model, a hub id as given."""
    from drmix.model.encoder import resolve_model_path

    if model is None:
        return "default"
    resolved = Path(resolve_model_path(model)).expanduser()
    return str(resolved.resolve()) if resolved.exists() else model


def index_model(stored: str | None, index_dir: Path) -> str | None:
    """The model an index names, checked: a local path that is gone is a clear error, not a Hub lookup."""
    from drmix.errors import ModelError

    if not stored or stored == "default":
        return None
    p = Path(stored).expanduser()
    if p.exists() or (stored.count("/") == 1 and not stored.startswith((".", "/", "~"))) or "/" not in stored:
        return stored  # a folder, or a hub id ("org/name", "name")
    raise ModelError(f"the index was built with the model {stored}, which does not exist here"
                     + ("" if p.is_absolute() else f" (a relative path, read from {Path.cwd()})") + ".",
                     path=index_dir / "meta.json",
                     fix="pass --model with the model folder, or rebuild the index with drmix index.")


def _as_path(location: str | None) -> Path | None:
    """An index location as a path when it is a folder (not a Milvus URI), for the output checks."""
    from drmix.retrieval.backends.milvus import is_uri

    return None if location is None or is_uri(location) else Path(location).expanduser()


def open_searched(location: str, model: str | None, kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """Open the index at ``location`` with its backend and load its query model: ``--model``, else the one the
    index records; refused when it is not the model the index was built with (backends that record it)."""
    from drmix.model.encoder import load_encoder
    from drmix.retrieval.backends import backend_for, check_model

    index = backend_for(location).open(location)
    where = _as_path(location) or Path(location)
    encoder = load_encoder(model or index_model(index.metadata.get("model"), where), model_kwargs=kwargs)
    check_model(index.metadata, encoder, where=location)
    return index, encoder


def search_command(
    index_dir: Optional[str] = typer.Option(None, "--index", help=LOCATION_HELP + " Or search several corpora "
                                            "with --corpus."),
    corpus: Optional[list[str]] = typer.Option(None, "--corpus", help="NAME=DIR: search several corpora (BEIR or "
                                               "index directories, or Milvus collections PATH.db#COLLECTION) with "
                                               "one top-k budget; repeat, the corpus the model was trained on "
                                               "first."),
    allocation: str = typer.Option("equal", "--allocation", help="With --corpus: how the top-k budget is split: "
                                   + search_policy_usage() + ". Default equal (k/n from each corpus): it needs "
                                   "no labels; naive merging lost 8-10 points of per-corpus Recall@10 to it where "
                                   "one corpus is much larger, and no label-free policy was as good on every "
                                   "benchmark measured; it loses to naive when most queries' answers lie in one "
                                   "corpus (docs/multicorpus.md)."),
    depth: int = typer.Option(100, "--depth", min=1, help="With --corpus: candidates fetched per corpus."),
    query: Optional[list[str]] = typer.Option(None, "--query", "-q", help="A query text; repeat for several."),
    queries: Optional[Path] = typer.Option(None, "--queries", help="Query file: .jsonl with _id and text, or "
                                                                   "text with one query per line."),
    k: int = typer.Option(10, "--k", "-k", min=1, help="Hits per query."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Query encoder (default: the model recorded "
                                                                   "in the index)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the hits as JSONL, one query per "
                                                                      "line (a run file)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing --output file."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON lines instead of tables."),
    batch_size: int = typer.Option(64, "--batch-size", min=1, help="Queries per encoding batch."),
    precision: EncodingPrecision = typer.Option(EncodingPrecision.auto, "--precision", help=PRECISION_HELP),
    query_instruction: Optional[str] = typer.Option(None, "--query-instruction", help=QUERY_INSTRUCTION_HELP),
    prompt_name: Optional[str] = typer.Option(None, "--prompt-name", help="Use the model folder's prompt of this "
                                              "name (e.g. a dataset's instruction saved by drmix train)."),
    torch_dtype: Optional[str] = typer.Option(None, "--torch-dtype", help=TORCH_DTYPE_HELP),
    attn_implementation: Optional[str] = typer.Option(None, "--attn-implementation", help=ATTN_HELP),
    run_format: RunFormat = typer.Option(RunFormat.jsonl, "--format", help="Run file layout. jsonl: one query per "
                                         "line with its hits; trec: 'query_id Q0 doc_id rank score drmix' lines "
                                         "for trec_eval, pyserini and ranx, written to --output or, without it, "
                                         "printed instead of the tables. drmix eval --run reads both."),
) -> None:
    """Answer queries from the command line or a file with ids, scores and text."""
    from drmix.model.encoder import load_encoder

    if bool(query) == (queries is not None):
        raise ConfigError("give queries either with --query or with --queries.",
                          fix="pass --query TEXT (repeatable) or --queries FILE, not both or neither.")
    if (index_dir is None) == (not corpus):
        raise ConfigError("give either --index or --corpus.",
                          fix="pass --index DIR for one corpus, or --corpus NAME=DIR (repeatable) for several.")
    if output is not None:
        from drmix.outputs import claim_output

        claim_output(output, "file", overwrite=overwrite, inputs=[_as_path(index_dir), queries])
    texts = read_query_file(queries) if queries is not None else {str(i): q for i, q in enumerate(query, 1)}
    kwargs = model_kwargs(torch_dtype, attn_implementation)
    index, encoder = open_searched(index_dir, model, kwargs) if not corpus else (None, None)
    if encoder is None:
        encoder = load_encoder(model, model_kwargs=kwargs)
    prompt = _search_prompt(encoder, query_instruction, prompt_name)
    if corpus:
        rows = _multi_corpus_rows(encoder, corpus, texts, prompt, k=k, allocation=allocation, depth=depth,
                                  batch_size=batch_size)
    else:
        rows = search_results(encoder, index, texts, k, batch_size=batch_size, precision=precision.value,
                              prompt=prompt)
    if _write_run(rows, run_format, output, as_json=as_json):
        return
    if as_json:
        for r in rows:
            typer.echo(json.dumps(r, ensure_ascii=False))
    else:
        _print_results(rows)


def _multi_corpus_rows(encoder: Any, corpus: list[str], texts: dict[str, str], prompt: str | None, *, k: int,
                       allocation: str, depth: int, batch_size: int) -> list[dict[str, Any]]:
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
                        batch_size=batch_size)
    for r in rows:
        r["query"] = shown.get(r["query_id"], r["query"])
    return rows


def _write_run(rows: list[dict[str, Any]], run_format: RunFormat, output: Path | None, *, as_json: bool) -> bool:
    """Write ``drmix search``'s run to ``output`` (jsonl without the texts, or trec); True when a trec run without
    ``output`` was printed instead (nothing more to show)."""
    from drmix.io import write_jsonl_atomic

    if run_format is RunFormat.trec:  # drmix.retrieval.trec
        from drmix.retrieval.trec import trec_lines, write_trec_run

        if output is not None:
            write_trec_run(output, rows)
            return False
        if as_json:
            raise ConfigError("--format trec without --output prints the run; --json cannot be added.",
                              fix="drop --json, or write the run with --output FILE.")
        typer.echo("\n".join(trec_lines(rows)))
        return True
    if output is not None:
        write_jsonl_atomic(output, [{**r, "hits": [{k2: v for k2, v in h.items() if k2 != "text"}
                                                    for h in r["hits"]]} for r in rows])
    return False


def eval_command(
    data: Optional[list[Path]] = typer.Option(None, "--data", "-d", help="BEIR directory; repeat for several "
                                              "datasets (or evaluate MTEB tasks with --mteb)."),
    mteb: Optional[list[str]] = typer.Option(None, "--mteb", help="MTEB task names, comma-separated or repeated "
                                             "(e.g. NFCorpus,SciFact), or BEIR directories run as local MTEB "
                                             "tasks: evaluated by the mteb package (pip install 'drmix[mteb]'), "
                                             "which writes its own result files into --output/mteb; eval.json "
                                             "gets each task's main score and, for retrieval tasks, per-query "
                                             "--metric scores for drmix compare (docs/evaluation.md)."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="SentenceTransformer folder, drmix run "
                                                                   "directory or hub id; default all-MiniLM-L6-v2."),
    split: Optional[str] = typer.Option(None, "--split", help="qrels split to evaluate (qrels/{split}.tsv; "
                                        "default test); with --mteb: only this split of every task (default: "
                                        "each task's own evaluation splits)."),
    output: Optional[Path] = report_output_option("eval.json and eval.md", "eval",
                                                  "drmix report and the model card read"),
    overwrite: bool = report_overwrite_option("eval.json and eval.md", "eval"),
    k: int = typer.Option(100, "--k", "-k", min=1, help="Documents retrieved per query."),
    batch_size: int = typer.Option(64, "--batch-size", min=1, help="Texts per encoding batch."),
    max_length: Optional[int] = typer.Option(None, "--max-length", min=1, help="Token cap per text (default: "
                                                                              "the model's)."),
    metric: Optional[list[str]] = typer.Option(None, "--metric", help="Metric such as ndcg@10; repeat for several "
                                                                     "(default: ndcg@10 recall@100 mrr@10 map@100)."),
    precision: EncodingPrecision = typer.Option(EncodingPrecision.auto, "--precision", help=PRECISION_HELP),
    dims: Optional[str] = typer.Option(None, "--dims", help="Matryoshka sizes, e.g. 64,128,256: every metric is "
                                                           "also reported on embeddings truncated to each size "
                                                           "and re-normalised (as ndcg@10@64d)."),
    query_instruction: Optional[str] = typer.Option(None, "--query-instruction", help=QUERY_INSTRUCTION_HELP),
    prompts: Optional[Path] = typer.Option(None, "--prompts", help=PROMPTS_HELP),
    torch_dtype: Optional[str] = typer.Option(None, "--torch-dtype", help=TORCH_DTYPE_HELP),
    attn_implementation: Optional[str] = typer.Option(None, "--attn-implementation", help=ATTN_HELP),
    max_queries: Optional[int] = typer.Option(None, "--max-queries", min=1, help="Evaluate a seeded sample of at "
                                              "most this many judged queries per dataset (default: all; with "
                                              "--run, the same queries a model's evaluation keeps)."),
    max_docs: Optional[int] = typer.Option(None, "--max-docs", min=1, help="Cap each corpus at this many "
                                           "documents (seeded; the kept queries' judged documents always stay)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the --max-queries / --max-docs sample."),
    tokenize_num_proc: Optional[int] = tokenize_num_proc_option(),
    cache_embeddings: bool = cache_embeddings_option(),
    run_file: Optional[list[Path]] = typer.Option(None, "--run", help="Score a run file instead of a model: TREC "
                                                  "(query_id Q0 doc_id rank score tag, as trec_eval, pyserini and "
                                                  "ranx write it) or drmix search's JSONL, cut to its top --k per "
                                                  "query; one per --data, in the same order."),
    index: Optional[str] = typer.Option(None, "--index", help="Score this built index instead of an exact search "
                                        "of the corpus: " + LOCATION_HELP + " Its queries are encoded with the "
                                        "model it records (or --model, which must match); give one --data (its "
                                        "queries and qrels)."),
) -> None:
    """nDCG@10, Recall@100, MRR@10 and MAP@100 of a model on BEIR datasets (or on MTEB tasks with --mteb, or of a
    built index with --index)."""
    from drmix.evaluation.matryoshka import parse_dims
    from drmix.evaluation.metrics import DEFAULT_METRICS

    if mteb and run_file:
        raise ConfigError("--run and --mteb cannot be combined.", fix="score a run file with --run and --data DIR.")
    if index is not None and run_file:
        raise ConfigError("--run and --index cannot be combined.",
                          fix="score a run file with --run, or a built index with --index.")
    if index is not None:
        return _eval_index(index, data=data, mteb=mteb, model=model, split=split, output=output,
                           overwrite=overwrite, k=k, batch_size=batch_size, metric=metric, precision=precision,
                           dims=dims, query_instruction=query_instruction, prompts=prompts,
                           kwargs=model_kwargs(torch_dtype, attn_implementation), max_queries=max_queries,
                           max_docs=max_docs, max_length=max_length)
    if mteb:
        return _eval_mteb(mteb, data=data, model=model, split=split, output=output, overwrite=overwrite, k=k,
                          batch_size=batch_size, max_length=max_length, metric=metric, precision=precision,
                          dims=dims, query_instruction=query_instruction, prompts=prompts,
                          kwargs=model_kwargs(torch_dtype, attn_implementation), max_queries=max_queries,
                          max_docs=max_docs)
    if not data:
        raise ConfigError("no dataset given.", fix="pass --data DIR (a BEIR directory) or --mteb TASK.")
    split = split or "test"
    if run_file:
        return _eval_runs(run_file, data, split=split, output=output, overwrite=overwrite, k=k, metric=metric,
                          encoding=(("--model", model), ("--max-length", max_length), ("--dims", dims),
                                    ("--precision", precision is not EncodingPrecision.auto),
                                    ("--query-instruction", query_instruction), ("--prompts", prompts),
                                    ("--torch-dtype", torch_dtype), ("--attn-implementation", attn_implementation),
                                    ("--max-docs", max_docs)), max_queries=max_queries, seed=seed)
    _eval_model(model, data, output=output, overwrite=overwrite, prompts=prompts, query_instruction=query_instruction,
                tokenize_num_proc=tokenize_num_proc, cache_embeddings=cache_embeddings, split=split, k=k,
                batch_size=batch_size, max_length=max_length, metrics=tuple(metric) if metric else DEFAULT_METRICS,
                model_name=model or "default", precision=precision.value, dims=parse_dims(dims),
                model_kwargs=model_kwargs(torch_dtype, attn_implementation), max_queries=max_queries,
                max_docs=max_docs, seed=seed)


def _eval_model(model: str | None, data: list[Path], *, output: Path | None, overwrite: bool, prompts: Path | None,
                query_instruction: str | None, tokenize_num_proc: int | None, cache_embeddings: bool,
                **evaluate: Any) -> None:
    """``drmix eval`` of a model: :func:`drmix.evaluation.evaluate.evaluate_model` (``evaluate``: its options)
    under torchrun or not, the table, ``eval.json`` / ``eval.md`` in ``output`` (a run's eval/ folder)."""
    from drmix.cli.report import into_run, refresh_run
    from drmix.evaluation.evaluate import evaluate_model

    output, run = into_run(output, "eval")
    if output is not None:
        from drmix.outputs import claim_output

        claim_output(output, "eval", overwrite=overwrite, inputs=data)
    from drmix.model.instructions import read_prompts_file

    instructions = read_prompts_file(prompts) if prompts is not None else {}
    if query_instruction is not None:  # every dataset, over the prompts file
        instructions.update({Path(d).expanduser().name: query_instruction for d in data})
    from drmix.cli.sharded import launched_shards

    # under torchrun: every corpus encoded in shards (drmix.cli.sharded)
    with encoding(tokenize_num_proc, cache_embeddings), \
            launched_shards(output, "eval", folder=True, overwrite=overwrite) as ranks:
        report = evaluate_model(model, data, query_instructions=instructions, **evaluate)
    if ranks is not None and not ranks.main:
        return
    print_report(report)
    if output is not None:
        report.write(output)
        _console().print(f"wrote {output / 'eval.json'} and {output / 'eval.md'}")
        refresh_run(run)


def _eval_runs(runs: list[Path], data: list[Path], *, split, output, overwrite, k, metric, encoding, max_queries,
               seed) -> None:
    """``drmix eval --run``: :func:`drmix.evaluation.runfile.evaluate_run_files`, the same table and files."""
    from drmix.evaluation.metrics import DEFAULT_METRICS
    from drmix.evaluation.runfile import evaluate_run_files

    unsupported = [flag for flag, given in encoding if given]
    if unsupported:
        raise ConfigError(f"{', '.join(unsupported)} cannot be used with --run: a run file is scored as it is, "
                          "no model encodes anything.", fix=f"drop {', '.join(unsupported)}, or evaluate a model "
                                                            "without --run.")
    from drmix.cli.report import into_run, refresh_run

    output, run = into_run(output, "eval")
    if output is not None:
        from drmix.outputs import claim_output

        claim_output(output, "eval", overwrite=overwrite, inputs=[*data, *runs])
    report = evaluate_run_files(runs, data, split=split, k=k, metrics=tuple(metric) if metric else DEFAULT_METRICS,
                                max_queries=max_queries, seed=seed)
    print_report(report)
    if output is not None:
        report.write(output)
        _console().print(f"wrote {output / 'eval.json'} and {output / 'eval.md'}")
        refresh_run(run)


def _eval_index(location: str, *, data, mteb, model, split, output, overwrite, k, batch_size, metric, precision,
                dims, query_instruction, prompts, kwargs, max_queries, max_docs, max_length) -> None:
    """``drmix eval --index``: :func:`drmix.evaluation.index_eval.evaluate_index`, the same table and files."""
    from drmix.evaluation.index_eval import evaluate_index
    from drmix.evaluation.metrics import DEFAULT_METRICS
    from drmix.model.instructions import read_prompts_file

    unsupported = [flag for flag, given in (("--mteb", mteb), ("--dims", dims is not None),
                                            ("--max-queries", max_queries), ("--max-docs", max_docs),
                                            ("--max-length", max_length)) if given]
    if unsupported:
        raise ConfigError(f"{', '.join(unsupported)} cannot be used with --index: the index holds the corpus as "
                          "it was encoded.", fix=f"drop {', '.join(unsupported)}, or evaluate without --index.")
    if not data or len(data) != 1:
        raise ConfigError(f"--index is scored against one dataset; {len(data or [])} --data given.",
                          fix="pass one --data DIR: the BEIR directory whose queries and qrels match the index.")
    from drmix.cli.report import into_run, refresh_run

    output, run = into_run(output, "eval")
    if output is not None:
        from drmix.outputs import claim_output

        claim_output(output, "eval", overwrite=overwrite, inputs=[*data, _as_path(location)])
    searched, encoder = open_searched(location, model, kwargs)
    instructions = read_prompts_file(prompts) if prompts is not None else {}
    if query_instruction is not None:
        instructions[Path(data[0]).expanduser().name] = query_instruction
    report = evaluate_index(encoder, searched, location, data[0], split=split or "test", k=k, batch_size=batch_size,
                            metrics=tuple(metric) if metric else DEFAULT_METRICS, precision=precision.value,
                            model_name=model or str(searched.metadata.get("model", "default")),
                            query_instructions=instructions)
    print_report(report)
    if output is not None:
        report.write(output)
        _console().print(f"wrote {output / 'eval.json'} and {output / 'eval.md'}")
        refresh_run(run)


def _eval_mteb(tasks: list[str], *, data, model, split, output, overwrite, k, batch_size, max_length, metric,
               precision, dims, query_instruction, prompts, kwargs, max_queries, max_docs) -> None:
    """``drmix eval --mteb``: :func:`drmix.evaluation.mteb.evaluate_mteb`, the same table and files."""
    from drmix.evaluation.metrics import DEFAULT_METRICS
    from drmix.evaluation.mteb import MTEB_DIR, evaluate_mteb, parse_task_list

    if data:
        raise ConfigError("--data and --mteb cannot be combined.",
                          fix="evaluate BEIR directories with --data, or pass them to --mteb to run them as "
                              "local MTEB tasks.")
    unsupported = [flag for flag, given in (("--k", k != 100),
                                            ("--precision", precision is not EncodingPrecision.auto),
                                            ("--dims", dims is not None),
                                            ("--query-instruction", query_instruction is not None),
                                            ("--prompts", prompts is not None), ("--max-queries", max_queries),
                                            ("--max-docs", max_docs)) if given]
    if unsupported:
        raise ConfigError(f"{', '.join(unsupported)} cannot be used with --mteb: MTEB evaluates by its own "
                          "protocol (its top 1000, full corpora, the model's own prompts, fp32).",
                          fix=f"drop {', '.join(unsupported)}, or evaluate BEIR directories with --data.")
    names = parse_task_list(tasks)
    from drmix.cli.report import into_run, refresh_run

    output, run = into_run(output, "eval")
    if output is not None:
        from drmix.outputs import claim_output

        claim_output(output, "eval", overwrite=overwrite,
                     inputs=[Path(t) for t in names if Path(t).expanduser().exists()])
    report = evaluate_mteb(model, names, output=output, batch_size=batch_size, max_length=max_length,
                           metrics=tuple(metric) if metric else DEFAULT_METRICS, model_name=model or "default",
                           split=split, model_kwargs=kwargs)
    print_report(report)
    if output is not None:
        _console().print(f"wrote {output / 'eval.json'}, {output / 'eval.md'} and MTEB's result files in "
                         f"{output / MTEB_DIR}")
        refresh_run(run)


def register(app: typer.Typer) -> None:
    """Add ``index``, ``search`` and ``eval`` to the main app."""
    app.command("index")(index_command)
    app.command("search")(search_command)
    app.command("eval")(eval_command)


register_area(CommandArea("retrieval", register))
