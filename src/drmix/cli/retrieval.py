"""CLI commands ``drmix index``, ``drmix search`` and ``drmix eval``: their options, one library call each, and
what they print.

``index`` is :func:`drmix.retrieval.build.index_corpus_file` (every backend, one process or sharded under
torchrun); ``search`` is :mod:`drmix.retrieval.search` (the queries, the index and its model, the hits, the run
file); ``eval`` is :class:`drmix.evaluation.modes.EvalRequest` (a model, run files, a built index or MTEB tasks).
The backend choices, their flags and the help that names them are read from the index-backend registry when the
commands are registered (:mod:`drmix.cli.backend_flags`), so a backend a package adds is usable here as it is.
Errors are :class:`drmix.errors.DrmixError`; the main app turns them into one line and exit code 2.
"""
from __future__ import annotations

import contextlib
import inspect
import json
from enum import Enum
from pathlib import Path
from typing import Any, Optional

import typer

from drmix.cli.areas import CommandArea, register_area
from drmix.cli.backend_flags import location_help, with_backend_options
from drmix.cli.encoding import cache_embeddings_option, encoding, tokenize_num_proc_option
from drmix.cli.options import (ATTN_HELP, PROMPTS_HELP, QUERY_INSTRUCTION_HELP, TORCH_DTYPE_HELP, model_kwargs,
                               report_output_option, report_overwrite_option)
from drmix.errors import ConfigError
from drmix.retrieval.backends.base import DEFAULT_BACKEND
from drmix.retrieval.multi.registry import search_policy_usage
from drmix.retrieval.trec import RunFormat

SNIPPET_CHARS = 160
#: the help of ``--index`` names every backend's kind of location (:func:`register` completes it)
LOCATION_HELP = "An index written by drmix index."


def eval_index_help(where: str) -> str:
    return (f"Score this built index instead of an exact search of the corpus: {where} Its queries are encoded with "
            "the model it records (or --model, which must match); give one --data (its queries and qrels).")


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


def _console(*, stderr: bool = False):
    from drmix.cli import make_console

    return make_console(stderr=stderr)


def resolve_corpus_file(path: Path) -> Path:
    """A BEIR directory means its ``corpus.jsonl``; a file is used as is."""
    from drmix.retrieval.build import corpus_file

    return corpus_file(path)


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
    output: Optional[Path] = typer.Option(None, "--output", "-o"),
    backend: str = typer.Option(DEFAULT_BACKEND, "--backend"),
    uri: Optional[str] = typer.Option(None, "--uri"),
    collection: Optional[str] = typer.Option(None, "--collection"),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="SentenceTransformer folder, drmix run "
                                                                   "directory or hub id; default all-MiniLM-L6-v2."),
    kind: Optional[str] = typer.Option(None, "--kind"),
    batch_size: int = typer.Option(64, "--batch-size", min=1, help="Texts per encoding batch."),
    max_length: Optional[int] = typer.Option(None, "--max-length", min=1, help="Token cap per document "
                                                                              "(default: the model's)."),
    no_texts: bool = typer.Option(False, "--no-texts", help="Do not store document texts (search then shows ids "
                                                           "and scores only)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a non-empty --output folder that is not "
                                                             "an index (its contents are deleted), or an existing "
                                                             "collection."),
    precision: EncodingPrecision = typer.Option(EncodingPrecision.auto, "--precision", help=PRECISION_HELP),
    torch_dtype: Optional[str] = typer.Option(None, "--torch-dtype", help=TORCH_DTYPE_HELP),
    attn_implementation: Optional[str] = typer.Option(None, "--attn-implementation", help=ATTN_HELP),
    tokenize_num_proc: Optional[int] = tokenize_num_proc_option(),
    cache_embeddings: bool = cache_embeddings_option(),
    estimate: bool = typer.Option(False, "--estimate", help="Print the hours encoding this corpus takes on one GPU "
                                  "and on --gpus GPUs (the throughput assumed is printed with it), then stop."),
    gpus: int = typer.Option(8, "--gpus", min=1, help="With --estimate: the GPU count to estimate besides one."),
    passages_per_s: Optional[float] = typer.Option(None, "--passages-per-s", min=0.001, help="With --estimate: "
                                                   "your measured passages/s per GPU (default: 900, one H200)."),
    params: Optional[dict[str, Any]] = None,
) -> None:
    """Encode a corpus into an index that drmix search can query: in RAM (exact torch search, FAISS HNSW/IVF),
    FAISS IVF on disk, or a Milvus collection (embedded Milvus Lite or a Milvus server).

    Under torchrun / accelerate launch every process encodes one shard of the corpus into OUTPUT.shards
    (a rerun encodes only the missing shards) and the first streams them, --chunk-size rows at a time, into the
    index."""
    from drmix.retrieval.build import corpus_file, index_corpus_file

    if estimate:
        from drmix.cli.sharded import print_estimate

        return print_estimate(corpus_file(corpus), gpus=gpus, rate=passages_per_s, echo=typer.echo)
    with encoding(tokenize_num_proc, cache_embeddings):
        built = index_corpus_file(backend, corpus, output=output, uri=uri, collection=collection, model=model,
                                  kind=kind, params=params, store_texts=not no_texts, overwrite=overwrite,
                                  precision=precision.value, batch_size=batch_size, max_length=max_length,
                                  model_kwargs=model_kwargs(torch_dtype, attn_implementation))
    if built is None:  # a launched process that does not write
        return
    _console().print(built.summary(), soft_wrap=True)
    if built.shards is None:
        local = built.target.local
        written = f"index written to {local.resolve()}; " if local is not None else ""
        _console().print(f"{written}search it with: drmix search --index {built.target.location} --query TEXT",
                         soft_wrap=True)


