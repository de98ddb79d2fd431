"""``drmix augment crop|mine|generate|rerank``: training collections from an unlabelled corpus (DRAMA).

Thin: options are validated and handed to :mod:`drmix.augment` (the recipe that chains them is
``drmix pipeline drama``). Every augment command writes a drmix collection JSONL (what ``drmix train
--data`` reads) and a ``<output>.stats.json`` with its counts.
"""
from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Optional

import typer

from drmix.cli.areas import CommandArea, register_area


AUGMENT_HELP = "Build training collections from an unlabelled corpus (DRAMA): cropped sentences, LLM-generated " \
               "queries, LLM listwise reranking (teacher mining: drmix mine --mode teacher)."


def _console():
    from drmix.cli import console

    return console


def _load_corpus(path: Path) -> dict[str, dict[str, str]]:
    from drmix.cli.retrieval import resolve_corpus_file
    from drmix.data.beir import read_corpus

    return read_corpus(resolve_corpus_file(path))


def _stats_path(output: Path) -> Path:
    return output.with_name(output.name + ".stats.json")


def _claim(output: Path, overwrite: bool, inputs: list[Path | None], llm: dict[str, Any] | None = None) -> None:
    """The output contract (drmix.outputs) before any work: the collection file and its .stats.json, and the
    LLM cache of generate / rerank (never an input or a user's file)."""
    from drmix.outputs import claim_cache, claim_output

    sidecars = [] if llm is not None and _unfinished(output) else [_stats_path(output)]
    claim_output(output, "file", overwrite=overwrite, inputs=inputs, sidecars=sidecars)
    if llm is not None:
        claim_cache(_cache_path(output, llm), inputs=inputs, outputs=[output, _stats_path(output)])


