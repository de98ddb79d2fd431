"""CLI command ``drmix mine``: one mining command, two modes that run different algorithms.

* ``--mode negatives`` (the default): hard negatives for labelled training collections, mined with a retriever
  over each collection's own documents and a positive-aware filter (:func:`drmix.augment.mine.mine_collection`;
  the filter follows NV-Retriever's "TopK-PercPos", "NV-Retriever: Improving text embedding models with
  effective hard-negative mining", Moreira et al., arXiv:2407.15831).
* ``--mode teacher``: DRAMA's teacher mining for *unlabelled* queries (crop or generate output): the teacher's
  ranks 1-10 over a corpus become positives, ranks 30-50 hard negatives (:func:`drmix.augment.examples.mine_examples`;
  "DRAMA: Diverse Augmentation from Large Language Models to Smaller Dense Retrievers", Ma et al., ACL 2025,
  arXiv:2502.18460, Sec. 3.1.1). ``drmix augment mine`` is its earlier spelling and keeps working.

Both rank with the same code (:func:`drmix.augment.mine.mine_ranked`); an option of the other mode is refused.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from drmix.cli.areas import CommandArea, register_area
from drmix.cli.encoding import cache_embeddings_option, encoding, tokenize_num_proc_option
from drmix.cli.sharded import launched_shards
from drmix.cli.options import ATTN_HELP, TORCH_DTYPE_HELP, model_kwargs
from drmix.errors import ConfigError, DataError

MODES = ("negatives", "teacher")
#: the options only one mode takes (parameter names), each refused by the other mode
ONLY = {
    "negatives": ("data", "num_negatives", "sampling", "max_score_ratio", "keep_negatives", "seed",
                  "query_instruction", "torch_dtype", "attn_implementation", "format", "columns"),
    "teacher": ("queries", "corpus", "positive_ranks", "keep_candidates"),
}
DEFAULT_RANKS = {"negatives": "1:30", "teacher": "30:50"}

MINE_HELP = """Mine training examples with a retriever. Two modes, two algorithms:

--mode negatives (default): hard negatives for labelled collections (--data), mined from each collection's own
documents with a positive-aware filter (NV-Retriever's TopK-PercPos, arXiv:2407.15831).

--mode teacher: DRAMA's teacher mining for unlabelled queries (--queries, --corpus): the teacher's ranks 1-10
become positives, ranks 30-50 hard negatives (arXiv:2502.18460, Sec. 3.1.1). drmix augment mine is its
earlier spelling.
"""


def mine_command(
    ctx: typer.Context,
    mode: str = typer.Option("negatives", "--mode", help="negatives: hard negatives for labelled collections "
                             "(--data); teacher: DRAMA's teacher mining for unlabelled queries (--queries, --corpus)."),
    data: Optional[str] = typer.Option(None, "--data", help="negatives: a collection in any layout drmix trains on "
                                       "(JSONL, JSON, parquet, CSV/TSV, Arrow, a saved dataset, a BEIR folder, a Hub "
                                       "id; NAME:split), or a folder of collection files (one output per file)."),
    queries: Optional[Path] = typer.Option(None, "--queries", help="teacher: JSONL with a query per line: "
                                           "crop/generate output, a collection, or BEIR queries.jsonl."),
    corpus: Optional[Path] = typer.Option(None, "--corpus", help="teacher: BEIR directory or corpus .jsonl the "
                                          "teacher searches."),
    output: Path = typer.Option(..., "--output", "-o", help="Where the mined collection(s) go: a .jsonl file for "
                                                            "a file, a directory for a directory (same file names)."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="The retriever that ranks (the teacher): any "
                                        "SentenceTransformer folder, hub id or drmix run (default: all-MiniLM-L6-v2)."),
    ranks: Optional[str] = typer.Option(None, "--ranks", help="Rank window START:END (1-based, inclusive) of the "
                                        "retriever's list, positives removed, that negatives come from (default: "
                                        "1:30 for negatives, 30:50 for teacher)."),
    positive_ranks: str = typer.Option("1:10", "--positive-ranks", help="teacher: the ranks that become positives."),
    num_negatives: int = typer.Option(1, "--num-negatives", min=1, help="negatives: hard negatives per query."),
    sampling: str = typer.Option("top", "--sampling", help="negatives: top: the best-ranked candidates in the "
                                 "window; random: drawn from the window (seeded)."),
    max_score_ratio: float = typer.Option(0.95, "--max-score-ratio", help="negatives: skip candidates scoring above "
                                          "this times the query's lowest positive score (likely unlabelled "
                                          "positives); 0 turns the filter off."),
    keep_negatives: bool = typer.Option(False, "--keep-negatives", help="negatives: append mined negatives to the "
                                        "existing ones instead of replacing them."),
    keep_candidates: int = typer.Option(20, "--keep-candidates", min=1, help="teacher: top candidates recorded for "
                                        "rerank."),
    batch_size: int = typer.Option(64, "--batch-size", min=1, help="Texts per encoding batch."),
    seed: int = typer.Option(42, "--seed", help="negatives: seed of --sampling random."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace existing output files."),
    query_instruction: Optional[str] = typer.Option(None, "--query-instruction", help="negatives: instruction "
                                                    "prepended to every query when ranking (default: the model's "
                                                    "query prompt)."),
    torch_dtype: Optional[str] = typer.Option(None, "--torch-dtype", help=TORCH_DTYPE_HELP),
    attn_implementation: Optional[str] = typer.Option(None, "--attn-implementation", help=ATTN_HELP),
    format: Optional[str] = typer.Option(None, "--format", help="negatives: layout of the rows: drmix | st | "
                                         "tevatron | flag | beir | auto (default: detected; docs/data.md)."),
    columns: Optional[str] = typer.Option(None, "--columns", help="negatives: column mapping ROLE=COLUMN,... (e.g. "
                                          "query=question,positive=answer); see docs/data.md."),
    tokenize_num_proc: Optional[int] = tokenize_num_proc_option(),
    cache_embeddings: bool = cache_embeddings_option(),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="A bar per encoding pass (the corpus "
                                  "or pool, then the queries) in passages/s with the time left, on stderr."),
) -> None:
    """Mine training examples with a retriever: --mode negatives (hard negatives for labelled collections) or
    --mode teacher (DRAMA's teacher mining for unlabelled queries)."""
    if mode not in MODES:
        raise ConfigError(f"unknown --mode {mode!r}.", fix="use --mode negatives or --mode teacher.")
    given = {name for name in ctx.params
             if (src := ctx.get_parameter_source(name)) is not None and src.name not in ("DEFAULT", "DEFAULT_MAP")}
    other = MODES[1 - MODES.index(mode)]
    foreign = [f"--{name.replace('_', '-')}" for name in ONLY[other] if name in given]
    if foreign:
        raise ConfigError(f"--mode {mode} does not take {', '.join(foreign)} (options of --mode {other}).",
                          fix=f"drop them, or pass --mode {other}.")
    window = ranks or DEFAULT_RANKS[mode]
    if mode == "teacher":
        from drmix.cli.augment import mine_teacher

        if queries is None or corpus is None:
            raise ConfigError("--mode teacher needs --queries and --corpus.",
                              fix="pass --queries QUERIES.jsonl --corpus BEIR_DIR (unlabelled queries to mine for).")
        # under torchrun: the corpus encoded in shards (drmix.cli.sharded)
        with encoding(tokenize_num_proc, cache_embeddings), \
                launched_shards(output, "mine", folder=False, overwrite=overwrite):
            mine_teacher(queries, corpus, output, teacher=model, positives=positive_ranks, negatives=window,
                         keep_candidates=keep_candidates, batch_size=batch_size, overwrite=overwrite,
                         show_progress=progress)
        return
    if data is None:
        raise ConfigError("--mode negatives needs --data.",
                          fix="pass --data COLLECTION (or a folder of them); for unlabelled queries use "
                              "--mode teacher.")
    # under torchrun: each collection's pool encoded in shards (drmix.cli.sharded)
    with encoding(tokenize_num_proc, cache_embeddings), \
            launched_shards(output, "mine", folder=output.is_dir() or not output.suffix, overwrite=overwrite):
        mine_negatives(data, output, model=model, ranks=window, num_negatives=num_negatives, sampling=sampling,
                       max_score_ratio=max_score_ratio, keep_negatives=keep_negatives, batch_size=batch_size,
                       seed=seed, overwrite=overwrite, query_instruction=query_instruction, torch_dtype=torch_dtype,
                       attn_implementation=attn_implementation, format=format, columns=columns,
                       show_progress=progress)


def mine_negatives(data: str, output: Path, *, model: str | None, ranks: str, num_negatives: int, sampling: str,
                   max_score_ratio: float, keep_negatives: bool, batch_size: int, seed: int, overwrite: bool,
                   query_instruction: str | None, torch_dtype: str | None, attn_implementation: str | None,
                   format: str | None, columns: str | None, show_progress: bool = False) -> None:
    """``drmix mine --mode negatives``: hard negatives for every collection of ``data``."""
    from drmix.augment.mine import RankWindow, mine_collection
    from drmix.cli import console
    from drmix.model.encoder import load_encoder
    from drmix.retrieval.shards import writes_here

    if sampling not in ("top", "random"):
        raise ConfigError(f"unknown --sampling {sampling!r}.", fix="pass --sampling top or --sampling random.")
    if max_score_ratio < 0:
        raise ConfigError("--max-score-ratio must not be negative.", fix="pass a ratio such as 0.95, or 0 for off.")
    window = RankWindow.parse(ranks)
    pairs, column_map, source = _plan(data, output, format, columns)
    from drmix.outputs import claim_output

    for src, dst in pairs:                       # the output contract (drmix.outputs), before the model loads
        claim_output(dst, "file", overwrite=overwrite, inputs=[source, src])
    from drmix.model.instructions import query_prompt_for

    encoder = load_encoder(model, model_kwargs=model_kwargs(torch_dtype, attn_implementation))
    qp = None if query_instruction is None else query_prompt_for(encoder, None, explicit=query_instruction)
    for src, dst in pairs:
        stats = mine_collection(src, dst, encoder, window=window, num_negatives=num_negatives, sampling=sampling,
                                max_score_ratio=max_score_ratio or None, keep_negatives=keep_negatives, seed=seed,
                                batch_size=batch_size, model_name=model or "all-MiniLM-L6-v2", query_prompt=qp,
                                format=format, columns=column_map, show_progress=show_progress)
        if not writes_here():  # under torchrun: rank 0 reports
            continue
        console.print(f"{Path(src).name}: {stats.queries} queries, pool {stats.pool} documents, {stats.negatives} "
                      f"negatives mined (ranks {window}; {stats.filtered} filtered as likely positives; "
                      f"{stats.short} queries short) -> {dst}", soft_wrap=True)


def _plan(data: str, output: Path, format: str | None, columns: str | None):
    """``([(source, output file)], column map, the --data input)``: one pair per collection of ``data``."""
    from drmix.data.collections import check_sources, collection_folder_entries
    from drmix.data.spec import FORMATS, parse_columns

    if format is not None and format not in FORMATS:
        raise ConfigError(f"unknown --format {format!r}.", fix=f"use one of: {', '.join(FORMATS)}.")
    try:
        column_map = parse_columns(columns)
    except ValueError as e:
        raise ConfigError(f"--columns: {e}.", fix="write --columns query=COL,positive=COL[,negatives=COL].") from None
    check_sources([data])
    path = Path(data).expanduser()
    entries = collection_folder_entries(path)
    if entries is None:
        if output.is_dir():
            raise ConfigError("--output is a directory but --data is one collection.", path=output,
                              fix="pass a .jsonl file path for --output.")
        return [(data, output)], column_map, data
    if not entries:
        raise DataError("folder holds no collection files.", path=path,
                        fix="pass a collection file or a folder of them.")
    if output.exists() and not output.is_dir():
        raise ConfigError("--output is a file but --data is a folder.", path=output,
                          fix="pass a directory for --output.")
    return [(f, output / f"{f.stem if f.is_file() else f.name}.jsonl") for f in entries], column_map, path


def register(app: typer.Typer) -> None:
    """Add ``mine`` to the main app."""
    app.command("mine", help=MINE_HELP)(mine_command)


register_area(CommandArea("mine", register))