def search_command(
    index_dir: Optional[str] = typer.Option(None, "--index", help=LOCATION_HELP + " Or search several corpora "
                                            "with --corpus."),
    corpus: Optional[list[str]] = typer.Option(None, "--corpus", help="NAME=DIR: search several corpora (BEIR or "
                                               "index directories, or collections such as PATH.db#COLLECTION) with "
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
    data: Optional[Path] = typer.Option(None, "--data", "-d", help="A BEIR directory: search its queries judged "
                                        "in --split (exactly those, as BEIR's evaluation, ranx and pytrec_eval "
                                        "expect a run to hold)."),
    split: Optional[str] = typer.Option(None, "--split", help="With --data: the qrels split whose judged queries "
                                        "are searched (qrels/{split}.tsv; default test)."),
    qrels: Optional[Path] = typer.Option(None, "--qrels", help="A qrels TSV (query-id, corpus-id, score): search "
                                         "exactly the queries it judges, of --queries or --data."),
    k: int = typer.Option(10, "--k", "-k", min=1, help="Hits per query."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Query encoder (default: the model recorded "
                                                                   "in the index)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the hits to this run file (--format) "
                                                                      "and print a one-line summary instead of "
                                                                      "them."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing --output file."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON lines instead of tables (with --output: as well "
                                                      "as the file, the summary then on stderr)."),
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
    """Answer queries from the command line, a file or a BEIR split with ids, scores and text."""
    from drmix.retrieval.search import (location_path, multi_corpus_rows, open_searched, search_prompt,
                                        search_results, select_queries)

    if (index_dir is None) == (not corpus):
        raise ConfigError("give either --index or --corpus.",
                          fix="pass --index DIR for one corpus, or --corpus NAME=DIR (repeatable) for several.")
    if run_format is RunFormat.trec and output is None and as_json:
        raise ConfigError("--format trec without --output prints the run; --json cannot be added.",
                          fix="drop --json, or write the run with --output FILE.")
    if output is not None:
        from drmix.outputs import claim_output

        claim_output(output, "file", overwrite=overwrite,
                     inputs=[None if corpus else location_path(index_dir), queries, data, qrels])
    texts = select_queries(query=query, queries=queries, data=data, split=split, qrels=qrels)
    kwargs = model_kwargs(torch_dtype, attn_implementation)
    if corpus:
        from drmix.model.encoder import load_encoder

        index, encoder = None, load_encoder(model, model_kwargs=kwargs)
    else:
        index, encoder = open_searched(index_dir, model, kwargs)
    prompt = search_prompt(encoder, query_instruction, prompt_name)
    with_text = output is None or as_json  # a run file holds no texts
    if corpus:
        rows = multi_corpus_rows(encoder, corpus, texts, prompt, k=k, allocation=allocation, depth=depth,
                                 batch_size=batch_size, with_text=with_text)
    else:
        rows = search_results(encoder, index, texts, k, batch_size=batch_size, precision=precision.value,
                              prompt=prompt, with_text=with_text)
    _show(rows, run_format, output, as_json)


def _show(rows: list[dict[str, Any]], run_format: RunFormat, output: Path | None, as_json: bool) -> None:
    """``drmix search``'s answer: the run file and a one-line summary; JSON lines; the TREC run; or tables."""
    if output is not None:
        from drmix.retrieval.search import write_run

        summary = write_run(rows, run_format.value, output)
    if as_json:
        for r in rows:
            typer.echo(json.dumps(r, ensure_ascii=False))
    if output is not None:
        _console(stderr=as_json).print(summary, soft_wrap=True, highlight=False)
    elif run_format is RunFormat.trec:
        from drmix.retrieval.trec import trec_lines

        typer.echo("\n".join(trec_lines(rows)))
    elif not as_json:
        _print_results(rows)


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
    index: Optional[str] = typer.Option(None, "--index", help=eval_index_help(LOCATION_HELP)),
) -> None:
    """nDCG@10, Recall@100, MRR@10 and MAP@100 of a model on BEIR datasets (or on MTEB tasks with --mteb, or of a
    built index with --index)."""
    from drmix.evaluation.metrics import DEFAULT_METRICS
    from drmix.evaluation.modes import EvalRequest

    request = EvalRequest(data=list(data or []), model=model, mteb=list(mteb or []), runs=list(run_file or []),
                          index=index, split=split, k=k, batch_size=batch_size, max_length=max_length,
                          metrics=tuple(metric) if metric else DEFAULT_METRICS, precision=precision.value, dims=dims,
                          query_instruction=query_instruction, prompts=prompts, torch_dtype=torch_dtype,
                          attn_implementation=attn_implementation, max_queries=max_queries, max_docs=max_docs,
                          seed=seed)
    mode = request.mode
    from drmix.cli.report import into_run, refresh_run

    output, run = into_run(output, "eval")
    if output is not None:
        from drmix.outputs import claim_output

        claim_output(output, "eval", overwrite=overwrite, inputs=request.inputs())
    with _launch(mode, output, overwrite, tokenize_num_proc, cache_embeddings) as ranks:
        report = request.run(output)
    if ranks is not None and not ranks.main:
        return
    print_report(report)
    if output is not None:
        if mode == "mteb":
            from drmix.evaluation.mteb import MTEB_DIR

            _console().print(f"wrote {output / 'eval.json'}, {output / 'eval.md'} and MTEB's result files in "
                             f"{output / MTEB_DIR}")
        else:
            report.write(output)
            _console().print(f"wrote {output / 'eval.json'} and {output / 'eval.md'}")
        refresh_run(run)


@contextlib.contextmanager
def _launch(mode: str, output: Path | None, overwrite: bool, tokenize_num_proc: int | None, cache_embeddings: bool):
    """The evaluation of a model encodes corpora: with the encoding options, and under torchrun in shards
    (:func:`drmix.cli.sharded.launched_shards`, yielding the ranks); the other modes as they are (None)."""
    if mode != "model":
        yield None
        return
    from drmix.cli.sharded import launched_shards

    with encoding(tokenize_num_proc, cache_embeddings), \
            launched_shards(output, "eval", folder=True, overwrite=overwrite) as ranks:
        yield ranks


def register(app: typer.Typer) -> None:
    """Add ``index``, ``search`` and ``eval`` to the main app, with the registered backends' choices and flags."""
    where = location_help()
    inspect.signature(search_command).parameters["index_dir"].default.help = where + " Or search several corpora " \
                                                                                    "with --corpus."
    inspect.signature(eval_command).parameters["index"].default.help = eval_index_help(where)
    app.command("index")(with_backend_options(index_command))
    app.command("search")(search_command)
    app.command("eval")(eval_command)


register_area(CommandArea("retrieval", register))