def _unfinished(output: Path) -> bool:
    """Whether ``output`` is the output of a stopped LLM run: no collection yet, and a ``.stats.json`` that the
    run wrote when it stopped (``"finished": false``). The same command continues it from the cache, as the
    stop message says, so that stats file is not a finished output to protect."""
    import json

    stats = _stats_path(output)
    if output.exists() or output.is_symlink() or not stats.is_file():
        return False
    try:
        record = json.loads(stats.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and record.get("finished") is False and "error" in record


def _cache_path(output: Path, llm: dict[str, Any]) -> Path:
    return llm["cache"] or output.with_name(output.name + ".llm-cache.jsonl")


def _write_outputs(output: Path, rows: list[dict[str, Any]], stats: dict[str, Any]) -> None:
    """The collection and its .stats.json, replaced together (a full disk leaves both as they were)."""
    import json

    from drmix.augment.examples import write_collection
    from drmix.io.atomic import AtomicFiles

    write_collection(output, rows, write=False)  # refuses an empty collection
    with AtomicFiles() as files:
        files.write_text(output, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
        files.write_json(_stats_path(output), stats)


def _why_empty(stats: Any, stats_path: Path) -> str:
    """The fix of an LLM step that kept nothing: the failure counts by cause and where they are."""
    from drmix.llm.runstats import failure_line

    return (failure_line(stats, stats_path) + f"; outcomes {dict(stats.outcomes)}. Check the endpoint, "
            "--timeout, or the prompt template")


# -- LLM options shared by generate and rerank ------------------------------------------------------------
def _llm_params() -> list[inspect.Parameter]:
    from drmix.llm.factory import LLMConfig

    opts = {
        "backend": (str, typer.Option("transformers", "--backend", help=LLMConfig.model_fields["backend"].description)),
        "llm_model": (Optional[str], typer.Option(None, "--llm-model", help=LLMConfig.model_fields["model"].description)),
        "base_url": (Optional[str], typer.Option(None, "--base-url", help=LLMConfig.model_fields["base_url"].description)),
        "api_key_env": (str, typer.Option("OPENAI_API_KEY", "--api-key-env",
                                          help=LLMConfig.model_fields["api_key_env"].description)),
        "timeout": (float, typer.Option(60.0, "--timeout", min=0.001, help=LLMConfig.model_fields["timeout"].description)),
        "max_retries": (int, typer.Option(3, "--max-retries", min=0, help=LLMConfig.model_fields["max_retries"].description)),
        "concurrency": (int, typer.Option(4, "--concurrency", min=1, help=LLMConfig.model_fields["concurrency"].description)),
        "llm_batch_size": (int, typer.Option(8, "--llm-batch-size", min=1,
                                             help=LLMConfig.model_fields["batch_size"].description)),
        "cache": (Optional[Path], typer.Option(None, "--cache", help="LLM call cache (JSONL; default: "
                                               "<output>.llm-cache.jsonl next to the output). A rerun reuses it. "
                                               "An input, the output, or a file that is not a drmix LLM cache "
                                               "is refused (answers are appended to it).")),
    }
    return [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=o, annotation=a) for n, (a, o) in opts.items()]


def _backend(output: Path, kw: dict[str, Any]):
    from drmix.errors import ConfigError
    from drmix.llm.factory import LLMConfig, build_backend

    try:
        cfg = LLMConfig(backend=kw["backend"], model=kw["llm_model"], base_url=kw["base_url"],
                        api_key_env=kw["api_key_env"], timeout=kw["timeout"], max_retries=kw["max_retries"],
                        concurrency=kw["concurrency"], batch_size=kw["llm_batch_size"])
    except Exception as e:  # pydantic ValidationError
        raise ConfigError(f"invalid LLM options: {e.errors()[0]['msg'] if hasattr(e, 'errors') else e}.",
                          fix="--backend is transformers or openai.") from None
    return build_backend(cfg, cache_path=_cache_path(output, kw))


def _with_llm(fn):
    """Append the LLM options to ``fn``'s signature; they reach it as ``llm`` (a dict).

    The signature is read with ``eval_str=True``: this module postpones annotations (``from __future__ import
    annotations``), and typer takes a given ``__signature__`` as it is, so string annotations such as
    ``"Optional[int]"`` would reach pydantic's ``TypeAdapter`` unresolved (``--max-docs``/``--template`` failed).
    """
    extra = _llm_params()
    names = [p.name for p in extra]
    sig = inspect.signature(fn, eval_str=True)
    own = [p for p in sig.parameters.values() if p.name != "llm"]

    def command(**kwargs: Any) -> Any:
        llm = {n: kwargs.pop(n) for n in names}
        return fn(**kwargs, llm=llm)

    command.__signature__ = inspect.Signature(own + extra)  # type: ignore[attr-defined]
    command.__doc__ = fn.__doc__
    command.__name__ = fn.__name__
    return command


# -- commands -----------------------------------------------------------------------------------------------
def crop_command(
    corpus: Path = typer.Option(..., "--corpus", help="BEIR directory or corpus .jsonl (_id, title, text)."),
    output: Path = typer.Option(..., "--output", "-o", help="Collection JSONL to write."),
    min_words: int = typer.Option(4, "--min-words", min=1, help="Shortest sentence kept, in words."),
    max_per_doc: Optional[int] = typer.Option(None, "--max-per-doc", min=1, help="Sentences per document at most "
                                                                                 "(seeded sample; default all)."),
    max_docs: Optional[int] = typer.Option(None, "--max-docs", min=1, help="Documents sampled (seeded)."),
    language: str = typer.Option("en", "--language", help="Sentence rules (pysbd language code)."),
    include_title: bool = typer.Option(False, "--include-title", help="Treat the title as a sentence too."),
    seed: int = typer.Option(42, "--seed", help="Seed of the samples."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing --output file (and its "
                                                             ".stats.json)."),
) -> None:
    """Cropped-sentence queries: every sentence of a document is a query, its document the positive."""
    from drmix.augment.crop import crop_queries
    from drmix.augment.examples import crop_rows, write_collection
    from drmix.augment.steps import sample_ids
    from drmix.data.beir import doc_text

    _claim(output, overwrite, [corpus])
    docs = _load_corpus(corpus)
    ids = sample_ids(list(docs), max_docs, seed)
    queries = crop_queries({d: docs[d] for d in ids}, min_words=min_words, max_per_doc=max_per_doc,
                           language=language, seed=seed, include_title=include_title)
    rows = crop_rows(queries, {d: doc_text(docs[d]) for d in ids})
    _write_outputs(output, rows, {"documents": len(ids), "queries": len(rows)})
    _console().print(f"wrote {len(rows)} sentence queries from {len(ids)} documents to {output}")


def mine_command(
    queries: Path = typer.Option(..., "--queries", help="JSONL with a query per line: crop/generate output, a "
                                                       "collection, or BEIR queries.jsonl."),
    corpus: Path = typer.Option(..., "--corpus", help="BEIR directory or corpus .jsonl the teacher searches."),
    output: Path = typer.Option(..., "--output", "-o", help="Collection JSONL to write."),
    teacher: Optional[str] = typer.Option(None, "--teacher", help="Teacher retriever (default all-MiniLM-L6-v2)."),
    positives: str = typer.Option("1:10", "--positives", help="Teacher ranks that become positives (1-based, "
                                                              "inclusive)."),
    negatives: str = typer.Option("30:50", "--negatives", help="Teacher ranks that become hard negatives."),
    keep_candidates: int = typer.Option(20, "--keep-candidates", min=1, help="Top candidates recorded for rerank."),
    batch_size: int = typer.Option(64, "--batch-size", min=1, help="Texts per encoding batch."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing --output file (and its "
                                                             ".stats.json)."),
) -> None:
    """The earlier spelling of drmix mine --mode teacher (DRAMA's teacher mining); same options, same output."""
    import logging

    logging.getLogger(__name__).warning(
        "`drmix augment mine` is `drmix mine --mode teacher` (--teacher is --model, --positives is "
        "--positive-ranks, --negatives is --ranks); this spelling keeps working")
    mine_teacher(queries, corpus, output, teacher=teacher, positives=positives, negatives=negatives,
                 keep_candidates=keep_candidates, batch_size=batch_size, overwrite=overwrite)


def mine_teacher(queries: Path, corpus: Path, output: Path, *, teacher: str | None, positives: str, negatives: str,
                 keep_candidates: int, batch_size: int, overwrite: bool, show_progress: bool = False) -> None:
    """Teacher mining (DRAMA, Sec. 3.1.1): ranks ``positives`` of the teacher become positives, ranks
    ``negatives`` hard negatives (``drmix mine --mode teacher``)."""
    from drmix.augment.examples import mine_examples, read_query_rows, write_collection
    from drmix.data.beir import doc_text
    from drmix.model.encoder import load_encoder

    _claim(output, overwrite, [queries, corpus])
    rows = read_query_rows(queries)
    docs = _load_corpus(corpus)
    model = load_encoder(teacher)
    out, counts = mine_examples(rows, {d: doc_text(x) for d, x in docs.items()}, model, positives=positives,
                                negatives=negatives, keep_candidates=keep_candidates, batch_size=batch_size,
                                teacher_name=teacher or "default", show_progress=show_progress)
    from drmix.retrieval.shards import writes_here

    if not writes_here():  # under torchrun: rank 0 writes
        return
    _write_outputs(output, out, {"queries": len(rows), **counts})
    _console().print(f"wrote {len(out)} mined examples to {output} ({dict(counts)})")


def generate_command(
    corpus: Path = typer.Option(..., "--corpus", help="BEIR directory or corpus .jsonl."),
    output: Path = typer.Option(..., "--output", "-o", help="Collection JSONL to write (query, its document)."),
    max_docs: Optional[int] = typer.Option(None, "--max-docs", min=1, help="Documents sampled (seeded)."),
    template: Optional[Path] = typer.Option(None, "--template", help="Prompt template JSON (system, user, "
                                                                     "assistant, examples); default: packaged."),
    completion: bool = typer.Option(False, "--completion", help="Prompt as plain text (base models without a "
                                                                "chat template)."),
    temperature: float = typer.Option(0.8, "--temperature", min=0.0, help="Sampling temperature."),
    top_p: float = typer.Option(0.9, "--top-p", min=0.0, max=1.0, help="Nucleus sampling mass."),
    max_new_tokens: int = typer.Option(256, "--max-new-tokens", min=1, help="Tokens generated per document."),
    seed: int = typer.Option(42, "--seed", help="Seed of the document sample and of sampling."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing --output file (and its "
                                                             ".stats.json)."),
    llm: dict = None,  # type: ignore[assignment]
) -> None:
    """LLM-generated queries: one per document, parsed from the Task/Query/Language answer."""
    from drmix.augment.generate import GenerationStats, QGenTemplate, document_texts, generate_queries
    from drmix.augment.examples import write_collection
    from drmix.augment.steps import sample_ids
    from drmix.llm.base import GenerationParams
    from drmix.llm.runstats import llm_stats

    _claim(output, overwrite, [corpus, template], llm)
    docs = _load_corpus(corpus)
    ids = sample_ids(list(docs), max_docs, seed)
    qgen = QGenTemplate.load(template)
    backend = _backend(output, llm)
    texts = document_texts(docs, ids)
    stats = GenerationStats()
    try:
        with llm_stats(_stats_path(output), stats) as stats_path:  # written on every exit path
            rows, _ = generate_queries(texts, backend, template=qgen, completion=completion,
                                       params=GenerationParams(temperature, top_p, max_new_tokens, seed),
                                       stats=stats)
    finally:
        backend.close()
    desc = backend.describe()
    out = [{"query": r["query"], "positive": texts[r["doc_id"]], "augment": "generate", "source_doc": r["doc_id"],
            "llm": desc} for r in rows]
    write_collection(output, out, why=_why_empty(stats, stats_path))
    _console().print(f"kept {stats.kept} of {stats.documents} generated queries ({dict(stats.outcomes)}); "
                     f"wrote {output}")


def rerank_command(
    input: Path = typer.Option(..., "--input", "-i", help="Output of `drmix augment mine` (records the teacher's "
                                                          "candidates)."),
    corpus: Path = typer.Option(..., "--corpus", help="The corpus the queries were mined from."),
    output: Path = typer.Option(..., "--output", "-o", help="Collection JSONL to write."),
    k: int = typer.Option(20, "--k", min=2, help="Teacher candidates shown to the LLM."),
    negatives: str = typer.Option("10:20", "--negatives", help="Reranked ranks that become hard negatives."),
    max_words: int = typer.Option(192, "--max-words", min=1, help="Words kept per passage in the prompt."),
    template: Optional[Path] = typer.Option(None, "--template", help="Prompt template JSON (system, user, passage)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing --output file (and its "
                                                             ".stats.json)."),
    llm: dict = None,  # type: ignore[assignment]
) -> None:
    """LLM listwise rerank of the teacher's top-k: top-1 becomes the positive, ranks 10-20 hard negatives."""
    from drmix.augment.examples import read_query_rows, write_collection
    from drmix.augment.rerank import RerankStats, RerankTemplate, rerank_examples
    from drmix.data.beir import doc_text
    from drmix.llm.runstats import llm_stats

    _claim(output, overwrite, [input, corpus, template], llm)
    rows = read_query_rows(input)
    docs = _load_corpus(corpus)
    rtemplate = RerankTemplate.load(template)
    backend = _backend(output, llm)
    stats = RerankStats()
    try:
        with llm_stats(_stats_path(output), stats) as stats_path:  # written on every exit path
            out, _ = rerank_examples(rows, {d: doc_text(x) for d, x in docs.items()}, backend, k=k,
                                     negatives=negatives, template=rtemplate, max_words=max_words, path=input,
                                     stats=stats)
    finally:
        backend.close()
    write_collection(output, out, why=_why_empty(stats, stats_path))
    s = stats.as_dict()
    _console().print(f"kept {stats.kept} of {stats.queries} rankings (complete {s['complete_share']:.0%}, "
                     f"repaired {s['repaired_share']:.0%}, dropped {s['dropped_share']:.0%}); wrote {output}")


def register(app: typer.Typer) -> None:
    augment = typer.Typer(help=AUGMENT_HELP, no_args_is_help=True)
    augment.command("crop", no_args_is_help=True)(crop_command)
    augment.command("mine", no_args_is_help=True)(mine_command)
    augment.command("generate", no_args_is_help=True)(_with_llm(generate_command))
    augment.command("rerank", no_args_is_help=True)(_with_llm(rerank_command))
    app.add_typer(augment, name="augment")


register_area(CommandArea("augment", register))
